// gHHC as a service method: embeddings dataset -> the extracted n-ary tree
// and its binary refinement, whose leaf clusters are the groups of points
// sharing a parent node; Assign places new
// rows under the nearest node that holds training points (same rule).
//
// GhhcParams: every field left at 0 takes the core default (GhhcOptions):
// internal_nodes 100, learning_rate 0.01, batch_size 100, triples
// 200,000, neighbors 5, margin 0.25, seed 1, init_sample automatic,
// point_norm 0.9, max_node_norm 0.8, gumbel_temperature 1, projection_dim 0
// (none; projection "pca" when set), margin_every 10 (-1: no margin
// phases), margin_steps 1, margin_learning_rate learning_rate / 10, link
// "sigmoid". (So a margin or a noise scale of exactly 0 cannot be requested
// through the service.)
//
// JobSpec.warm_start (a refit after an append): FitGhhcFrom starts from the
// base version's nodes and preprocessing; a base that learned its point
// embeddings cannot be continued, and the job then fits from scratch and
// says so in the version's metadata (warm_start_note).
//
// Artifacts: tree.json + point_leaf.npy (SaveTree) and the gHHC model files
// (SaveGhhcModel: ghhc_model.json, ghhc_mean.npy, ghhc_nodes.npy,
// ghhc_node_leaf.npy, ghhc_node_parent.npy).
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"
#include "core/ghhc/ghhc.h"
#include "core/metrics/metrics.h"
#include "server/methods/method.h"

namespace dendro::server {
namespace {

class GhhcFitted final : public FittedModel {
 public:
  GhhcFitted(GhhcModel model, Hierarchy tree, Hierarchy coarse)
      : model_(std::move(model)), tree_(std::move(tree)), coarse_(std::move(coarse)) {}
  std::string_view method() const override { return "ghhc"; }
  const Hierarchy& tree() const override { return tree_; }
  const Hierarchy& coarse_tree() const override { return coarse_; }
  int64_t input_dim() const override { return model_.dim; }
  std::map<std::string, std::string> metadata() const override { return tree_.metadata(); }
  absl::Status Save(const std::string& dir) const override {
    DENDRO_RETURN_IF_ERROR(SaveTree(tree_, dir));
    return SaveGhhcModel(model_, dir);
  }
  absl::StatusOr<std::vector<int32_t>> AssignLeaves(const MatrixView& rows) const override {
    return AssignGhhcLeaves(model_, rows);
  }
  const GhhcModel& model() const { return model_; }

