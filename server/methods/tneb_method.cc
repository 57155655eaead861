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
// JobSpec.warm_start (a refit after an append): FitTnebFrom runs the EM once
// from the base version's mixture; a base it cannot start from (fewer than
// two components) is fitted from scratch, which warm_start_note says.
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"
#include "core/metrics/metrics.h"
#include "core/tneb/graph.h"
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
  const TnebModel& model() const { return model_; }

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
  // An unknown name is rejected by Validate (CheckStandardize).
  if (absl::StatusOr<TnebStandardize> m = ParseTnebStandardize(p.standardize_mode());
      !p.standardize_mode().empty() && m.ok()) {
    o.standardize_mode = *m;
  }
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
  o.diagnose_k = p.diagnose_k();  // ValidateTnebOptions refuses a negative one
  return o;
}

absl::Status CheckRestartRanking(const v1::TnebParams& p) {
  if (p.rank_restarts_by().empty()) return absl::OkStatus();
  absl::StatusOr<TnebRestartRanking> r = ParseTnebRestartRanking(p.rank_restarts_by());
  if (!r.ok()) return absl::InvalidArgumentError(absl::StrCat("tneb.", r.status().message()));
  return absl::OkStatus();
}

absl::Status CheckStandardize(const v1::TnebParams& p) {
  if (p.standardize_mode().empty()) return absl::OkStatus();
  absl::StatusOr<TnebStandardize> m = ParseTnebStandardize(p.standardize_mode());
  if (!m.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tneb.standardize_mode: ", m.status().message()));
  }
  if (p.standardize() && *m != TnebStandardize::kOn) {
    return absl::InvalidArgumentError(
        absl::StrCat("tneb.standardize is true but tneb.standardize_mode is '",
                     p.standardize_mode(), "': set one of them"));
  }
  return absl::OkStatus();
}

absl::Status CheckMerge(const v1::TnebParams& p) {
  if (p.merge().empty()) return absl::OkStatus();
  absl::StatusOr<TnebMerge> m = ParseTnebMerge(p.merge());
  if (!m.ok()) return absl::InvalidArgumentError(absl::StrCat("tneb.merge: ", m.status().message()));
  return absl::OkStatus();
}

// The bound of Method::PeakMemoryBytes. The fit's phases run one after the
// other, but their buffers are added up (a bound, not a forecast):
//   * the mapped rows (float32) and their standardised copy (double);
//   * EM: responsibilities and log-densities (rows x m, a few copies) and m
//     scale matrices with their factors and inverses;
//   * paths: every pair's path_points x d points, Adam moments and gradient
//     (four doubles each), held for the whole optimisation. Pairs are each
//     component's `neighbors` nearest (deduplicated, so at most m (m - 1) /
//     2) and at most m - 1 bridges;
//   * per thread: the gradient's m blocks of 256 x d, and one evaluation
//     chunk of kMaxPollRows rows;
//   * with the graph merge (asked for, or tried by default above 10
//     columns when the density tree is degenerate): the neighbour graph's
//     sampled rows, lists and distance blocks (GraphPeakBytes).
double PeakBytes(const TnebOptions& o, const v1::Dataset& dataset) {
  const double n = static_cast<double>(dataset.rows());
  const double d = static_cast<double>(dataset.cols());
  const double m = o.components;
  const double threads = FitThreads();
  const double nearest = std::min(m * (m - 1.0) / 2.0, m * std::min<double>(o.neighbors, m - 1));
  const double pairs = nearest + (m - 1.0);
  const double data = 4 * n * d + 8 * n * d;
  const double em = 8 * (4 * n * m + 4 * m * d * d);
  const double paths = 4 * 8 * pairs * o.path_points * d;
  const double per_thread = 8 * (m * 256 * d + 2 * 256 * m) + 8 * 16384 * (d + m);
  const double graph =
      TnebMergeOrder(o, dataset.cols()) == TnebMerge::kGraph || TnebGraphFallback(o, dataset.cols())
          ? static_cast<double>(GraphPeakBytes(dataset.rows(), dataset.cols())) +
                threads * 8.0 * 256.0 * std::min<double>(n, kGraphMaxRows)
          : 0.0;
  return data + em + paths + threads * per_thread + graph;
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
  DENDRO_RETURN_IF_ERROR(CheckAtMost("tneb.min_component_points", o.min_component_points,
                                     dataset.rows(), "a component needs more points than this"));
  // Scales and steps: finite, and far above useful values (nu = 1e6 is a
  // Gaussian to every digit the densities carry; the data are compared
  // after standardisation, where a ridge of 1e6 erases every shape).
  if (!o.gaussian) {
    DENDRO_RETURN_IF_ERROR(CheckRealAtMost("tneb.dof", o.dof, 1e6, "Student-t degrees of freedom"));
  }
  DENDRO_RETURN_IF_ERROR(CheckRealAtMost("tneb.ridge", o.ridge, 1e6, "added to each scale matrix"));
  DENDRO_RETURN_IF_ERROR(CheckRealAtMost("tneb.tolerance", o.tolerance, 1.0,
                                         "change of the mean log-likelihood per EM step"));
  DENDRO_RETURN_IF_ERROR(CheckRealAtMost("tneb.learning_rate", o.learning_rate, 100.0,
                                         "Adam step size of the paths"));
  DENDRO_RETURN_IF_ERROR(CheckRealAtMost("tneb.max_elongation", o.max_elongation, 1e12,
                                         "eigenvalue ratio / d that drops a component"));
  return CheckMemory("tneb", PeakBytes(o, dataset), limits,
                     "rows x components responsibilities, components x d x d scale matrices "
                     "and every path's points with their Adam moments and gradients");
}

