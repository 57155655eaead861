// Save/Load of a fitted gHHC model (see ghhc.h for the file layout).
// GCC 12.2 reports false (maybe-)uninitialized warnings inside its own
// AVX-512 intrinsics headers when Eigen is built with -march=native (GCC bug
// 105593, fixed in 12.3/13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/ghhc/ghhc.h"
#include "core/io/atomic_file.h"
#include "core/io/json_fields.h"
#include "core/io/npy.h"
#include "nlohmann/json.hpp"

namespace dendro {
namespace {

constexpr int kFormatVersion = 1;
constexpr char kFormat[] = "dendro.ghhc_model";

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s;
  for (int64_t v : shape) absl::StrAppend(&s, s.empty() ? "" : " x ", v);
  return s;
}

absl::Status CheckShape(const std::string& path, const std::vector<int64_t>& got,
                        const std::vector<int64_t>& want) {
  if (got == want) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": expected shape ", ShapeText(want), ", found ", ShapeText(got)));
}

}  // namespace

absl::Status SaveGhhcModel(const GhhcModel& model, const std::string& dir) {
  const int64_t m = model.num_nodes();
  const int64_t d = model.ball_dim();
  const int64_t projection_dim = model.projection.empty() ? 0 : d;
  if (model.dim < 1 || static_cast<int64_t>(model.nodes.size()) != m * d ||
      static_cast<int64_t>(model.mean.size()) != model.dim ||
      static_cast<int64_t>(model.projection.size()) != model.dim * projection_dim ||
      static_cast<int64_t>(model.node_parent.size()) != m) {
    return absl::InvalidArgumentError("inconsistent gHHC model: array sizes do not match");
  }
  nlohmann::json j;
  j["format"] = kFormat;
  j["version"] = kFormatVersion;
  j["dim"] = model.dim;
  j["internal_nodes"] = m;
  j["center"] = model.center;
  j["point_norm"] = model.point_norm;
  j["projection_dim"] = projection_dim;
  DENDRO_RETURN_IF_ERROR(WriteFileAtomic(dir + "/ghhc_model.json", DumpJson(j, 2) + "\n"));
  const int64_t vec_d[1] = {model.dim};
  const int64_t mat[2] = {m, d};
  const int64_t vec_m[1] = {m};
  DENDRO_RETURN_IF_ERROR(WriteNpy(dir + "/ghhc_mean.npy", absl::MakeConstSpan(model.mean), vec_d));
  if (projection_dim > 0) {
    const int64_t proj[2] = {model.dim, projection_dim};
    DENDRO_RETURN_IF_ERROR(
        WriteNpy(dir + "/ghhc_projection.npy", absl::MakeConstSpan(model.projection), proj));
  }
  DENDRO_RETURN_IF_ERROR(WriteNpy(dir + "/ghhc_nodes.npy", absl::MakeConstSpan(model.nodes), mat));
  DENDRO_RETURN_IF_ERROR(
      WriteNpy(dir + "/ghhc_node_leaf.npy", absl::MakeConstSpan(model.node_leaf), vec_m));
  DENDRO_RETURN_IF_ERROR(
      WriteNpy(dir + "/ghhc_node_parent.npy", absl::MakeConstSpan(model.node_parent), vec_m));
  return absl::OkStatus();
}

