// Save/Load of a fitted gHHC model (see ghhc.h for the file layout).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/ghhc/ghhc.h"
#include "core/io/model_artifact.h"

namespace dendro {
namespace {

constexpr ArtifactFormat kFormat{"ghhc_model.json", "dendro.ghhc_model", 1, "gHHC",
                                 absl::StatusCode::kInvalidArgument};

struct GhhcManifest final : ArtifactManifest {
  int64_t dim = 0;
  int64_t internal_nodes = 0;
  bool center = false;
  double point_norm = 0;
  int64_t projection_dim = 0;  // 0: none (and absent in older models)
  // Learned point embeddings: N, the training points, listed only for a
  // model with them. `learned` is not a field: the writer sets it from the
  // model, the loader from the presence of ghhc_train_leaf.npy, so models
  // without learned points keep the manifest older versions wrote.
  bool learned = false;
  int64_t train_points = 0;
  void Fields(ManifestFields& f) override {
    if (learned) f.Int("train_points", &train_points, /*min=*/1);
    f.Int("dim", &dim, /*min=*/1);
    f.Int("internal_nodes", &internal_nodes, /*min=*/1);
    f.Bool("center", &center);
    f.Number("point_norm", &point_norm);
    f.Optional().Int("projection_dim", &projection_dim, /*min=*/0);
  }
};

// Every value finite.
absl::Status CheckFinite(const ModelArtifactReader& r, const char* file,
                         const std::vector<double>& v) {
  for (double x : v) {
    if (!std::isfinite(x)) return r.Error(file, "non-finite value");
  }
  return absl::OkStatus();
}

// Every value finite and above zero.
absl::Status CheckPositiveFinite(const ModelArtifactReader& r, const char* file,
                                 const std::vector<double>& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (!(v[i] > 0.0) || !std::isfinite(v[i])) {
      return r.Error(file,
                     absl::StrCat("entry ", i, " = ", v[i], " is not a positive finite number"));
    }
  }
  return absl::OkStatus();
}

// Every entry in [-1, m).
absl::Status CheckNodeIds(const ModelArtifactReader& r, const char* file,
                          const std::vector<int64_t>& v, int64_t m) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] < -1 || v[i] >= m) {
      return r.Error(file, absl::StrCat("entry ", i, " = ", v[i], " outside [-1, ", m, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SaveGhhcModel(const GhhcModel& model, const std::string& dir) {
  GhhcManifest m;
  m.dim = model.dim;
  m.internal_nodes = model.num_nodes();
  m.center = model.center;
  m.point_norm = model.point_norm;
  m.projection_dim = model.projection.empty() ? 0 : model.ball_dim();
  const int64_t bd = model.ball_dim();
  if (model.dim < 1 || static_cast<int64_t>(model.nodes.size()) != m.internal_nodes * bd ||
      static_cast<int64_t>(model.mean.size()) != model.dim ||
      (!model.scale.empty() && static_cast<int64_t>(model.scale.size()) != model.dim) ||
      static_cast<int64_t>(model.projection.size()) != model.dim * m.projection_dim ||
      static_cast<int64_t>(model.node_parent.size()) != m.internal_nodes ||
      static_cast<int64_t>(model.train_points.size()) !=
          static_cast<int64_t>(model.train_leaf.size()) * bd ||
      model.leaf_mean.size() != model.leaf_size.size() * static_cast<size_t>(bd)) {
    return absl::InvalidArgumentError("inconsistent gHHC model: array sizes do not match");
  }
  ModelArtifactWriter w(dir, kFormat);
  w.Add("ghhc_mean.npy", model.mean, {model.dim});
  // Standardised models only, so the others keep the files older versions wrote.
  if (!model.scale.empty()) w.Add("ghhc_scale.npy", model.scale, {model.dim});
  if (m.projection_dim > 0) {
    w.Add("ghhc_projection.npy", model.projection, {model.dim, m.projection_dim});
  }
  w.Add("ghhc_nodes.npy", model.nodes, {m.internal_nodes, bd});
  w.Add("ghhc_node_leaf.npy", model.node_leaf, {m.internal_nodes});
  w.Add("ghhc_node_parent.npy", model.node_parent, {m.internal_nodes});
  // Ward's statistics only with Ward's tree, so node-tree models keep the
  // files older versions wrote.
  if (!model.leaf_size.empty()) {
    const int64_t leaves = static_cast<int64_t>(model.leaf_size.size());
    w.Add("ghhc_leaf_size.npy", model.leaf_size, {leaves});
    w.Add("ghhc_leaf_mean.npy", model.leaf_mean, {leaves, bd});
  }
  m.train_points = static_cast<int64_t>(model.train_leaf.size());
  m.learned = m.train_points > 0;
  if (m.learned) {
    const int64_t nt = m.train_points;
    w.Add("ghhc_train_points.npy", model.train_points, {nt, bd});
    w.Add("ghhc_train_leaf.npy", model.train_leaf, {nt});
  }
  return w.Write(m);
}

absl::StatusOr<GhhcModel> LoadGhhcModel(const std::string& dir) {
  GhhcManifest m;
  std::error_code ec;
  m.learned = std::filesystem::exists(std::filesystem::path(dir) / "ghhc_train_leaf.npy", ec);
  const bool scaled = std::filesystem::exists(std::filesystem::path(dir) / "ghhc_scale.npy", ec);
  const bool ward = std::filesystem::exists(std::filesystem::path(dir) / "ghhc_leaf_size.npy", ec);
  DENDRO_ASSIGN_OR_RETURN(const ModelArtifactReader r,
                          ModelArtifactReader::Open(dir, kFormat, &m));
  if (!(m.point_norm > 0.0 && m.point_norm < 1.0)) {
    return r.FieldError("point_norm", absl::StrCat("must be in (0, 1), got ", m.point_norm));
  }
  if (m.projection_dim >= m.dim) {
    return r.FieldError("projection_dim",
                        absl::StrCat("must be below dim ", m.dim, ", got ", m.projection_dim));
  }
  GhhcModel model;
  model.dim = m.dim;
  model.center = m.center;
  model.point_norm = m.point_norm;
  const int64_t n = m.internal_nodes;
  const int64_t bd = m.projection_dim > 0 ? m.projection_dim : m.dim;
  DENDRO_ASSIGN_OR_RETURN(model.mean, r.Float64("ghhc_mean.npy", {m.dim}));
  if (scaled) {
    DENDRO_ASSIGN_OR_RETURN(model.scale, r.Float64("ghhc_scale.npy", {m.dim}));
    DENDRO_RETURN_IF_ERROR(CheckPositiveFinite(r, "ghhc_scale.npy", model.scale));
  }
  if (m.projection_dim > 0) {
    DENDRO_ASSIGN_OR_RETURN(model.projection,
                            r.Float64("ghhc_projection.npy", {m.dim, m.projection_dim}));
    DENDRO_RETURN_IF_ERROR(CheckFinite(r, "ghhc_projection.npy", model.projection));
  }
  DENDRO_ASSIGN_OR_RETURN(model.nodes, r.Float64("ghhc_nodes.npy", {n, bd}));
  DENDRO_RETURN_IF_ERROR(CheckFinite(r, "ghhc_nodes.npy", model.nodes));
  for (int64_t i = 0; i < n; ++i) {
    double sq = 0;
    for (int64_t c = 0; c < bd; ++c) sq += model.nodes[i * bd + c] * model.nodes[i * bd + c];
    if (!(std::sqrt(sq) < m.point_norm)) {
      return r.Error("ghhc_nodes.npy",
                     absl::StrCat("node ", i, " has norm >= point_norm ", m.point_norm));
    }
  }
  DENDRO_ASSIGN_OR_RETURN(const std::vector<int64_t> leaf, r.Int64("ghhc_node_leaf.npy", {n}));
  DENDRO_ASSIGN_OR_RETURN(const std::vector<int64_t> parent,
                          r.Int64("ghhc_node_parent.npy", {n}));
  DENDRO_RETURN_IF_ERROR(CheckNodeIds(r, "ghhc_node_leaf.npy", leaf, n));
  DENDRO_RETURN_IF_ERROR(CheckNodeIds(r, "ghhc_node_parent.npy", parent, n));
  if (*std::max_element(leaf.begin(), leaf.end()) < 0) {
    return r.Error("ghhc_node_leaf.npy", "no node holds a leaf");
  }
  model.node_leaf.assign(leaf.begin(), leaf.end());
  const int64_t leaves = *std::max_element(leaf.begin(), leaf.end()) + 1;
  if (ward) {
    DENDRO_ASSIGN_OR_RETURN(model.leaf_size, r.Float64("ghhc_leaf_size.npy", {leaves}));
    DENDRO_RETURN_IF_ERROR(CheckPositiveFinite(r, "ghhc_leaf_size.npy", model.leaf_size));
    DENDRO_ASSIGN_OR_RETURN(model.leaf_mean, r.Float64("ghhc_leaf_mean.npy", {leaves, bd}));
    DENDRO_RETURN_IF_ERROR(CheckFinite(r, "ghhc_leaf_mean.npy", model.leaf_mean));
  }
  model.node_parent.assign(parent.begin(), parent.end());
  if (m.learned) {
    const int64_t nt = m.train_points;
    DENDRO_ASSIGN_OR_RETURN(const std::vector<int64_t> tl, r.Int64("ghhc_train_leaf.npy", {nt}));
    DENDRO_ASSIGN_OR_RETURN(model.train_points, r.Float32("ghhc_train_points.npy", {nt, bd}));
    for (float v : model.train_points) {
      if (!std::isfinite(v)) return r.Error("ghhc_train_points.npy", "non-finite value");
    }
    for (int64_t i = 0; i < nt; ++i) {
      if (tl[i] < 0 || tl[i] >= leaves) {
        return r.Error("ghhc_train_leaf.npy",
                       absl::StrCat("entry ", i, " = ", tl[i], " outside [0, ", leaves, ")"));
      }
    }
    model.train_leaf.assign(tl.begin(), tl.end());
  }
  return model;
}

}  // namespace dendro
