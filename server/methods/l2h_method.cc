// L2H as a service method: logits dataset -> hierarchy over its K clusters;
// Assign maps new logits to their argmax cluster. JobSpec.warm_start
// reuses an earlier version's first pass (FitFrom).
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/l2h/l2h.h"
#include "server/methods/l2h_upload_pass.h"
#include "server/methods/method.h"

namespace dendro::server {
namespace {

// Artifacts: tree.json + point_leaf.npy (SaveTree) and, for a fit of a
// durable dataset, first_pass.bin: the first pass over the rows
// (L2hFirstPass::Save), so a later fit that warm-starts from this version
// passes over new rows only. Load leaves it on disk.
constexpr char kFirstPassFile[] = "first_pass.bin";

class L2hModel final : public FittedModel {
 public:
  // `first_pass`: the fit's own, saved with it (null for a loaded model);
  // `dir`: where a loaded model's files are ("" for a fresh one).
  L2hModel(Hierarchy tree, int64_t k, std::shared_ptr<const L2hFirstPass> first_pass,
           std::string dir)
      : tree_(std::move(tree)), k_(k), first_pass_(std::move(first_pass)), dir_(std::move(dir)) {}
  std::string_view method() const override { return "l2h"; }
  const Hierarchy& tree() const override { return tree_; }
  int64_t input_dim() const override { return k_; }
  std::map<std::string, std::string> metadata() const override { return tree_.metadata(); }
  absl::Status Save(const std::string& dir) const override {
    DENDRO_RETURN_IF_ERROR(SaveTree(tree_, dir));
    if (first_pass_ != nullptr) {
      DENDRO_RETURN_IF_ERROR(first_pass_->Save(dir + "/" + kFirstPassFile));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<int32_t>> AssignLeaves(const MatrixView& rows) const override {
    return ArgmaxRows(rows);
  }
  // The first pass this version saved, resumed for `rows` rows (its own and
  // the ones appended after them).
  absl::StatusOr<L2hFirstPass> ResumeFirstPass(int64_t rows) const {
    if (dir_.empty()) return absl::FailedPreconditionError("the version has no files");
    std::error_code ec;
    const std::string path = dir_ + "/" + kFirstPassFile;
    if (!std::filesystem::exists(path, ec)) {
      return absl::FailedPreconditionError(
          "the version saved no first pass (it was fitted before first passes were kept, or "
          "has been deleted)");
    }
    absl::StatusOr<L2hFirstPass> pass = L2hFirstPass::Resume(path, rows, static_cast<int32_t>(k_));
    if (!pass.ok() && !absl::IsInvalidArgument(pass.status())) {
      // Read errors name the server's files: say what, not where.
      return absl::Status(pass.status().code(), "the version's saved first pass cannot be read");
    }
    return pass;
  }

 private:
  Hierarchy tree_;
  int64_t k_;
  std::shared_ptr<const L2hFirstPass> first_pass_;
  std::string dir_;
};

class L2h final : public Method {
 public:
  std::string_view name() const override { return "l2h"; }
  std::string_view leaf_names_refusal() const override { return ""; }
  bool leaves_are_classes() const override { return true; }
  bool warm_starts() const override { return true; }

  absl::Status Validate(const v1::JobSpec& spec, const v1::Dataset& dataset,
                        const JobLimits& limits) const override {
    if (dataset.cols() < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "l2h needs logits with at least 2 columns (clusters); dataset ", dataset.id(),
          " has ", dataset.cols()));
    }
    DENDRO_RETURN_IF_ERROR(CheckMemory("l2h", PeakMemoryBytes(spec, dataset), limits,
                                       "K x K pairwise statistics for K = the dataset's columns"));
    if (absl::Status s = CheckLeafNames(LeafNames(spec), dataset.cols()); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "leaf_names: ", s.message(), " (one name per column of dataset ", dataset.id(), ")"));
    }
    return ParseAggregation(spec).status();
  }

  // The K x K statistics and merge tables, the mapped logits (read once per
  // pass), each row's state (its best clusters and scores), the first pass
  // kept to be saved, and a warm start's resumed one.
  double PeakMemoryBytes(const v1::JobSpec&, const v1::Dataset& dataset) const override {
    const double n = static_cast<double>(dataset.rows());
    const double k = static_cast<double>(dataset.cols());
    return 4 * 8 * k * k + 4 * n * k + 128 * n;
  }

