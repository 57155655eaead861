#include "server/methods/method.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"
#include "core/hierarchy/export.h"
#include "core/io/atomic_file.h"
#include "core/io/npy.h"

namespace dendro::server {

const Method& L2hMethod();  // methods/l2h_method.cc
const Method& TnebMethod();  // methods/tneb_method.cc
const Method& GhhcMethod();  // methods/ghhc_method.cc
const Method& HppcaMethod();  // methods/hppca_method.cc

absl::StatusOr<const Method*> MethodForSpec(const v1::JobSpec& spec) {
  switch (spec.method_case()) {
    case v1::JobSpec::kL2H:
      return &L2hMethod();
    case v1::JobSpec::kTneb:
      return &TnebMethod();
    case v1::JobSpec::kGhhc:
      return &GhhcMethod();
    case v1::JobSpec::kHppca:
    case v1::JobSpec::kHppcaAdd:
      return &HppcaMethod();
    case v1::JobSpec::METHOD_NOT_SET:
      break;
    default:
      return absl::UnimplementedError(
          absl::StrCat("method ", spec.method_case(), " is not available in this server"));
  }
  return absl::InvalidArgumentError(
      "job spec: no method set (expected one of: l2h, tneb, ghhc, hppca, hppca_add)");
}

absl::StatusOr<const Method*> MethodByName(std::string_view name) {
  for (const Method* m : {&L2hMethod(), &TnebMethod(), &GhhcMethod(), &HppcaMethod()}) {
    if (m->name() == name) return m;
  }
  return absl::NotFoundError(absl::StrCat("unknown method '", std::string(name), "'"));
}

std::vector<const UploadPreparer*> UploadPreparers() {
  std::vector<const UploadPreparer*> preparers;
  for (const Method* m : {&L2hMethod(), &TnebMethod(), &GhhcMethod(), &HppcaMethod()}) {
    if (const UploadPreparer* p = m->upload_preparer(); p != nullptr) preparers.push_back(p);
  }
  return preparers;
}

int64_t DefaultJobMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGE_SIZE);
  int64_t total = pages > 0 && page_size > 0 ? int64_t{pages} * page_size : int64_t{8} << 30;
  // cgroup v2 limit of this process ("max" when unlimited).
  std::string limit;
  if (ReadFileToString("/sys/fs/cgroup/memory.max", &limit).ok()) {
    int64_t bytes = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(limit), &bytes) && bytes > 0) {
      total = std::min(total, bytes);
    }
  }
  return total / 4 * 3;
}

int FitThreads() { return std::max(1u, std::thread::hardware_concurrency()); }

absl::Status CheckAtMost(std::string_view field, int64_t value, int64_t limit,
                         std::string_view why) {
  if (value <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(std::string(field), " must be <= ", limit,
                                                 " (", std::string(why), "), got ", value));
}

absl::Status CheckRealAtMost(std::string_view field, double value, double limit,
                         std::string_view why) {
  if (value <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(std::string(field), " must be a number <= ",
                                                 limit, " (", std::string(why), "), got ",
                                                 value));
}

absl::Status CheckMemory(std::string_view method, double estimate_bytes,
                         const JobLimits& limits, std::string_view what) {
  if (estimate_bytes <= static_cast<double>(limits.memory_bytes)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: this job would need about %.1f GiB (%s), more than the server's per-job limit of "
      "%.1f GiB (dendrod --max_job_memory_mb); use smaller parameters or a smaller dataset",
      std::string(method), estimate_bytes / double(1 << 30), std::string(what),
      static_cast<double>(limits.memory_bytes) / double(1 << 30)));
}

std::map<std::string, std::string> WarmStartMetadata(const v1::JobSpec& spec) {
  return {{"warm_start", absl::StrCat(spec.warm_start().name(), ":", spec.warm_start().version())}};
}

absl::StatusOr<bool> FitsFromScratch(const absl::Status& warm,
                                     std::map<std::string, std::string>* md) {
  if (warm.ok()) return false;
  if (!absl::IsFailedPrecondition(warm)) return warm;
  (*md)["warm_start_note"] = absl::StrCat("fitted from scratch: ", warm.message());
  return true;
}

absl::Status CheckNoConstantColumn(std::string_view method, const v1::Dataset& dataset) {
  const v1::DatasetStats& s = dataset.stats();
  if (!s.computed() || s.num_constant_columns() == 0 || s.constant_columns_size() == 0) {
    return absl::OkStatus();
  }
  const std::string others =
      s.num_constant_columns() > 1
          ? absl::StrCat(" (and ", s.num_constant_columns() - 1, " more constant column",
                         s.num_constant_columns() > 2 ? "s" : "", ")")
          : "";
  return absl::InvalidArgumentError(absl::StrCat(
      std::string(method), ": column ", s.constant_columns(0), " of dataset ", dataset.id(),
      " is constant (every value is ", s.constant_values(0), ")", others,
      ": it carries no information and makes every scale matrix singular; drop it"));
}

absl::Status CheckClassSizes(std::string_view method, const v1::Dataset& dataset,
                             int64_t min_classes, int64_t min_rows) {
  const v1::DatasetStats& s = dataset.stats();
  if (!s.computed() || !dataset.has_labels() || s.num_classes() == 0) return absl::OkStatus();
  if (s.num_classes() < min_classes) {
    return absl::InvalidArgumentError(absl::StrCat(
        std::string(method), ": a classifier needs at least ", min_classes,
        " classes; every label of dataset ",
        dataset.id(), " is ", s.smallest_class_label()));
  }
  if (s.smallest_class_rows() < min_rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        std::string(method), ": class label ", s.smallest_class_label(), " of dataset ",
        dataset.id(), " has ", s.smallest_class_rows(), " training row",
        s.smallest_class_rows() == 1 ? "" : "s", "; every class needs at least ", min_rows,
        " (drop its rows or add more)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Prediction> FittedModel::Predict(const MatrixView&,
                                                const PredictOptions&) const {
  return absl::FailedPreconditionError(absl::StrCat(
      "model method '", std::string(method()),
      "' is a clustering, not a classifier: use Assign instead of Predict"));
}

absl::StatusOr<ClassTable> FittedModel::Classes() const {
  return absl::FailedPreconditionError(absl::StrCat(
      "model method '", std::string(method()),
      "' is a clustering, not a classifier: it has no class table"));
}

absl::Status SaveTree(const Hierarchy& tree, const std::string& dir) {
  DENDRO_RETURN_IF_ERROR(WriteFileAtomic(dir + "/tree.json", ToJson(tree, false)));
  const auto& pl = tree.point_leaf();
  if (!pl.empty()) {
    const int64_t shape[1] = {static_cast<int64_t>(pl.size())};
    DENDRO_RETURN_IF_ERROR(WriteNpy(dir + "/point_leaf.npy", absl::MakeConstSpan(pl), shape));
  }
  return absl::OkStatus();
}

absl::StatusOr<Hierarchy> LoadTree(const std::string& dir) {
  std::string json;
  DENDRO_RETURN_IF_ERROR(ReadFileToString(dir + "/tree.json", &json));
  DENDRO_ASSIGN_OR_RETURN(Hierarchy tree, ParseJson(json));
  std::error_code ec;
  if (std::filesystem::exists(dir + "/point_leaf.npy", ec)) {
    DENDRO_ASSIGN_OR_RETURN(NpyArrayI64 pl, ReadNpyInt(dir + "/point_leaf.npy"));
    DENDRO_RETURN_IF_ERROR(tree.SetPointLeaf(std::vector<int32_t>(pl.data.begin(), pl.data.end())));
  }
  return tree;
}

}  // namespace dendro::server