 private:
  GhhcModel model_;
  Hierarchy tree_;    // refined (binary)
  Hierarchy coarse_;  // as extracted (the paper's tree)
};

absl::StatusOr<GhhcOptions> OptionsFromSpec(const v1::JobSpec& spec) {
  const v1::GhhcParams& p = spec.ghhc();
  GhhcOptions o;
  auto positive_or_zero = [](auto v, const char* name) -> absl::Status {
    if (!(v >= 0)) {  // NaN is refused too, never replaced by the default
      return absl::InvalidArgumentError(
          absl::StrCat("ghhc.", name, " must be >= 0 (0: default), got ", v));
    }
    return absl::OkStatus();
  };
  DENDRO_RETURN_IF_ERROR(positive_or_zero(p.internal_nodes(), "internal_nodes"));
  DENDRO_RETURN_IF_ERROR(positive_or_zero(p.learning_rate(), "learning_rate"));
  DENDRO_RETURN_IF_ERROR(positive_or_zero(p.batch_size(), "batch_size"));
  DENDRO_RETURN_IF_ERROR(positive_or_zero(p.triples(), "triples"));
  DENDRO_RETURN_IF_ERROR(positive_or_zero(p.neighbors(), "neighbors"));
  DENDRO_RETURN_IF_ERROR(positive_or_zero(p.margin(), "margin"));
  DENDRO_RETURN_IF_ERROR(positive_or_zero(p.init_sample(), "init_sample"));
  DENDRO_RETURN_IF_ERROR(positive_or_zero(p.point_norm(), "point_norm"));
  DENDRO_RETURN_IF_ERROR(positive_or_zero(p.max_node_norm(), "max_node_norm"));
  if (!(p.gumbel_temperature() >= 0 || p.gumbel_temperature() == -1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ghhc.gumbel_temperature must be >= 0 (0: default) or -1 (no noise), got ",
                     p.gumbel_temperature()));
  }
  DENDRO_RETURN_IF_ERROR(positive_or_zero(p.point_learning_rate(), "point_learning_rate"));
  DENDRO_RETURN_IF_ERROR(positive_or_zero(p.validate_every(), "validate_every"));
  if (p.validation_triples() < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ghhc.validation_triples must be >= -1 (0: default, -1: none), got ",
                     p.validation_triples()));
  }
  if (p.internal_nodes() > 0) o.internal_nodes = p.internal_nodes();
  if (p.learning_rate() > 0) o.learning_rate = p.learning_rate();
  if (p.batch_size() > 0) o.batch_size = p.batch_size();
  if (p.triples() > 0) o.triples = p.triples();
  if (p.neighbors() > 0) o.neighbors = p.neighbors();
  if (p.margin() > 0) o.margin = p.margin();
  if (p.has_seed()) o.seed = p.seed();
  if (p.init_sample() > 0) o.init_sample = p.init_sample();
  if (p.point_norm() > 0) o.point_norm = p.point_norm();
  if (p.max_node_norm() > 0) o.max_node_norm = p.max_node_norm();
  if (p.gumbel_temperature() != 0) {
    o.gumbel_temperature = p.gumbel_temperature() < 0 ? 0.0 : p.gumbel_temperature();
  }
  o.learn_points = p.learn_points();
  if (p.point_learning_rate() > 0) o.point_learning_rate = p.point_learning_rate();
  if (p.validation_triples() != 0) {
    o.validation_triples = p.validation_triples() < 0 ? 0 : p.validation_triples();
  }
  if (p.validate_every() > 0) o.validate_every = p.validate_every();
  o.step_budget = !p.constant_step_size();
  auto named = [](const absl::Status& s) {
    return absl::InvalidArgumentError(absl::StrCat("ghhc.", s.message()));
  };
  if (!p.points().empty()) {
    absl::StatusOr<GhhcPoints> points = ParseGhhcPoints(p.points());
    if (!points.ok()) return named(points.status());
    if (p.learn_points() && *points != GhhcPoints::kLearned) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ghhc.points \"", p.points(), "\" contradicts learn_points; set one of them"));
    }
    if (*points == GhhcPoints::kAuto && o.validation_triples == 0) {
      return absl::InvalidArgumentError(
          "ghhc.points \"auto\" compares held-out triple accuracies, so validation_triples "
          "must not be -1");
    }
    SetGhhcPoints(*points, &o);
  }
  if (!p.standardize().empty()) {
    absl::StatusOr<GhhcStandardize> standardize = ParseGhhcStandardize(p.standardize());
    if (!standardize.ok()) return named(standardize.status());
    o.standardize = *standardize;
  }
  if (!p.tree().empty()) {
    absl::StatusOr<GhhcTree> tree = ParseGhhcTree(p.tree());
    if (!tree.ok()) return named(tree.status());
    o.tree = *tree;
  }
  DENDRO_RETURN_IF_ERROR(positive_or_zero(p.projection_dim(), "projection_dim"));
  DENDRO_RETURN_IF_ERROR(positive_or_zero(p.margin_steps(), "margin_steps"));
  DENDRO_RETURN_IF_ERROR(positive_or_zero(p.margin_learning_rate(), "margin_learning_rate"));
  if (p.margin_every() < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ghhc.margin_every must be >= -1 (0: default, -1: never), got ", p.margin_every()));
  }
  o.projection_dim = p.projection_dim();
  o.center = !p.no_center();
  if (p.margin_every() != 0) o.margin_every = p.margin_every() < 0 ? 0 : p.margin_every();
  if (p.margin_steps() > 0) o.margin_steps = p.margin_steps();
  if (p.margin_learning_rate() > 0) o.margin_learning_rate = p.margin_learning_rate();
  if (!p.link().empty()) {
    absl::StatusOr<GhhcLink> link = ParseGhhcLink(p.link());
    if (!link.ok()) return named(link.status());
    o.link = *link;
  }
  if (!p.projection().empty()) {
    absl::StatusOr<GhhcProjection> projection = ParseGhhcProjection(p.projection());
    if (!projection.ok()) return named(projection.status());
    o.projection = *projection;
  }
  DENDRO_RETURN_IF_ERROR(ValidateGhhcOptions(o));
  return o;
}

