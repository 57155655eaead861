#include "server/methods/method.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
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
