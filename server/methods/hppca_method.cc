// Hierarchical PPCA as a service method: a labelled features dataset ->
// a classifier (JobSpec.hppca), or an existing classifier plus a labelled
// dataset of new classes -> a grown classifier (JobSpec.hppca_add, through
// Method::BaseModel / FitFrom). Predict answers top-k classes per row;
// AssignLeaves is the top-1 class (the leaf) at the model's default T.
//
// HppcaTrainParams: zero means the paper default for q and r (50, capped at
// the features' dimension d), lambda (0.01), kmeans_iterations (50) and
// default_top_t (5), so q = 0 (RBF neurons) cannot be requested through the
// service; superclasses 0 = the cost model's choice (about
// sqrt(K * default_top_t)), -1 = flat; seeding_rank 0 = the default (10), -1 =
// all q directions; scoring "" = "auto".
// Artifacts: core/hppca's model directory (which includes tree.json and
// point_leaf.npy as SaveTree writes them).
#include <algorithm>
#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"
#include "core/hppca/hppca.h"
#include "server/methods/method.h"

namespace dendro::server {
namespace {

class HppcaFitted final : public FittedModel {
 public:
  explicit HppcaFitted(HppcaModel model) : model_(std::move(model)) {}
  std::string_view method() const override { return "hppca"; }
  const Hierarchy& tree() const override { return model_.hierarchy(); }
  const Hierarchy& coarse_tree() const override { return model_.coarse_hierarchy(); }
  int64_t input_dim() const override { return model_.dim(); }
  std::map<std::string, std::string> metadata() const override {
    auto md = model_.hierarchy().metadata();
    md["model_memory_bytes"] = absl::StrCat(model_.MemoryBytes());
    return md;
  }
  absl::Status Save(const std::string& dir) const override { return model_.Save(dir); }

  absl::StatusOr<std::vector<int32_t>> AssignLeaves(const MatrixView& rows) const override {
    DENDRO_ASSIGN_OR_RETURN(HppcaPrediction p, model_.Predict(rows, HppcaPredictOptions()));
    return std::move(p.classes);
  }

  absl::StatusOr<Prediction> Predict(const MatrixView& rows,
                                     const PredictOptions& options) const override {
    HppcaPredictOptions o;
    o.top_t = options.top_t;
    o.top_k = options.top_k > 0 ? options.top_k : 1;
    o.flat = options.flat;
    DENDRO_ASSIGN_OR_RETURN(HppcaPrediction p, model_.Predict(rows, o));
    Prediction out;
    out.top_k = p.top_k;
    out.top_t = p.top_t;
    out.labels = std::move(p.labels);
    out.scores = std::move(p.scores);
    out.superclasses = std::move(p.superclasses);
    out.classes_evaluated = std::move(p.classes_evaluated);
    return out;
  }

  // Flat scoring reads every class's basis for every row: rows evaluated
  // together share that pass over the model (measured: concurrent single-row
  // calls 2.6x faster in batches). Hierarchical rows read only the opened
  // super-classes' classes, which a few rows seldom share; screened in
  // binary16 (HppcaModel::screens_rows) they still share the super-class
  // products, so 32-row calls cost 0.7x per row of single rows; scored in
  // float32 batches of up to 32 rows cost as much per row as single rows
  // (docs/benchmarks.md).
  bool BatchingPays(const PredictOptions* options) const override {
    const bool flat = options == nullptr
                          ? model_.default_flat()  // AssignLeaves: default scoring
                          : options->flat || (options->top_t == 0 && model_.default_flat());
    return flat || model_.screens_rows();
  }

  absl::StatusOr<ClassTable> Classes() const override {
    ClassTable t;
    const int32_t k = model_.num_classes();
    t.labels.assign(model_.labels().begin(), model_.labels().end());
    t.superclasses.resize(k);
    t.train_counts.resize(k);
    for (int32_t c = 0; c < k; ++c) {
      t.superclasses[c] = model_.superclass_of(c);
      t.train_counts[c] = model_.class_count(c);
    }
    t.num_superclasses = model_.num_superclasses();
    t.names = model_.hierarchy().leaf_names();
    return t;
  }

  const HppcaModel& model() const { return model_; }