// The bound of Method::PeakMemoryBytes: the mapped rows, their centred
// (and projected) copy, the kNN table (k int32 per row) and, while it is
// searched, each thread's candidate lists (a distance and an id per
// neighbour of every query in the cell it works on: at most every row, when
// one cell holds them all), the nodes with their gradients, and a batch's
// triples; with learned points (or the points chosen by validation, whose
// second fit learns them) also the embeddings, their Adam moments,
// gradients and the kept copy (5 float32 N x p arrays).
double PeakBytes(const GhhcOptions& o, const v1::Dataset& dataset) {
  const double n = static_cast<double>(dataset.rows());
  const double d = static_cast<double>(dataset.cols());
  const double p = o.projection_dim > 0 ? o.projection_dim : d;
  const double k = std::min<double>(o.neighbors, n - 1);  // the core's clamp
  const double knn = 4 * n * k + FitThreads() * 8.0 * n * k;
  return 4 * n * d + 8 * n * p + knn + 8.0 * 4 * o.internal_nodes * p +
         8.0 * 3 * o.batch_size * p * 2 +
         (o.learn_points || GhhcChoosesPoints(o, dataset.rows()) ? 20.0 * n * p : 0.0);
}

// Upper bounds on the parameters whose size drives time or memory. A tree
// needs no more internal nodes than points (beyond the default's 100), and
// each bound is far above the paper's settings (M <= 2,000, batches of 100).
absl::Status CheckBounds(const GhhcOptions& o, const v1::Dataset& dataset,
                         const JobLimits& limits) {
  DENDRO_RETURN_IF_ERROR(CheckAtMost("ghhc.internal_nodes", o.internal_nodes,
                                     std::max<int64_t>(100, dataset.rows()),
                                     "no more internal nodes than the dataset's rows"));
  DENDRO_RETURN_IF_ERROR(CheckAtMost("ghhc.batch_size", o.batch_size, 1000000,
                                     "triples per mini-batch"));
  // The triple count drives time (and the anchors are drawn for all of them
  // before training starts): 5,000 times the default is far beyond any
  // useful run, and a shorter one is still stopped by a cancel.
  DENDRO_RETURN_IF_ERROR(CheckAtMost("ghhc.triples", o.triples, int64_t{1000000000},
                                     "triples seen in total"));
  // Step sizes and scales: far above useful values (the paper's steps are
  // 0.01 and below; Poincare distances between nodes inside radius 0.9 stay
  // below 6), and finite.
  DENDRO_RETURN_IF_ERROR(
      CheckRealAtMost("ghhc.learning_rate", o.learning_rate, 100.0, "RSGD step size"));
  DENDRO_RETURN_IF_ERROR(CheckRealAtMost("ghhc.margin", o.margin, 100.0, "margin gamma"));
  DENDRO_RETURN_IF_ERROR(CheckRealAtMost("ghhc.margin_learning_rate", o.margin_learning_rate,
                                         100.0, "margin-phase step size"));
  DENDRO_RETURN_IF_ERROR(CheckRealAtMost("ghhc.point_learning_rate", o.point_learning_rate,
                                         100.0, "learned points' Adam step size"));
  DENDRO_RETURN_IF_ERROR(CheckRealAtMost("ghhc.gumbel_temperature", o.gumbel_temperature,
                                         1000.0, "Gumbel noise scale"));
  DENDRO_RETURN_IF_ERROR(CheckAtMost("ghhc.neighbors", o.neighbors, 1000,
                                     "nearest neighbours per point"));
  DENDRO_RETURN_IF_ERROR(CheckAtMost("ghhc.validation_triples", o.validation_triples, 1000000,
                                     "held-out triples scored per check"));
  DENDRO_RETURN_IF_ERROR(CheckAtMost("ghhc.margin_steps", o.margin_steps, 1000000,
                                     "RSGD steps per margin phase"));
  return CheckMemory("ghhc", PeakBytes(o, dataset), limits,
                     "the data copy, kNN lists, internal nodes and a batch of triples");
}

