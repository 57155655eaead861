// t-NEB as a service method: embeddings dataset -> Student-t mixture,
// density paths and a merge hierarchy over the surviving components;
// Assign places new rows at their most likely surviving component (after
// the stored standardisation).
//
// TnebParams: every zero (or unset) field means the paper default, so
// ridge 0, path_steps 0 or min_component_points 0 cannot be requested
// through the service. Artifacts: tree.json + point_leaf.npy (SaveTree) and
// the model files of core/tneb (SaveTnebModel). With a labelled dataset the
// model metadata also gets true_k and the ARI / NMI of the cut at true_k.
#include <cmath>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"
#include "core/metrics/metrics.h"
#include "core/tneb/tneb.h"
#include "server/methods/method.h"

namespace dendro::server {
namespace {

class TnebModelImpl final : public FittedModel {
 public:
  TnebModelImpl(Hierarchy tree, TnebModel model)
      : tree_(std::move(tree)), model_(std::move(model)) {}
  std::string_view method() const override { return "tneb"; }
  const Hierarchy& tree() const override { return tree_; }
  int64_t input_dim() const override { return model_.input_dim(); }
  std::map<std::string, std::string> metadata() const override { return tree_.metadata(); }
  absl::Status Save(const std::string& dir) const override {
    DENDRO_RETURN_IF_ERROR(SaveTree(tree_, dir));
    return SaveTnebModel(model_, dir);
  }
  absl::StatusOr<std::vector<int32_t>> AssignLeaves(const MatrixView& rows) const override {
    return model_.AssignLeaves(rows);
  }

 private:
  Hierarchy tree_;
  TnebModel model_;
};

TnebOptions OptionsFrom(const v1::TnebParams& p) {
  TnebOptions o;
  if (p.components() != 0) o.components = p.components();
  // A nu given by the caller is used as given (fixed, or the start and the
  // fixed candidate with learn_dof / auto_dof); without one the default
  // applies, which chooses nu by BIC in low dimensions (TnebOptions).
  if (p.dof() != 0) {
    o.dof = p.dof();
    o.auto_dof_low_dimension = false;
  }
  o.learn_dof = p.learn_dof();
  o.gaussian = p.gaussian();
  if (p.ridge() != 0) o.ridge = p.ridge();
  if (p.restarts() != 0) o.restarts = p.restarts();
  if (p.max_iterations() != 0) o.max_iterations = p.max_iterations();
  if (p.tolerance() != 0) o.tolerance = p.tolerance();
  if (p.neighbors() != 0) o.neighbors = p.neighbors();
  if (p.path_points() != 0) o.path_points = p.path_points();
  if (p.path_steps() != 0) o.path_steps = p.path_steps();
  if (p.learning_rate() != 0) o.learning_rate = p.learning_rate();
  if (p.eval_points() != 0) o.eval_points = p.eval_points();
  o.standardize = p.standardize();
  o.seed = p.seed();
  if (p.min_component_points() != 0) o.min_component_points = p.min_component_points();
  if (p.max_elongation() != 0) o.max_elongation = p.max_elongation();
  o.auto_dof = p.auto_dof();
  // An unknown name is rejected by Validate (CheckMerge) before any fit.
  // A merge order given is used in every dimension.
  if (absl::StatusOr<TnebMerge> m = ParseTnebMerge(p.merge()); !p.merge().empty() && m.ok()) {
    o.merge = *m;
    o.merge_by_dimension = false;
  }
  // An unknown name is rejected by Validate (CheckRestartRanking).
  if (absl::StatusOr<TnebRestartRanking> r = ParseTnebRestartRanking(p.rank_restarts_by());
      !p.rank_restarts_by().empty() && r.ok()) {
    o.rank_restarts_by = *r;
  }
  return o;
}

absl::Status CheckRestartRanking(const v1::TnebParams& p) {
  if (p.rank_restarts_by().empty()) return absl::OkStatus();
  absl::StatusOr<TnebRestartRanking> r = ParseTnebRestartRanking(p.rank_restarts_by());
  if (!r.ok()) return absl::InvalidArgumentError(absl::StrCat("tneb.", r.status().message()));
  return absl::OkStatus();
}

absl::Status CheckMerge(const v1::TnebParams& p) {
  if (p.merge().empty()) return absl::OkStatus();
  absl::StatusOr<TnebMerge> m = ParseTnebMerge(p.merge());
  if (!m.ok()) return absl::InvalidArgumentError(absl::StrCat("tneb.merge: ", m.status().message()));
  return absl::OkStatus();
}

// Upper bounds on the parameters whose size drives time or memory. Each is
// far above any useful value (the paper uses m = 25, 20 restarts, 100 path
// points, 200 steps, 1,024 evaluation points). auto_dof runs EM three times
// (nu fixed, nu learned, Gaussian), which triples time but not memory.
absl::Status CheckBounds(const TnebOptions& o, const v1::Dataset& dataset,
                         const JobLimits& limits) {
  DENDRO_RETURN_IF_ERROR(CheckAtMost("tneb.components", o.components, 10000,
                                     "mixture components"));
  DENDRO_RETURN_IF_ERROR(CheckAtMost("tneb.restarts", o.restarts, 1000, "EM restarts"));
  DENDRO_RETURN_IF_ERROR(CheckAtMost("tneb.max_iterations", o.max_iterations, 100000,
                                     "EM iterations per restart"));
  DENDRO_RETURN_IF_ERROR(CheckAtMost("tneb.neighbors", o.neighbors, 1000,
                                     "nearest components per component"));
  DENDRO_RETURN_IF_ERROR(CheckAtMost("tneb.path_points", o.path_points, 100000,
                                     "points per density path"));
  DENDRO_RETURN_IF_ERROR(CheckAtMost("tneb.path_steps", o.path_steps, 1000000,
                                     "optimisation steps per path"));
  DENDRO_RETURN_IF_ERROR(CheckAtMost("tneb.eval_points", o.eval_points, 10000000,
                                     "evaluation points per path"));
  // Peak memory: the responsibilities and log-densities (rows x m, a few
  // copies), m scale matrices with their factors and inverses, the
  // standardised copy of the data, and per-thread path buffers.
  const double n = static_cast<double>(dataset.rows());
  const double d = static_cast<double>(dataset.cols());
  const double m = o.components;
  const double threads = 64;
  const double bytes = 8 * (4 * n * m + 4 * m * d * d + n * d) +
                       threads * 8 * d * 4 * (o.path_points + o.eval_points);
  return CheckMemory("tneb", bytes, limits,
                     "rows x components responsibilities, components x d x d scale matrices "
                     "and the path buffers");
}

class Tneb final : public Method {
 public:
  std::string_view name() const override { return "tneb"; }