absl::StatusOr<GhhcModel> LoadGhhcModel(const std::string& dir) {
  const std::string meta_path = dir + "/ghhc_model.json";
  std::string text;
  DENDRO_RETURN_IF_ERROR(ReadFileToString(meta_path, &text));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(meta_path, ": not a JSON object"));
  }
  const JsonFields f(j, meta_path);
  if (absl::StatusOr<std::string> format = f.GetString("format");
      !format.ok() || *format != kFormat) {
    return absl::InvalidArgumentError(absl::StrCat(meta_path, ": not a gHHC model (format)"));
  }
  if (absl::StatusOr<int64_t> version = f.GetInt64("version");
      !version.ok() || *version != kFormatVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat(meta_path, ": unsupported version (this build reads ", kFormatVersion, ")"));
  }
  GhhcModel model;
  DENDRO_ASSIGN_OR_RETURN(model.dim, f.GetInt64("dim", /*min=*/1));
  DENDRO_ASSIGN_OR_RETURN(const int64_t m, f.GetInt64("internal_nodes", /*min=*/1));
  DENDRO_ASSIGN_OR_RETURN(model.center, f.GetBool("center"));
  DENDRO_ASSIGN_OR_RETURN(model.point_norm, f.GetDouble("point_norm"));
  if (!(model.point_norm > 0.0 && model.point_norm < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(meta_path, ": point_norm must be in (0, 1), got ", model.point_norm));
  }
  const std::string mean_path = dir + "/ghhc_mean.npy";
  DENDRO_ASSIGN_OR_RETURN(NpyArrayF64 mean, ReadNpyFloat64(mean_path));
  DENDRO_RETURN_IF_ERROR(CheckShape(mean_path, mean.shape, {model.dim}));
  // Models written before projections existed have no projection_dim.
  DENDRO_ASSIGN_OR_RETURN(
      const int64_t projection_dim,
      f.GetInt64Or("projection_dim", 0, /*min=*/0, /*max=*/model.dim - 1));
  if (projection_dim > 0) {
    const std::string proj_path = dir + "/ghhc_projection.npy";
    DENDRO_ASSIGN_OR_RETURN(NpyArrayF64 proj, ReadNpyFloat64(proj_path));
    DENDRO_RETURN_IF_ERROR(CheckShape(proj_path, proj.shape, {model.dim, projection_dim}));
    for (double v : proj.data) {
      if (!std::isfinite(v)) {
        return absl::InvalidArgumentError(absl::StrCat(proj_path, ": non-finite value"));
      }
    }
    model.projection = std::move(proj.data);
  }
  const int64_t bd = model.ball_dim();
  const std::string nodes_path = dir + "/ghhc_nodes.npy";
  DENDRO_ASSIGN_OR_RETURN(NpyArrayF64 nodes, ReadNpyFloat64(nodes_path));
  DENDRO_RETURN_IF_ERROR(CheckShape(nodes_path, nodes.shape, {m, bd}));
  for (size_t q = 0; q < nodes.data.size(); ++q) {
    if (!std::isfinite(nodes.data[q])) {
      return absl::InvalidArgumentError(absl::StrCat(nodes_path, ": non-finite value"));
    }
  }
  for (int64_t r = 0; r < m; ++r) {
    double sq = 0;
    for (int64_t c = 0; c < bd; ++c) sq += nodes.data[r * bd + c] * nodes.data[r * bd + c];
    if (!(std::sqrt(sq) < model.point_norm)) {
      return absl::InvalidArgumentError(
          absl::StrCat(nodes_path, ": node ", r, " has norm >= point_norm ", model.point_norm));
    }
  }
  const std::string leaf_path = dir + "/ghhc_node_leaf.npy";
  DENDRO_ASSIGN_OR_RETURN(NpyArrayI64 leaf, ReadNpyInt(leaf_path));
  DENDRO_RETURN_IF_ERROR(CheckShape(leaf_path, leaf.shape, {m}));
  const std::string parent_path = dir + "/ghhc_node_parent.npy";
  DENDRO_ASSIGN_OR_RETURN(NpyArrayI64 parent, ReadNpyInt(parent_path));
  DENDRO_RETURN_IF_ERROR(CheckShape(parent_path, parent.shape, {m}));
  bool any_leaf = false;
  for (int64_t r = 0; r < m; ++r) {
    if (leaf.data[r] < -1 || leaf.data[r] >= m) {
      return absl::InvalidArgumentError(
          absl::StrCat(leaf_path, ": entry ", r, " = ", leaf.data[r], " outside [-1, ", m, ")"));
    }
    if (parent.data[r] < -1 || parent.data[r] >= m) {
      return absl::InvalidArgumentError(absl::StrCat(parent_path, ": entry ", r, " = ",
                                                     parent.data[r], " outside [-1, ", m, ")"));
    }
    any_leaf = any_leaf || leaf.data[r] >= 0;
  }
  if (!any_leaf)
    return absl::InvalidArgumentError(absl::StrCat(leaf_path, ": no node holds a leaf"));
  model.mean = std::move(mean.data);
  model.nodes = std::move(nodes.data);
  model.node_leaf.assign(leaf.data.begin(), leaf.data.end());
  model.node_parent.assign(parent.data.begin(), parent.data.end());
  return model;
}

}  // namespace dendro