class Ghhc final : public Method {
 public:
  std::string_view name() const override { return "ghhc"; }
  bool warm_starts() const override { return true; }

  absl::Status Validate(const v1::JobSpec& spec, const v1::Dataset& dataset,
                        const JobLimits& limits) const override {
    if (dataset.rows() < 3) {
      return absl::InvalidArgumentError(
          absl::StrCat("ghhc needs at least 3 points (one triple); dataset ", dataset.id(), " has ",
                       dataset.rows()));
    }
    if (dataset.cols() < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("ghhc needs at least 1 column; dataset ", dataset.id(), " has none"));
    }
    DENDRO_ASSIGN_OR_RETURN(GhhcOptions options, OptionsFromSpec(spec));
    if (options.projection_dim >= dataset.cols()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ghhc.projection_dim must be below the dataset's ", dataset.cols(),
          " columns (0: no projection), got ", options.projection_dim));
    }
    return CheckBounds(options, dataset, limits);
  }

  double PeakMemoryBytes(const v1::JobSpec& spec, const v1::Dataset& dataset) const override {
    absl::StatusOr<GhhcOptions> options = OptionsFromSpec(spec);
    return options.ok() ? PeakBytes(*options, dataset) : 0.0;
  }

  absl::StatusOr<std::unique_ptr<FittedModel>> Fit(const LoadedDataset& dataset,
                                                   const v1::JobSpec& spec,
                                                   RunContext& ctx) const override {
    DENDRO_ASSIGN_OR_RETURN(GhhcOptions options, OptionsFromSpec(spec));
    DENDRO_ASSIGN_OR_RETURN(GhhcResult result, FitGhhc(dataset.matrix(), options, ctx));
    return Fitted(std::move(result), options, dataset, {});
  }

  // A warm start from `base`, fitted on this dataset's first rows (the job
  // manager checked the lineage).
  absl::StatusOr<std::unique_ptr<FittedModel>> FitFrom(const FittedModel& base,
                                                       const LoadedDataset& dataset,
                                                       const v1::JobSpec& spec,
                                                       RunContext& ctx) const override {
    DENDRO_ASSIGN_OR_RETURN(GhhcOptions options, OptionsFromSpec(spec));
    std::map<std::string, std::string> md = WarmStartMetadata(spec);
    const auto* previous = dynamic_cast<const GhhcFitted*>(&base);
    absl::StatusOr<GhhcResult> warm =
        previous == nullptr
            ? absl::FailedPreconditionError("the version is not a ghhc model")
            : FitGhhcFrom(previous->model(),
                          static_cast<int64_t>(previous->tree().point_leaf().size()),
                          dataset.matrix(), options, ctx);
    DENDRO_ASSIGN_OR_RETURN(const bool from_scratch, FitsFromScratch(warm.status(), &md));
    if (from_scratch) warm = FitGhhc(dataset.matrix(), options, ctx);
    if (!warm.ok()) return warm.status();
    return Fitted(*std::move(warm), options, dataset, std::move(md));
  }

  // The served model of a fit, with the job's metadata (`md_in` last).
  static absl::StatusOr<std::unique_ptr<FittedModel>> Fitted(
      GhhcResult result, const GhhcOptions& options, const LoadedDataset& dataset,
      std::map<std::string, std::string> md_in) {
    Hierarchy tree = std::move(result.hierarchy);
    Hierarchy coarse = std::move(result.coarse_hierarchy);
    std::map<std::string, std::string> md = std::move(md_in);
    md["dataset_rows"] = absl::StrCat(dataset.info().rows());
    md["leaf_clusters"] = absl::StrCat(result.stats.leaf_clusters);
    md["initial_objective"] = absl::StrCat(result.stats.initial_objective);
    md["exact_knn"] = result.stats.exact_knn ? "true" : "false";
    md["gumbel_temperature"] = absl::StrCat(options.gumbel_temperature);
    md["init_sample"] = absl::StrCat(result.stats.init_sample);
    md["margin_every"] = absl::StrCat(options.margin_every);
    md["margin_steps"] = absl::StrCat(options.margin_steps);
    md["seconds"] = absl::StrFormat("knn %.2f, init %.2f, train %.2f, extract %.2f",
                                    result.stats.knn_seconds, result.stats.init_seconds,
                                    result.stats.train_seconds, result.stats.extract_seconds);
    // With labels: dendrogram purity over the points as leaves (the paper's
    // evaluation; equal to the purity of this tree with its point_leaf).
    // Reported for the extracted tree (the paper's), and for its binary
    // refinement, which is what exports and cuts use.
    const absl::Span<const int64_t> labels = dataset.labels();
    if (!labels.empty()) {
      absl::StatusOr<double> dp = DendrogramPurity(coarse, {}, labels);
      if (dp.ok()) md["dendrogram_purity"] = absl::StrFormat("%.6f", *dp);
      absl::StatusOr<double> refined = DendrogramPurity(tree, {}, labels);
      if (refined.ok()) md["dendrogram_purity_refined"] = absl::StrFormat("%.6f", *refined);
    }
    for (const auto& [k, v] : md) {
      tree.mutable_metadata()[k] = v;
      coarse.mutable_metadata()[k] = v;
    }
    return std::make_unique<GhhcFitted>(std::move(result.model), std::move(tree),
                                        std::move(coarse));
  }

  absl::StatusOr<std::unique_ptr<FittedModel>> Load(const std::string& dir) const override {
    DENDRO_ASSIGN_OR_RETURN(Hierarchy saved, LoadTree(dir));
    DENDRO_ASSIGN_OR_RETURN(GhhcModel model, LoadGhhcModel(dir));
    int32_t leaves = 0, max_leaf = -1;
    for (int32_t l : model.node_leaf) {
      leaves += l >= 0 ? 1 : 0;
      max_leaf = std::max(max_leaf, l);
    }
    if (leaves != saved.num_leaves() || max_leaf != leaves - 1) {
      return absl::InvalidArgumentError(absl::StrCat("model files: the gHHC model has ", leaves,
                                                     " nodes holding leaves but tree.json has ",
                                                     saved.num_leaves(), " leaves"));
    }
    // Both trees are rebuilt from the nodes, so models saved before trees
    // were refined load with the same refinement as new ones.
    DENDRO_ASSIGN_OR_RETURN(GhhcTrees trees, GhhcModelTrees(model, &saved));
    return std::make_unique<GhhcFitted>(std::move(model), std::move(trees.refined),
                                        std::move(trees.coarse));
  }
};

}  // namespace

const Method& GhhcMethod() {
  static const Ghhc* method = new Ghhc();
  return *method;
}

}  // namespace dendro::server