  absl::Status Validate(const v1::JobSpec& spec, const v1::Dataset& dataset,
                        const JobLimits& limits) const override {
    DENDRO_RETURN_IF_ERROR(CheckMerge(spec.tneb()));
    DENDRO_RETURN_IF_ERROR(CheckRestartRanking(spec.tneb()));
    const TnebOptions o = OptionsFrom(spec.tneb());
    DENDRO_RETURN_IF_ERROR(ValidateTnebOptions(o));
    DENDRO_RETURN_IF_ERROR(CheckBounds(o, dataset, limits));
    if (dataset.cols() < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("tneb needs embeddings with at least 2 columns; dataset ", dataset.id(),
                       " has ", dataset.cols()));
    }
    if (dataset.rows() < o.components) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tneb: dataset ", dataset.id(), " has ", dataset.rows(), " rows but ", o.components,
          " mixture components were requested (need at least one row per component)"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<FittedModel>> Fit(const LoadedDataset& dataset,
                                                   const v1::JobSpec& spec,
                                                   RunContext& ctx) const override {
    const TnebOptions o = OptionsFrom(spec.tneb());
    DENDRO_ASSIGN_OR_RETURN(TnebResult r, FitTneb(dataset.matrix(), o, ctx));
    Hierarchy tree = std::move(r.hierarchy);
    auto& md = tree.mutable_metadata();
    md["dataset_rows"] = absl::StrCat(dataset.info().rows());
    md["em_seconds"] = absl::StrFormat("%.3f", r.em_seconds);
    md["path_seconds"] = absl::StrFormat("%.3f", r.path_seconds);
    md["paths"] = absl::StrCat(r.edges.size());
    const absl::Span<const int64_t> labels = dataset.labels();
    if (!labels.empty()) {
      const int32_t true_k =
          static_cast<int32_t>(std::set<int64_t>(labels.begin(), labels.end()).size());
      md["true_k"] = absl::StrCat(true_k);
      if (true_k <= tree.num_leaves()) {
        DENDRO_ASSIGN_OR_RETURN(std::vector<int32_t> cut, tree.CutToK(true_k));
        std::vector<int64_t> pred(labels.size());
        for (size_t i = 0; i < pred.size(); ++i) pred[i] = cut[tree.point_leaf()[i]];
        DENDRO_ASSIGN_OR_RETURN(double ari, AdjustedRandIndex(labels, pred));
        DENDRO_ASSIGN_OR_RETURN(double nmi, NormalizedMutualInfo(labels, pred));
        md["ari_at_true_k"] = absl::StrFormat("%.6f", ari);
        md["nmi_at_true_k"] = absl::StrFormat("%.6f", nmi);
      }
    }
    return std::make_unique<TnebModelImpl>(std::move(tree), std::move(r.model));
  }

  absl::StatusOr<std::unique_ptr<FittedModel>> Load(const std::string& dir) const override {
    DENDRO_ASSIGN_OR_RETURN(Hierarchy tree, LoadTree(dir));
    DENDRO_ASSIGN_OR_RETURN(TnebModel model, LoadTnebModel(dir));
    if (model.mixture.num_components() != tree.num_leaves()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model files: the t-NEB model has ", model.mixture.num_components(),
                       " components but its tree has ", tree.num_leaves(), " leaves"));
    }
    return std::make_unique<TnebModelImpl>(std::move(tree), std::move(model));
  }
};

}  // namespace

const Method& TnebMethod() {
  static const Tneb* method = new Tneb();
  return *method;
}

}  // namespace dendro::server
