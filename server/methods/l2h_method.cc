// L2H as a service method: logits dataset -> hierarchy over its K clusters;
// Assign maps new logits to their argmax cluster.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/l2h/l2h.h"
#include "server/methods/l2h_upload_pass.h"
#include "server/methods/method.h"

namespace dendro::server {
namespace {

class L2hModel final : public FittedModel {
 public:
  L2hModel(Hierarchy tree, int64_t k) : tree_(std::move(tree)), k_(k) {}
  std::string_view method() const override { return "l2h"; }
  const Hierarchy& tree() const override { return tree_; }
  int64_t input_dim() const override { return k_; }
  std::map<std::string, std::string> metadata() const override { return tree_.metadata(); }
  absl::Status Save(const std::string& dir) const override { return SaveTree(tree_, dir); }
  absl::StatusOr<std::vector<int32_t>> AssignLeaves(const MatrixView& rows) const override {
    return ArgmaxRows(rows);
  }

 private:
  Hierarchy tree_;
  int64_t k_;
};

class L2h final : public Method {
 public:
  std::string_view name() const override { return "l2h"; }
  std::string_view leaf_names_refusal() const override { return ""; }

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
  // pass), and each row's state (its best clusters and scores).
  double PeakMemoryBytes(const v1::JobSpec&, const v1::Dataset& dataset) const override {
    const double n = static_cast<double>(dataset.rows());
    const double k = static_cast<double>(dataset.cols());
    return 4 * 8 * k * k + 4 * n * k + 64 * n;
  }

  absl::StatusOr<std::unique_ptr<FittedModel>> Fit(const LoadedDataset& dataset,
                                                   const v1::JobSpec& spec,
                                                   RunContext& ctx) const override {
    L2hOptions options;
    DENDRO_ASSIGN_OR_RETURN(options.aggregation, ParseAggregation(spec));
    // The first pass, when this server computed it during the upload.
    DENDRO_ASSIGN_OR_RETURN(L2hResult result,
                            RunL2h(dataset.matrix(), options, ctx,
                                   L2hFirstPassOf(dataset.prepared().get())));
    Hierarchy tree = std::move(result.hierarchy);
    DENDRO_RETURN_IF_ERROR(tree.SetLeafNames(LeafNames(spec)));
    auto& md = tree.mutable_metadata();
    md["method"] = "l2h";
    md["aggregation"] = std::string(L2hAggregationName(options.aggregation));
    md["empty_clusters"] = absl::StrCat(result.empty_clusters);
    md["dataset_rows"] = absl::StrCat(dataset.info().rows());
    return std::make_unique<L2hModel>(std::move(tree), dataset.info().cols());
  }

  const UploadPreparer* upload_preparer() const override { return &L2hUploadPreparer(); }

  absl::StatusOr<std::unique_ptr<FittedModel>> Load(const std::string& dir) const override {
    DENDRO_ASSIGN_OR_RETURN(Hierarchy tree, LoadTree(dir));
    const int64_t k = tree.num_leaves();
    return std::make_unique<L2hModel>(std::move(tree), k);
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