 private:
  HppcaModel model_;
};

// `cols`: the features' dimension d, which caps the default q and r (the
// paper's 50 assumes d in the hundreds).
absl::StatusOr<HppcaOptions> OptionsFrom(const v1::HppcaTrainParams& p, int64_t cols) {
  HppcaOptions o;
  if (!p.scoring().empty()) {
    absl::StatusOr<HppcaScoring> scoring = ParseHppcaScoring(p.scoring());
    if (!scoring.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("hppca.", scoring.status().message()));
    }
    o.scoring = *scoring;
  }
  o.superclasses = p.superclasses();
  o.q = p.q() != 0 ? p.q() : static_cast<int32_t>(std::min<int64_t>(o.q, cols));
  o.r = p.r() != 0 ? p.r() : static_cast<int32_t>(std::min<int64_t>(o.r, cols));
  if (p.lambda() != 0) o.lambda = p.lambda();
  o.score = p.log_det_score() ? PpcaScore::kLogDet : PpcaScore::kMahalanobis;
  o.raw_data_clustering = p.raw_data_clustering();
  if (p.kmeans_iterations() != 0) o.kmeans_iterations = p.kmeans_iterations();
  o.seed = p.seed();
  if (p.default_top_t() != 0) o.default_top_t = p.default_top_t();
  if (p.seeding_rank() > 0) o.seeding_rank = p.seeding_rank();
  if (p.seeding_rank() == -1) o.seeding_rank = 0;  // all q directions
  return o;
}

absl::Status NeedLabels(const v1::Dataset& dataset, const char* what) {
  if (!dataset.has_labels()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " needs a labelled dataset (features plus one class label per row); dataset ",
        dataset.id(), " has no labels"));
  }
  return absl::OkStatus();
}

class Hppca final : public Method {
 public:
  std::string_view name() const override { return "hppca"; }

