// Save/Load of a fitted t-NEB model (see tneb.h for the file layout).
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/io/atomic_file.h"
#include "core/io/model_artifact.h"
#include "core/tneb/tneb.h"
#include "nlohmann/json.hpp"

namespace dendro {
namespace {

constexpr ArtifactFormat kFormat{"tneb_model.json", "dendro.tneb_model", 1, "t-NEB",
                                 absl::StatusCode::kInvalidArgument};
constexpr int64_t kMaxSize = int64_t{1} << 20;  // bound on dim and leaves

struct TnebManifest final : ArtifactManifest {
  int64_t dim = 0;
  int64_t leaves = 0;
  std::vector<double> dof;  // infinite (null in JSON): a Gaussian component
  std::vector<int32_t> original_component;
  double height_offset = 0;
  bool standardize = false;  // absent in the earliest models
  void Fields(ManifestFields& f) override {
    f.Int("dim", &dim, 1, kMaxSize);
    f.Int("leaves", &leaves, 1, kMaxSize);
    f.Numbers("dof", &dof, /*null_as=*/std::numeric_limits<double>::infinity());
    f.Ints("original_component", &original_component);
    f.Number("height_offset", &height_offset);
    f.Optional().Bool("standardize", &standardize);
  }
};

constexpr char kDiagnosticsFile[] = "tneb_diagnostics.json";

std::string DiagnosticsJson(const TnebDiagnostics& d) {
  nlohmann::json j;
  j["k"] = d.k;
  j["cluster_sizes"] = d.cluster_sizes;
  j["largest_share"] = d.largest_share;
  j["components"] = d.components;
  j["surviving"] = d.surviving;
  j["filtered_small"] = d.filtered_small;
  j["filtered_elongated"] = d.filtered_elongated;
  j["candidates"] = d.candidates;
  j["candidate_bic"] = d.candidate_bic;
  j["kept_candidate"] = d.kept_candidate;
  j["merge"] = d.merge;
  j["degenerate"] = d.degenerate;
  j["degenerate_reason"] = d.degenerate_reason;
  return j.dump(2);
}

// The diagnostics file of a saved model; k = 0 (none) when it is absent
// (models saved before diagnostics existed).
absl::StatusOr<TnebDiagnostics> ReadDiagnostics(const ModelArtifactReader& r) {
  TnebDiagnostics d;
  if (!r.Has(kDiagnosticsFile)) return d;
  std::string text;
  DENDRO_RETURN_IF_ERROR(ReadFileToString(absl::StrCat(r.dir(), "/", kDiagnosticsFile), &text));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return r.Error(kDiagnosticsFile, "is not a JSON object");
  try {
    d.k = j.at("k").get<int32_t>();
    d.cluster_sizes = j.at("cluster_sizes").get<std::vector<int64_t>>();
    d.largest_share = j.at("largest_share").get<double>();
    d.components = j.at("components").get<int32_t>();
    d.surviving = j.at("surviving").get<int32_t>();
    d.filtered_small = j.at("filtered_small").get<int32_t>();
    d.filtered_elongated = j.at("filtered_elongated").get<int32_t>();
    d.candidates = j.at("candidates").get<std::vector<std::string>>();
    d.candidate_bic = j.at("candidate_bic").get<std::vector<double>>();
    d.kept_candidate = j.at("kept_candidate").get<std::string>();
    d.merge = j.at("merge").get<std::string>();
    d.degenerate = j.at("degenerate").get<bool>();
    d.degenerate_reason = j.at("degenerate_reason").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    return r.Error(kDiagnosticsFile, absl::StrCat("bad field: ", std::string(e.what())));
  }
  if (d.k < 0 || static_cast<int64_t>(d.cluster_sizes.size()) != d.k ||
      d.candidates.size() != d.candidate_bic.size()) {
    return r.Error(kDiagnosticsFile, "inconsistent sizes");
  }
  return d;
}

}  // namespace

absl::Status SaveTnebModel(const TnebModel& model, const std::string& dir) {
  const StudentMixture& mix = model.mixture;
  const int64_t l = mix.num_components();
  const int64_t d = mix.dim();
  TnebManifest m;
  m.dim = d;
  m.leaves = l;
  m.dof = mix.dof();
  m.original_component = model.original_component;
  m.height_offset = model.height_offset;
  m.standardize = !model.transform.identity();
  std::vector<double> scales(l * d * d);  // one d x d block per leaf
  for (int64_t k = 0; k < l; ++k) {
    Eigen::Map<RowMatrixD>(scales.data() + k * d * d, d, d) = mix.scale(k);
  }
  ModelArtifactWriter w(dir, kFormat);
  w.Add("tneb_weights.npy", mix.weights(), {l});
  w.Add("tneb_means.npy", absl::MakeConstSpan(mix.means().data(), l * d), {l, d});
  w.Add("tneb_scales.npy", scales, {l * d, d});
  if (m.standardize) {
    w.Add("tneb_center.npy", model.transform.center, {d});
    w.Add("tneb_scale.npy", model.transform.scale, {d});
  }
  if (model.diagnostics.k > 0) {  // before the manifest, which is written last
    DENDRO_RETURN_IF_ERROR(WriteFileAtomic(absl::StrCat(dir, "/", kDiagnosticsFile),
                                           DiagnosticsJson(model.diagnostics)));
  }
  return w.Write(m);
}

absl::StatusOr<TnebModel> LoadTnebModel(const std::string& dir) {
  TnebManifest m;
  DENDRO_ASSIGN_OR_RETURN(const ModelArtifactReader r,
                          ModelArtifactReader::Open(dir, kFormat, &m));
  const int64_t d = m.dim, l = m.leaves;
  if (static_cast<int64_t>(m.dof.size()) != l) {
    return r.FieldError("dof", absl::StrCat("must be an array of ", l, " numbers or nulls"));
  }
  if (static_cast<int64_t>(m.original_component.size()) != l) {
    return r.FieldError("original_component",
                        absl::StrCat("must be an array of ", l, " integers"));
  }
  DENDRO_ASSIGN_OR_RETURN(std::vector<double> w, r.Float64("tneb_weights.npy", {l}));
  DENDRO_ASSIGN_OR_RETURN(std::vector<double> mu, r.Float64("tneb_means.npy", {l, d}));
  DENDRO_ASSIGN_OR_RETURN(std::vector<double> sc, r.Float64("tneb_scales.npy", {l * d, d}));
  std::vector<Eigen::MatrixXd> scales(l);
  for (int64_t k = 0; k < l; ++k) {
    scales[k] = Eigen::Map<const RowMatrixD>(sc.data() + k * d * d, d, d);
  }
  absl::StatusOr<StudentMixture> mix =
      StudentMixture::Create(std::move(w), Eigen::Map<const RowMatrixD>(mu.data(), l, d),
                             std::move(scales), std::move(m.dof));
  if (!mix.ok()) return r.Error("", std::string(mix.status().message()));
  FeatureTransform t;
  if (m.standardize) {
    DENDRO_ASSIGN_OR_RETURN(t.center, r.Float64("tneb_center.npy", {d}));
    DENDRO_ASSIGN_OR_RETURN(t.scale, r.Float64("tneb_scale.npy", {d}));
    for (int64_t i = 0; i < d; ++i) {
      if (!std::isfinite(t.center[i]) || !(t.scale[i] > 0.0) || !std::isfinite(t.scale[i])) {
        return r.Error("tneb_scale.npy",
                       absl::StrCat("feature ", i, " has an invalid standardisation"));
      }
    }
  }
  DENDRO_ASSIGN_OR_RETURN(TnebDiagnostics diagnostics, ReadDiagnostics(r));
  return TnebModel{*std::move(mix), std::move(t), std::move(m.original_component), m.height_offset,
                   std::move(diagnostics)};
}

}  // namespace dendro