class Tneb final : public Method {
 public:
  std::string_view name() const override { return "tneb"; }
  bool warm_starts() const override { return true; }

  absl::Status Validate(const v1::JobSpec& spec, const v1::Dataset& dataset,
                        const JobLimits& limits) const override {
    DENDRO_RETURN_IF_ERROR(CheckMerge(spec.tneb()));
    DENDRO_RETURN_IF_ERROR(CheckStandardize(spec.tneb()));
    DENDRO_RETURN_IF_ERROR(CheckRestartRanking(spec.tneb()));
    const TnebOptions o = OptionsFrom(spec.tneb());
    // The bounds first: their messages name the service's fields.
    DENDRO_RETURN_IF_ERROR(CheckBounds(o, dataset, limits));
    DENDRO_RETURN_IF_ERROR(ValidateTnebOptions(o));
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
    // What the fit would find in the data, from the upload's statistics.
    return CheckNoConstantColumn("tneb", dataset);
  }

  double PeakMemoryBytes(const v1::JobSpec& spec, const v1::Dataset& dataset) const override {
    return PeakBytes(OptionsFrom(spec.tneb()), dataset);
  }

  absl::StatusOr<std::unique_ptr<FittedModel>> Fit(const LoadedDataset& dataset,
                                                   const v1::JobSpec& spec,
                                                   RunContext& ctx) const override {
    const TnebOptions o = OptionsFrom(spec.tneb());
    DENDRO_ASSIGN_OR_RETURN(TnebResult r, FitTneb(dataset.matrix(), o, ctx));
    return Fitted(std::move(r), dataset, {});
  }

  // A warm start from `base`, fitted on this dataset's first rows (the job
  // manager checked the lineage).
  absl::StatusOr<std::unique_ptr<FittedModel>> FitFrom(const FittedModel& base,
                                                       const LoadedDataset& dataset,
                                                       const v1::JobSpec& spec,
                                                       RunContext& ctx) const override {
    const TnebOptions o = OptionsFrom(spec.tneb());
    std::map<std::string, std::string> md = WarmStartMetadata(spec);
    const auto* previous = dynamic_cast<const TnebModelImpl*>(&base);
    absl::StatusOr<TnebResult> warm =
        previous == nullptr ? absl::FailedPreconditionError("the version is not a tneb model")
                            : FitTnebFrom(previous->model(), dataset.matrix(), o, ctx);
    DENDRO_ASSIGN_OR_RETURN(const bool from_scratch, FitsFromScratch(warm.status(), &md));
    if (from_scratch) {
      warm = FitTneb(dataset.matrix(), o, ctx);
    } else {
      md["warm_start_rows"] = absl::StrCat(dataset.info().rows() -
                                           static_cast<int64_t>(base.tree().point_leaf().size()));
    }
    if (!warm.ok()) return warm.status();
    return Fitted(*std::move(warm), dataset, std::move(md));
  }

  // The served model of a fit, with the job's metadata (`md_in` last).
  static absl::StatusOr<std::unique_ptr<FittedModel>> Fitted(
      TnebResult r, const LoadedDataset& dataset, std::map<std::string, std::string> md_in) {
    Hierarchy tree = std::move(r.hierarchy);
    auto& md = tree.mutable_metadata();
    for (auto& [key, value] : md_in) md[key] = std::move(value);
    md["dataset_rows"] = absl::StrCat(dataset.info().rows());
    md["em_seconds"] = absl::StrFormat("%.3f", r.em_seconds);
    md["path_seconds"] = absl::StrFormat("%.3f", r.path_seconds);
    md["paths"] = absl::StrCat(r.edges.size());
    // The job's result says when the tree at the diagnosed cut is degenerate
    // (TnebDegenerateShare); the diag_* keys carry the rest.
    md["diagnostics"] = TnebDiagnosticsSummary(r.diagnostics);
    if (r.diagnostics.degenerate) md["warning"] = r.diagnostics.degenerate_reason;
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