  // leaf_names name label values: leaf_names[v] names the class labelled v
  // (how string labels arrive: mapped to 0 .. C-1 in sorted order).
  std::string_view leaf_names_refusal() const override { return ""; }
  bool leaves_are_classes() const override { return true; }
  absl::Status Validate(const v1::JobSpec& spec, const v1::Dataset& dataset,
                        const JobLimits& limits) const override {
    if (absl::Status s = CheckLeafNames(LabelNames(spec), spec.leaf_names_size()); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("leaf_names: ", s.message(), " (leaf_names[v] names class label v)"));
    }
    if (spec.has_hppca_add()) {
      if (spec.hppca_add().base().name().empty()) {
        return absl::InvalidArgumentError("hppca_add: base.name (the model to grow) is required");
      }
      if (spec.hppca_add().base().version() < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "hppca_add: base.version must be >= 0 (0: latest), got ",
            spec.hppca_add().base().version()));
      }
      DENDRO_RETURN_IF_ERROR(NeedLabels(dataset, "hppca_add"));
      // New classes need two rows each, as at training; one class alone is
      // fine (the base has the others).
      return CheckClassSizes("hppca_add", dataset, 1, 2);
    }
    if (!spec.has_hppca()) return absl::InvalidArgumentError("job spec has no hppca parameters");
    DENDRO_RETURN_IF_ERROR(NeedLabels(dataset, "hppca"));
    DENDRO_RETURN_IF_ERROR(CheckClassSizes("hppca", dataset, 2, 2));
    if (dataset.rows() < 4) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hppca: dataset ", dataset.id(), " has ", dataset.rows(),
          " rows; a classifier needs at least 2 classes of at least 2 rows"));
    }
    if (spec.hppca().seeding_rank() < -1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hppca.seeding_rank = ", spec.hppca().seeding_rank(),
          " must be >= 1, 0 for the default (10) or -1 for all q directions"));
    }
    DENDRO_ASSIGN_OR_RETURN(const HppcaOptions o, OptionsFrom(spec.hppca(), dataset.cols()));
    DENDRO_RETURN_IF_ERROR(ValidateHppcaOptions(o, dataset.cols()));
    DENDRO_RETURN_IF_ERROR(CheckAtMost("hppca.superclasses", o.superclasses, dataset.rows() / 2,
                                       "at most one super-class per two training rows"));
    DENDRO_RETURN_IF_ERROR(CheckAtMost("hppca.kmeans_iterations", o.kmeans_iterations, 10000,
                                       "super-class k-means rounds"));
    DENDRO_RETURN_IF_ERROR(CheckAtMost("hppca.seeding_rank", spec.hppca().seeding_rank(),
                                       dataset.cols(),
                                       "directions per class in the seeding, at most d"));
    DENDRO_RETURN_IF_ERROR(CheckRealAtMost("hppca.lambda", o.lambda, 1e12,
                                           "noise variance added to every class"));
    DENDRO_RETURN_IF_ERROR(CheckMemory("hppca", PeakMemoryBytes(spec, dataset), limits,
                                       "the rows grouped by class, per-thread d x d "
                                       "covariances and up to rows / 2 class models"));
    return CheckAtMost("hppca.default_top_t", o.default_top_t, 100000,
                       "super-classes opened per prediction");
  }

  // The class count is known only once the labels are read, so the bound
  // takes the most a dataset allows, rows / 2 (a class needs two rows):
  // the mapped rows and labels and their copy grouped by class; per thread
  // the d x d scatter (or Gram) matrix with its eigenvectors; per class its
  // model (q + 2 vectors of d, held four times: fitted in double, as the
  // float scorer, as the Gaussian k-means clusters, and as saved); the
  // k-means divergences, their cache and the seeding's distances (classes x
  // super-classes each) and the super-class models; and 16 MiB for the
  // fit's threads and allocator arenas, which a small fit can otherwise
  // exceed (measured: 18.8 MiB at 4,000 x 64 with 2,000 classes). A job
  // that grows a model adds the base model's classes, which the same bound
  // covers for bases of up to rows / 2 classes.
  double PeakMemoryBytes(const v1::JobSpec& spec, const v1::Dataset& dataset) const override {
    const double n = static_cast<double>(dataset.rows());
    const double d = static_cast<double>(dataset.cols());
    // Validate refused bad options before this runs; the defaults stand in.
    const HppcaOptions o = OptionsFrom(spec.hppca(), dataset.cols()).value_or(HppcaOptions());
    const double q = std::max(o.q, 1), r = std::max(o.r, 1);
    const double k = std::floor(n / 2);
    const double s =
        o.superclasses != 0
            ? std::max(o.superclasses, 0)
            : ChooseHppcaSuperclasses(dataset.cols(), static_cast<int32_t>(std::min(k, 2e9)), o.q,
                                      o.r, std::max(o.default_top_t, 1));
    const double data = 2 * (4 * n * d + 8 * n);
    const double per_thread = 8 * (3 * d * d + 2 * d * q);
    const double models = k * (q + 2) * d * 28;
    const double clustering = 24 * k * std::min(s, k) + std::min(s, k) * (r + 2) * d * 12;
    constexpr double kRuntime = 16 << 20;
    return data + FitThreads() * per_thread + models + clustering + kRuntime;
  }

  absl::StatusOr<std::unique_ptr<FittedModel>> Fit(const LoadedDataset& dataset,
                                                   const v1::JobSpec& spec,
                                                   RunContext& ctx) const override {
    if (spec.has_hppca_add()) {
      return absl::FailedPreconditionError(
          "hppca_add grows an existing model: it runs through FitFrom with the base model");
    }
    DENDRO_RETURN_IF_ERROR(NeedLabels(dataset.info(), "hppca"));
    DENDRO_ASSIGN_OR_RETURN(const HppcaOptions o, OptionsFrom(spec.hppca(), dataset.info().cols()));
    DENDRO_ASSIGN_OR_RETURN(HppcaModel model, FitHppca(dataset.matrix(), dataset.labels(), o, ctx));
    DENDRO_RETURN_IF_ERROR(NameClasses(spec, model));
    return Finish(std::move(model), dataset);
  }

  std::optional<v1::ModelRef> BaseModel(const v1::JobSpec& spec) const override {
    if (spec.has_hppca_add()) return spec.hppca_add().base();
    return std::nullopt;
  }

  absl::StatusOr<std::unique_ptr<FittedModel>> FitFrom(const FittedModel& base,
                                                       const LoadedDataset& dataset,
                                                       const v1::JobSpec& spec,
                                                       RunContext& ctx) const override {
    const auto* hb = dynamic_cast<const HppcaFitted*>(&base);
    if (hb == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hppca_add: the base model is a '", std::string(base.method()),
          "' model; only hppca classifiers can be grown"));
    }
    DENDRO_RETURN_IF_ERROR(NeedLabels(dataset.info(), "hppca_add"));
    HppcaAddOptions add;
    add.recluster = spec.hppca_add().recluster();
    DENDRO_ASSIGN_OR_RETURN(HppcaModel model,
                            AddClasses(hb->model(), dataset.matrix(), dataset.labels(), add, ctx));
    DENDRO_RETURN_IF_ERROR(NameClasses(spec, model));
    return Finish(std::move(model), dataset);
  }

  absl::StatusOr<std::unique_ptr<FittedModel>> Load(const std::string& dir) const override {
    DENDRO_ASSIGN_OR_RETURN(HppcaModel model, HppcaModel::Load(dir));
    return std::make_unique<HppcaFitted>(std::move(model));
  }

 private:
  static std::vector<std::string> LabelNames(const v1::JobSpec& spec) {
    return std::vector<std::string>(spec.leaf_names().begin(), spec.leaf_names().end());
  }
  // Renames the classes whose labels leaf_names covers; the others keep the
  // name they have (their label, or the base model's name for it).
  static absl::Status NameClasses(const v1::JobSpec& spec, HppcaModel& model) {
    if (spec.leaf_names_size() == 0) return absl::OkStatus();
    std::vector<std::string> names = model.hierarchy().leaf_names();
    names.resize(model.num_classes());
    for (int32_t k = 0; k < model.num_classes(); ++k) {
      const int64_t label = model.labels()[k];
      if (label >= 0 && label < spec.leaf_names_size()) {
        names[k] = spec.leaf_names(static_cast<int>(label));
      } else if (names[k].empty()) {
        names[k] = absl::StrCat(label);
      }
    }
    return model.SetClassNames(std::move(names));
  }
  static std::unique_ptr<FittedModel> Finish(HppcaModel model, const LoadedDataset& dataset) {
    auto& md = model.mutable_metadata();
    md["dataset_rows"] = absl::StrCat(dataset.info().rows());
    md["train_seconds"] = absl::StrFormat("%.3f", model.fit_stats().total_seconds);
    return std::make_unique<HppcaFitted>(std::move(model));
  }
};

}  // namespace

const Method& HppcaMethod() {
  static const Hppca* method = new Hppca();
  return *method;
}

}  // namespace dendro::server