  absl::StatusOr<std::unique_ptr<FittedModel>> Fit(const LoadedDataset& dataset,
                                                   const v1::JobSpec& spec,
                                                   RunContext& ctx) const override {
    // The first pass, when this server computed it during the upload.
    return FitWith(dataset, spec, ctx, L2hFirstPassOf(dataset.prepared().get()), {});
  }

  // A warm start: the first pass `base` saved covers the rows it was fitted
  // on, which the job manager checked are this dataset's first rows.
  absl::StatusOr<std::unique_ptr<FittedModel>> FitFrom(const FittedModel& base,
                                                       const LoadedDataset& dataset,
                                                       const v1::JobSpec& spec,
                                                       RunContext& ctx) const override {
    std::map<std::string, std::string> md = WarmStartMetadata(spec);
    const L2hFirstPass* uploaded = L2hFirstPassOf(dataset.prepared().get());
    if (uploaded != nullptr && uploaded->complete()) {
      md["warm_start_note"] = "not needed: the upload computed the whole first pass";
      return FitWith(dataset, spec, ctx, uploaded, std::move(md));
    }
    const auto* previous = dynamic_cast<const L2hModel*>(&base);
    absl::StatusOr<L2hFirstPass> resumed =
        previous != nullptr ? previous->ResumeFirstPass(dataset.info().rows())
                            : absl::FailedPreconditionError("the version is not an l2h model");
    if (!resumed.ok()) {
      md["warm_start_note"] = absl::StrCat("fitted from scratch: ", resumed.status().message());
      return FitWith(dataset, spec, ctx, nullptr, std::move(md));
    }
    md["warm_start_rows"] = absl::StrCat(resumed->rows_added());
    return FitWith(dataset, spec, ctx, &*resumed, std::move(md));
  }

  absl::StatusOr<std::unique_ptr<FittedModel>> FitWith(
      const LoadedDataset& dataset, const v1::JobSpec& spec, RunContext& ctx,
      const L2hFirstPass* first_pass, std::map<std::string, std::string> md_in) const {
    L2hOptions options;
    DENDRO_ASSIGN_OR_RETURN(options.aggregation, ParseAggregation(spec));
    // Kept for later warm starts, which need this dataset's rows: a
    // transient dataset is gone after the job, so its pass is not saved.
    options.keep_first_pass = !dataset.info().transient();
    DENDRO_ASSIGN_OR_RETURN(L2hResult result, RunL2h(dataset.matrix(), options, ctx, first_pass));
    Hierarchy tree = std::move(result.hierarchy);
    DENDRO_RETURN_IF_ERROR(tree.SetLeafNames(LeafNames(spec)));
    auto& md = tree.mutable_metadata();
    md["method"] = "l2h";
    md["aggregation"] = std::string(L2hAggregationName(options.aggregation));
    md["empty_clusters"] = absl::StrCat(result.empty_clusters);
    md["dataset_rows"] = absl::StrCat(dataset.info().rows());
    for (auto& [key, value] : md_in) md[key] = std::move(value);
    return std::make_unique<L2hModel>(std::move(tree), dataset.info().cols(),
                                      std::move(result.first_pass), "");
  }

  const UploadPreparer* upload_preparer() const override { return &L2hUploadPreparer(); }

  std::vector<std::string> files_left_on_disk() const override { return {kFirstPassFile}; }

  absl::StatusOr<std::unique_ptr<FittedModel>> Load(const std::string& dir) const override {
    DENDRO_ASSIGN_OR_RETURN(Hierarchy tree, LoadTree(dir));
    const int64_t k = tree.num_leaves();
    return std::make_unique<L2hModel>(std::move(tree), k, nullptr, dir);
  }

 private:
  static std::vector<std::string> LeafNames(const v1::JobSpec& spec) {
    return std::vector<std::string>(spec.leaf_names().begin(), spec.leaf_names().end());
  }
  static absl::StatusOr<L2hAggregation> ParseAggregation(const v1::JobSpec& spec) {
    const std::string& a = spec.l2h().aggregation();
    if (a.empty()) return L2hAggregation::kSumOfMeans;
    return ParseL2hAggregation(a);
  }
};

}  // namespace

const Method& L2hMethod() {
  static const L2h* method = new L2h();
  return *method;
}

}  // namespace dendro::server
