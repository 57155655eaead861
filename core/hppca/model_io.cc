// GCC 12.2 reports false (maybe-)uninitialized warnings inside its own
// AVX-512 intrinsics headers when Eigen is built with -march=native (GCC bug
// 105593, fixed in 12.3/13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
// HppcaModel::Save / Load. Kept apart from the rest of the module because it
// needs dendro_io (only binaries that save or load models link it).
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/hierarchy/export.h"
#include "core/hppca/hppca.h"
#include "core/hppca/internal.h"
#include "core/io/atomic_file.h"
#include "core/io/json_fields.h"
#include "core/io/npy.h"
#include "nlohmann/json.hpp"

namespace dendro {
namespace {

constexpr int kFormatVersion = 1;
constexpr char kFormat[] = "dendro.hppca";

template <typename T>
absl::Status Write(const std::string& path, const T* data, int64_t rows, int64_t cols) {
  const int64_t shape2[2] = {rows, cols};
  const int64_t shape1[1] = {rows};
  absl::Span<const int64_t> shape =
      cols < 0 ? absl::Span<const int64_t>(shape1) : absl::Span<const int64_t>(shape2);
  const int64_t count = rows * (cols < 0 ? 1 : cols);
  return WriteNpy(path, absl::MakeConstSpan(data, count), shape);
}

absl::Status ExpectShape(const std::string& file, const std::vector<int64_t>& shape,
                         std::vector<int64_t> want) {
  if (shape != want) {
    auto str = [](const std::vector<int64_t>& s) {
      std::string out = "(";
      for (size_t i = 0; i < s.size(); ++i) absl::StrAppend(&out, i ? ", " : "", s[i]);
      return out + ")";
    };
    return absl::DataLossError(absl::StrCat("hppca model file ", file, " has shape ", str(shape),
                                            ", expected ", str(want)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status HppcaModel::Save(const std::string& dir) const {
  const Impl& m = *impl_;
  const auto& t = m.classes;
  const int64_t k = num_classes(), d = dim(), q = t.q, s = num_superclasses();
  const int64_t r = s > 0 ? m.centroids[0].eigvals.size() : 0;
  nlohmann::json j;
  j["format"] = kFormat;
  j["version"] = kFormatVersion;
  j["dim"] = d;
  j["classes"] = k;
  j["superclasses"] = s;
  j["q"] = q;
  j["r"] = r;
  const HppcaOptions& o = m.options;
  j["options"] = {{"q", o.q},
                  {"r", o.r},
                  {"lambda", o.lambda},
                  {"score", std::string(PpcaScoreName(o.score))},
                  {"superclasses", o.superclasses},
                  {"raw_data_clustering", o.raw_data_clustering},
                  {"raw_samples_per_class", o.raw_samples_per_class},
                  {"kmeans_iterations", o.kmeans_iterations},
                  {"kmeans_restarts", o.kmeans_restarts},
                  {"seed", o.seed},
                  {"default_top_t", o.default_top_t}};
  const HppcaFitStats& st = m.stats;
  j["stats"] = {{"kmeans_iterations", st.kmeans_iterations},
                {"kmeans_converged", st.kmeans_converged},
                {"reseeded_superclasses", st.reseeded_superclasses},
                {"dropped_superclasses", st.dropped_superclasses},
                {"reduced_rank_classes", st.reduced_rank_classes},
                {"kmeans_objective", st.kmeans_objective},
                {"class_seconds", st.class_seconds},
                {"cluster_seconds", st.cluster_seconds},
                {"seed_seconds", st.seed_seconds},
                {"total_seconds", st.total_seconds}};
  DENDRO_RETURN_IF_ERROR(Write(dir + "/labels.npy", t.labels.data(), k, -1));
  DENDRO_RETURN_IF_ERROR(Write(dir + "/class_counts.npy", t.counts.data(), k, -1));
  DENDRO_RETURN_IF_ERROR(Write(dir + "/class_rank.npy", t.rank.data(), k, -1));
  DENDRO_RETURN_IF_ERROR(Write(dir + "/superclass_of.npy", m.super_of.data(), k, -1));
  DENDRO_RETURN_IF_ERROR(Write(dir + "/class_means.npy", t.means.data(), k, d));
  DENDRO_RETURN_IF_ERROR(Write(dir + "/class_eigvals.npy", t.eigvals.data(), k, q));
  DENDRO_RETURN_IF_ERROR(Write(dir + "/class_tail.npy", t.tail.data(), k, -1));
  {
    // Class order; streamed from the slot-ordered copy.
    AtomicFileWriter w;
    DENDRO_RETURN_IF_ERROR(AtomicFileWriter::Open(dir + "/class_bases.npy", &w));
    const int64_t shape[2] = {k * q, d};
    DENDRO_RETURN_IF_ERROR(w.Append(MakeNpyHeader(DType::kFloat32, shape)));
    for (int32_t c = 0; c < k; ++c) {
      const float* p = class_basis(c).data();
      DENDRO_RETURN_IF_ERROR(w.Append(std::string_view(reinterpret_cast<const char*>(p),
                                                       sizeof(float) * q * d)));
    }
    DENDRO_RETURN_IF_ERROR(w.Commit());
  }
  if (s > 0) {
    RowMatrixD means(s, d), eig(s, r), stats(s, 3);
    for (int64_t i = 0; i < s; ++i) {
      const Centroid& c = m.centroids[i];
      means.row(i) = c.mean.transpose();
      eig.row(i) = c.eigvals.transpose();
      stats.row(i) << c.tail, c.noise_mean, c.trace;
    }
    DENDRO_RETURN_IF_ERROR(Write(dir + "/super_means.npy", means.data(), s, d));
    DENDRO_RETURN_IF_ERROR(Write(dir + "/super_eigvals.npy", eig.data(), s, r));
    DENDRO_RETURN_IF_ERROR(Write(dir + "/super_bases.npy", m.super_bases.data(), s * r, d));
    DENDRO_RETURN_IF_ERROR(Write(dir + "/super_stats.npy", stats.data(), s, 3));
  }
  const auto& pl = hierarchy().point_leaf();
  if (!pl.empty()) {
    DENDRO_RETURN_IF_ERROR(
        Write(dir + "/point_leaf.npy", pl.data(), static_cast<int64_t>(pl.size()), -1));
  }
  DENDRO_RETURN_IF_ERROR(WriteFileAtomic(dir + "/tree.json", ToJson(hierarchy(), false)));
  // Last, so that a directory with hppca.json is complete.
  return WriteFileAtomic(dir + "/hppca.json", DumpJson(j, 2));
}

absl::StatusOr<HppcaModel> HppcaModel::Load(const std::string& dir) {
  const std::string json_path = dir + "/hppca.json";
  std::string text;
  DENDRO_RETURN_IF_ERROR(ReadFileToString(json_path, &text));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  const JsonFields f(j, json_path, absl::StatusCode::kDataLoss);
  absl::StatusOr<std::string> format = f.GetStringOr("format", "");
  if (j.is_discarded() || !f.is_object() || !format.ok() || *format != kFormat) {
    return absl::DataLossError(absl::StrCat(json_path, " is not a dendro.hppca model"));
  }
  DENDRO_ASSIGN_OR_RETURN(const int64_t version, f.GetInt64Or("version", 0));
  if (version != kFormatVersion) {
    return absl::DataLossError(
        absl::StrCat(json_path, ": unsupported format version ", version));
  }
  HppcaOptions o;
  HppcaFitStats st;
  DENDRO_ASSIGN_OR_RETURN(const int64_t k, f.GetInt64("classes"));
  DENDRO_ASSIGN_OR_RETURN(const int64_t d, f.GetInt64("dim"));
  DENDRO_ASSIGN_OR_RETURN(const int64_t q, f.GetInt64("q"));
  DENDRO_ASSIGN_OR_RETURN(const int64_t s, f.GetInt64("superclasses"));
  DENDRO_ASSIGN_OR_RETURN(const int64_t r, f.GetInt64("r"));
  {
    DENDRO_ASSIGN_OR_RETURN(const JsonFields jo, f.GetObject("options"));
    DENDRO_ASSIGN_OR_RETURN(o.q, jo.GetInt("q"));
    DENDRO_ASSIGN_OR_RETURN(o.r, jo.GetInt("r"));
    DENDRO_ASSIGN_OR_RETURN(o.lambda, jo.GetDouble("lambda"));
    DENDRO_ASSIGN_OR_RETURN(const std::string score_name, jo.GetString("score"));
    DENDRO_ASSIGN_OR_RETURN(o.score, ParsePpcaScore(score_name));
    DENDRO_ASSIGN_OR_RETURN(o.superclasses, jo.GetInt("superclasses"));
    DENDRO_ASSIGN_OR_RETURN(o.raw_data_clustering, jo.GetBool("raw_data_clustering"));
    DENDRO_ASSIGN_OR_RETURN(o.raw_samples_per_class, jo.GetInt("raw_samples_per_class"));
    DENDRO_ASSIGN_OR_RETURN(o.kmeans_iterations, jo.GetInt("kmeans_iterations"));
    DENDRO_ASSIGN_OR_RETURN(o.kmeans_restarts, jo.GetInt("kmeans_restarts"));
    DENDRO_ASSIGN_OR_RETURN(o.seed, jo.GetUint64("seed"));
    DENDRO_ASSIGN_OR_RETURN(o.default_top_t, jo.GetInt("default_top_t"));
  }
  {
    // Statistics are informational: missing ones read as zero.
    DENDRO_ASSIGN_OR_RETURN(const JsonFields js, f.GetObjectOrEmpty("stats"));
    DENDRO_ASSIGN_OR_RETURN(st.kmeans_iterations, js.GetIntOr("kmeans_iterations", 0));
    DENDRO_ASSIGN_OR_RETURN(st.kmeans_converged, js.GetBoolOr("kmeans_converged", false));
    DENDRO_ASSIGN_OR_RETURN(st.reseeded_superclasses, js.GetIntOr("reseeded_superclasses", 0));
    DENDRO_ASSIGN_OR_RETURN(st.dropped_superclasses, js.GetIntOr("dropped_superclasses", 0));
    DENDRO_ASSIGN_OR_RETURN(st.reduced_rank_classes, js.GetIntOr("reduced_rank_classes", 0));
    DENDRO_ASSIGN_OR_RETURN(st.kmeans_objective, js.GetDoubleOr("kmeans_objective", 0.0));
    DENDRO_ASSIGN_OR_RETURN(st.class_seconds, js.GetDoubleOr("class_seconds", 0.0));
    DENDRO_ASSIGN_OR_RETURN(st.cluster_seconds, js.GetDoubleOr("cluster_seconds", 0.0));
    DENDRO_ASSIGN_OR_RETURN(st.seed_seconds, js.GetDoubleOr("seed_seconds", 0.0));
    DENDRO_ASSIGN_OR_RETURN(st.total_seconds, js.GetDoubleOr("total_seconds", 0.0));
  }
  if (k < 2 || d < 1 || q < 0 || q > d || s < 0 || s > k || r < 0 || r > d ||
      !(o.lambda > 0.0)) {
    return absl::DataLossError(absl::StrCat(json_path, ": inconsistent sizes"));
  }
  hppca_internal::ClassTable t;
  t.d = d;
  t.q = static_cast<int32_t>(q);
  {
    DENDRO_ASSIGN_OR_RETURN(NpyArrayI64 a, ReadNpyInt(dir + "/labels.npy"));
    DENDRO_RETURN_IF_ERROR(ExpectShape("labels.npy", a.shape, {k}));
    t.labels = std::move(a.data);
    for (int64_t i = 1; i < k; ++i) {
      if (t.labels[i] <= t.labels[i - 1]) {
        return absl::DataLossError("hppca model file labels.npy is not strictly ascending");
      }
    }
  }
  {
    DENDRO_ASSIGN_OR_RETURN(NpyArrayI64 a, ReadNpyInt(dir + "/class_counts.npy"));
    DENDRO_RETURN_IF_ERROR(ExpectShape("class_counts.npy", a.shape, {k}));
    t.counts = std::move(a.data);
  }
  {
    DENDRO_ASSIGN_OR_RETURN(NpyArrayI64 a, ReadNpyInt(dir + "/class_rank.npy"));
    DENDRO_RETURN_IF_ERROR(ExpectShape("class_rank.npy", a.shape, {k}));
    t.rank.assign(a.data.begin(), a.data.end());
  }
  std::vector<int32_t> super_of;
  {
    DENDRO_ASSIGN_OR_RETURN(NpyArrayI64 a, ReadNpyInt(dir + "/superclass_of.npy"));
    DENDRO_RETURN_IF_ERROR(ExpectShape("superclass_of.npy", a.shape, {k}));
    std::vector<int64_t> size(s, 0);
    for (int64_t v : a.data) {
      if ((s == 0 && v != -1) || (s > 0 && (v < 0 || v >= s))) {
        return absl::DataLossError(
            absl::StrCat("hppca model file superclass_of.npy has out-of-range value ", v));
      }
      if (s > 0) ++size[v];
    }
    for (int64_t i = 0; i < s; ++i) {
      if (size[i] == 0) {
        return absl::DataLossError(absl::StrCat("hppca model: super-class ", i, " is empty"));
      }
    }
    super_of.assign(a.data.begin(), a.data.end());
  }
  {
    DENDRO_ASSIGN_OR_RETURN(NpyArrayF64 a, ReadNpyFloat64(dir + "/class_means.npy"));
    DENDRO_RETURN_IF_ERROR(ExpectShape("class_means.npy", a.shape, {k, d}));
    t.means = Eigen::Map<const RowMatrixD>(a.data.data(), k, d);
  }
  {
    DENDRO_ASSIGN_OR_RETURN(NpyArrayF64 a, ReadNpyFloat64(dir + "/class_eigvals.npy"));
    DENDRO_RETURN_IF_ERROR(ExpectShape("class_eigvals.npy", a.shape, {k, q}));
    t.eigvals = Eigen::Map<const RowMatrixD>(a.data.data(), k, q);
  }
  {
    DENDRO_ASSIGN_OR_RETURN(NpyArrayF64 a, ReadNpyFloat64(dir + "/class_tail.npy"));
    DENDRO_RETURN_IF_ERROR(ExpectShape("class_tail.npy", a.shape, {k}));
    t.tail = std::move(a.data);
  }
  {
    DENDRO_ASSIGN_OR_RETURN(std::unique_ptr<MappedNpy> a,
                            MappedNpy::Open(dir + "/class_bases.npy"));
    DENDRO_RETURN_IF_ERROR(ExpectShape("class_bases.npy", a->header().shape, {k * q, d}));
    DENDRO_ASSIGN_OR_RETURN(absl::Span<const float> v, a->AsFloat32());
    t.bases = Eigen::Map<const RowMatrixF>(v.data(), k * q, d);
  }
  std::vector<Centroid> centroids(s);
  if (s > 0) {
    DENDRO_ASSIGN_OR_RETURN(NpyArrayF64 means, ReadNpyFloat64(dir + "/super_means.npy"));
    DENDRO_RETURN_IF_ERROR(ExpectShape("super_means.npy", means.shape, {s, d}));
    DENDRO_ASSIGN_OR_RETURN(NpyArrayF64 eig, ReadNpyFloat64(dir + "/super_eigvals.npy"));
    DENDRO_RETURN_IF_ERROR(ExpectShape("super_eigvals.npy", eig.shape, {s, r}));
    DENDRO_ASSIGN_OR_RETURN(NpyArrayF32 bases, ReadNpyFloat32(dir + "/super_bases.npy"));
    DENDRO_RETURN_IF_ERROR(ExpectShape("super_bases.npy", bases.shape, {s * r, d}));
    DENDRO_ASSIGN_OR_RETURN(NpyArrayF64 stats, ReadNpyFloat64(dir + "/super_stats.npy"));
    DENDRO_RETURN_IF_ERROR(ExpectShape("super_stats.npy", stats.shape, {s, 3}));
    for (int64_t i = 0; i < s; ++i) {
      Centroid& c = centroids[i];
      c.mean = Eigen::Map<const Eigen::VectorXd>(means.data.data() + i * d, d);
      c.eigvals = Eigen::Map<const Eigen::VectorXd>(eig.data.data() + i * r, r);
      c.eigvecs = Eigen::Map<const RowMatrixF>(bases.data.data() + i * r * d, r, d);
      c.tail = stats.data[i * 3];
      c.noise_mean = stats.data[i * 3 + 1];
      c.trace = stats.data[i * 3 + 2];
    }
  }
  std::vector<int32_t> point_leaf;
  std::error_code ec;
  if (std::filesystem::exists(dir + "/point_leaf.npy", ec)) {
    DENDRO_ASSIGN_OR_RETURN(NpyArrayI64 a, ReadNpyInt(dir + "/point_leaf.npy"));
    for (int64_t v : a.data) {
      if (v < 0 || v >= k) {
        return absl::DataLossError(
            absl::StrCat("hppca model file point_leaf.npy has out-of-range value ", v));
      }
    }
    point_leaf.assign(a.data.begin(), a.data.end());
  }
  if (s == 0) super_of.clear();
  DENDRO_ASSIGN_OR_RETURN(HppcaModel model,
                          HppcaBuilder::Build(o, st, std::move(t), std::move(super_of),
                                              std::move(centroids), std::move(point_leaf)));
  // Metadata added after training (e.g. by the server) lives in tree.json.
  std::string tree_json;
  if (ReadFileToString(dir + "/tree.json", &tree_json).ok()) {
    auto tree = ParseJson(tree_json);
    if (tree.ok()) {
      for (const auto& [key, value] : tree->metadata()) {
        model.mutable_metadata().emplace(key, value);
        if (key != "refined") model.impl_->coarse_tree->mutable_metadata().emplace(key, value);
      }
    }
  }
  return model;
}

}  // namespace dendro
