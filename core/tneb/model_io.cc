// Save/Load of a fitted t-NEB model (see tneb.h for the file layout).
// GCC 12.2 reports false (maybe-)uninitialized warnings inside its own
// AVX-512 intrinsics headers when Eigen is built with -march=native (GCC bug
// 105593, fixed in 12.3/13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/io/atomic_file.h"
#include "core/io/json_fields.h"
#include "core/io/npy.h"
#include "core/tneb/tneb.h"
#include "nlohmann/json.hpp"

namespace dendro {
namespace {

constexpr int kFormatVersion = 1;
constexpr char kFormat[] = "dendro.tneb_model";

absl::StatusOr<std::vector<double>> ReadArray(const std::string& path, std::vector<int64_t> shape) {
  DENDRO_ASSIGN_OR_RETURN(NpyArrayF64 a, ReadNpyFloat64(path));
  if (a.shape != shape) {
    std::string want, got;
    for (int64_t s : shape) absl::StrAppend(&want, want.empty() ? "" : " x ", s);
    for (int64_t s : a.shape) absl::StrAppend(&got, got.empty() ? "" : " x ", s);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected shape ", want, ", found ", got));
  }
  return std::move(a.data);
}

}  // namespace

absl::Status SaveTnebModel(const TnebModel& model, const std::string& dir) {
  const StudentMixture& mix = model.mixture;
  const int64_t l = mix.num_components();
  const int64_t d = mix.dim();
  nlohmann::json j;
  j["format"] = kFormat;
  j["version"] = kFormatVersion;
  j["dim"] = d;
  j["leaves"] = l;
  // JSON has no infinity: Gaussian components are written as null.
  nlohmann::json dof = nlohmann::json::array();
  for (double v : mix.dof()) {
    if (std::isinf(v)) {
      dof.push_back(nullptr);
    } else {
      dof.push_back(v);
    }
  }
  j["dof"] = dof;
  j["original_component"] = model.original_component;
  j["height_offset"] = model.height_offset;
  j["standardize"] = !model.transform.identity();
  DENDRO_RETURN_IF_ERROR(WriteFileAtomic(dir + "/tneb_model.json", DumpJson(j, 2) + "\n"));

  const int64_t shape_l[1] = {l};
  DENDRO_RETURN_IF_ERROR(
      WriteNpy(dir + "/tneb_weights.npy", absl::MakeConstSpan(mix.weights()), shape_l));
  const int64_t shape_ld[2] = {l, d};
  DENDRO_RETURN_IF_ERROR(
      WriteNpy(dir + "/tneb_means.npy", absl::MakeConstSpan(mix.means().data(), l * d), shape_ld));
  std::vector<double> scales(l * d * d);
  for (int64_t k = 0; k < l; ++k) {
    for (int64_t r = 0; r < d; ++r) {
      for (int64_t c = 0; c < d; ++c) scales[(k * d + r) * d + c] = mix.scale(k)(r, c);
    }
  }
  const int64_t shape_s[2] = {l * d, d};
  DENDRO_RETURN_IF_ERROR(WriteNpy(dir + "/tneb_scales.npy", absl::MakeConstSpan(scales), shape_s));
  if (!model.transform.identity()) {
    const int64_t shape_d[1] = {d};
    DENDRO_RETURN_IF_ERROR(
        WriteNpy(dir + "/tneb_center.npy", absl::MakeConstSpan(model.transform.center), shape_d));
    DENDRO_RETURN_IF_ERROR(
        WriteNpy(dir + "/tneb_scale.npy", absl::MakeConstSpan(model.transform.scale), shape_d));
  }
  return absl::OkStatus();
}

absl::StatusOr<TnebModel> LoadTnebModel(const std::string& dir) {
  const std::string json_path = dir + "/tneb_model.json";
  std::string text;
  DENDRO_RETURN_IF_ERROR(ReadFileToString(json_path, &text));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(json_path, ": not a JSON object"));
  }
  const JsonFields f(j, json_path);
  absl::StatusOr<std::string> format = f.GetStringOr("format", "");
  absl::StatusOr<int64_t> version = f.GetInt64Or("version", 0);
  if (!format.ok() || *format != kFormat || !version.ok() || *version != kFormatVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat(json_path, ": not a ", kFormat, " version ", kFormatVersion, " file"));
  }
  auto bad = [&](std::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(json_path, ": ", std::string(what)));
  };
  DENDRO_ASSIGN_OR_RETURN(const int64_t d, f.GetInt64("dim"));
  DENDRO_ASSIGN_OR_RETURN(const int64_t l, f.GetInt64("leaves"));
  if (d < 1 || l < 1 || d > (int64_t{1} << 20) || l > (int64_t{1} << 20)) {
    return bad(absl::StrCat("implausible dim ", d, " / leaves ", l));
  }
  // JSON has no infinity: null stands for a Gaussian component.
  DENDRO_ASSIGN_OR_RETURN(
      std::vector<double> dof,
      f.GetDoubleArray("dof", /*null_value=*/std::numeric_limits<double>::infinity()));
  if (static_cast<int64_t>(dof.size()) != l) {
    return bad(absl::StrCat("'dof' must be an array of ", l, " numbers or nulls"));
  }
  DENDRO_ASSIGN_OR_RETURN(
      const std::vector<int64_t> original64,
      f.GetInt64Array("original_component", JsonFields::kInt32Min, JsonFields::kInt32Max));
  if (static_cast<int64_t>(original64.size()) != l) {
    return bad(absl::StrCat("'original_component' must be an array of ", l, " integers"));
  }
  std::vector<int32_t> original(original64.begin(), original64.end());
  DENDRO_ASSIGN_OR_RETURN(const double offset, f.GetDouble("height_offset"));
  DENDRO_ASSIGN_OR_RETURN(const bool standardize, f.GetBoolOr("standardize", false));

  DENDRO_ASSIGN_OR_RETURN(std::vector<double> w, ReadArray(dir + "/tneb_weights.npy", {l}));
  DENDRO_ASSIGN_OR_RETURN(std::vector<double> mu, ReadArray(dir + "/tneb_means.npy", {l, d}));
  DENDRO_ASSIGN_OR_RETURN(std::vector<double> sc, ReadArray(dir + "/tneb_scales.npy", {l * d, d}));
  RowMatrixD means = Eigen::Map<const RowMatrixD>(mu.data(), l, d);
  std::vector<Eigen::MatrixXd> scales(l, Eigen::MatrixXd(d, d));
  for (int64_t k = 0; k < l; ++k) {
    for (int64_t r = 0; r < d; ++r) {
      for (int64_t c = 0; c < d; ++c) scales[k](r, c) = sc[(k * d + r) * d + c];
    }
  }
  absl::StatusOr<StudentMixture> mix =
      StudentMixture::Create(std::move(w), std::move(means), std::move(scales), std::move(dof));
  if (!mix.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": ", mix.status().message()));
  }
  FeatureTransform t;
  if (standardize) {
    DENDRO_ASSIGN_OR_RETURN(t.center, ReadArray(dir + "/tneb_center.npy", {d}));
    DENDRO_ASSIGN_OR_RETURN(t.scale, ReadArray(dir + "/tneb_scale.npy", {d}));
    for (int64_t i = 0; i < d; ++i) {
      if (!std::isfinite(t.center[i]) || !(t.scale[i] > 0.0) || !std::isfinite(t.scale[i])) {
        return absl::InvalidArgumentError(
            absl::StrCat(dir, "/tneb_scale.npy: feature ", i, " has an invalid standardisation"));
      }
    }
  }
  return TnebModel{std::move(*mix), std::move(t), std::move(original), offset};
}

}  // namespace dendro
