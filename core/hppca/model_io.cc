// HppcaModel::Save / Load (file layout in hppca.h). Kept apart from the rest
// of the module because it needs dendro_io (only binaries that save or load
// models link it).
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/hierarchy/export.h"
#include "core/hppca/hppca.h"
#include "core/hppca/internal.h"
#include "core/io/atomic_file.h"
#include "core/io/model_artifact.h"

namespace dendro {
namespace {

constexpr ArtifactFormat kFormat{"hppca.json", "dendro.hppca", 1, "hierarchical PPCA",
                                 absl::StatusCode::kDataLoss};
constexpr int64_t kMax = std::numeric_limits<int32_t>::max();  // bound on sizes

struct HppcaManifest final : ArtifactManifest {
  int64_t dim = 0, classes = 0, superclasses = 0, q = 0, r = 0;
  HppcaOptions options;
  std::string score;  // options.score by name
  // options.scoring by name; absent in models saved before it existed, which
  // predicted hierarchically by default.
  std::string scoring = "hierarchical";
  HppcaFitStats stats;
  void Fields(ManifestFields& f) override {
    f.Int("dim", &dim, 1, kMax);
    f.Int("classes", &classes, 2, kMax);
    f.Int("superclasses", &superclasses, 0, kMax);
    f.Int("q", &q, 0, kMax);
    f.Int("r", &r, 0, kMax);
    f.Object("options", [&](ManifestFields& o) {
      o.Int("q", &options.q);
      o.Int("r", &options.r);
      o.Number("lambda", &options.lambda);
      o.String("score", &score);
      o.Int("superclasses", &options.superclasses);
      o.Bool("raw_data_clustering", &options.raw_data_clustering);
      o.Int("raw_samples_per_class", &options.raw_samples_per_class);
      o.Int("kmeans_iterations", &options.kmeans_iterations);
      o.Int("kmeans_restarts", &options.kmeans_restarts);
      o.Uint("seed", &options.seed);
      o.Int("default_top_t", &options.default_top_t);
      o.Optional().String("scoring", &scoring);
    });
    // Informational: what is missing reads as zero.
    f.Optional().Object("stats", [&](ManifestFields& s) {
      s.Optional().Int("kmeans_iterations", &stats.kmeans_iterations);
      s.Optional().Bool("kmeans_converged", &stats.kmeans_converged);
      s.Optional().Int("reseeded_superclasses", &stats.reseeded_superclasses);
      s.Optional().Int("dropped_superclasses", &stats.dropped_superclasses);
      s.Optional().Int("reduced_rank_classes", &stats.reduced_rank_classes);
      s.Optional().Number("kmeans_objective", &stats.kmeans_objective);
      s.Optional().Number("class_seconds", &stats.class_seconds);
      s.Optional().Number("cluster_seconds", &stats.cluster_seconds);
      s.Optional().Number("seed_seconds", &stats.seed_seconds);
      s.Optional().Number("total_seconds", &stats.total_seconds);
    });
  }
};


// The class table: labels (strictly ascending), counts, ranks, means,
// eigenvalues, tails and bases.
absl::StatusOr<hppca_internal::ClassTable> ReadClasses(const ModelArtifactReader& a,
                                                       const HppcaManifest& m) {
  const int64_t k = m.classes, d = m.dim, q = m.q;
  hppca_internal::ClassTable t;
  t.d = d;
  t.q = static_cast<int32_t>(q);
  DENDRO_ASSIGN_OR_RETURN(t.labels, a.Int64("labels.npy", {k}));
  for (int64_t i = 1; i < k; ++i) {
    if (t.labels[i] <= t.labels[i - 1]) return a.Error("labels.npy", "not strictly ascending");
  }
  DENDRO_ASSIGN_OR_RETURN(t.counts, a.Int64("class_counts.npy", {k}));
  DENDRO_ASSIGN_OR_RETURN(const std::vector<int64_t> rank, a.Int64("class_rank.npy", {k}));
  // A class keeps at most q components (fewer when it has n <= q rows).
  for (const int64_t r : rank) {
    if (r < 0 || r > q) {
      return a.Error("class_rank.npy", absl::StrCat("rank ", r, " outside [0, q = ", q, "]"));
    }
  }
  t.rank.assign(rank.begin(), rank.end());
  DENDRO_ASSIGN_OR_RETURN(const std::vector<double> means, a.Float64("class_means.npy", {k, d}));
  t.means = Eigen::Map<const RowMatrixD>(means.data(), k, d);
  DENDRO_ASSIGN_OR_RETURN(const std::vector<double> eig, a.Float64("class_eigvals.npy", {k, q}));
  t.eigvals = Eigen::Map<const RowMatrixD>(eig.data(), k, q);
  DENDRO_ASSIGN_OR_RETURN(t.tail, a.Float64("class_tail.npy", {k}));
  DENDRO_ASSIGN_OR_RETURN(const std::unique_ptr<MappedNpy> bases,
                          a.MapFloat32("class_bases.npy", {k * q, d}));
  t.bases = Eigen::Map<const RowMatrixF>(static_cast<const float*>(bases->data()), k * q, d);
  return t;
}

// Each class's super-class, every super-class non-empty; empty when flat
// (the file then holds -1s).
absl::StatusOr<std::vector<int32_t>> ReadSuperclassOf(const ModelArtifactReader& a,
                                                      const HppcaManifest& m) {
  const int64_t s = m.superclasses;
  DENDRO_ASSIGN_OR_RETURN(const std::vector<int64_t> super_of,
                          a.Int64("superclass_of.npy", {m.classes}));
  std::vector<int64_t> members(s, 0);
  for (int64_t v : super_of) {
    if ((s == 0 && v != -1) || (s > 0 && (v < 0 || v >= s))) {
      return a.Error("superclass_of.npy", absl::StrCat("out-of-range value ", v));
    }
    if (s > 0) ++members[v];
  }
  for (int64_t i = 0; i < s; ++i) {
    if (members[i] == 0) {
      return a.Error("superclass_of.npy", absl::StrCat("super-class ", i, " is empty"));
    }
  }
  if (s == 0) return std::vector<int32_t>();
  return std::vector<int32_t>(super_of.begin(), super_of.end());
}

// The super-classes' Theorem 2 centroids.
absl::StatusOr<std::vector<Centroid>> ReadCentroids(const ModelArtifactReader& a,
                                                    const HppcaManifest& m) {
  const int64_t s = m.superclasses, d = m.dim, r = m.r;
  std::vector<Centroid> centroids(s);
  if (s == 0) return centroids;
  DENDRO_ASSIGN_OR_RETURN(const std::vector<double> means, a.Float64("super_means.npy", {s, d}));
  DENDRO_ASSIGN_OR_RETURN(const std::vector<double> eig, a.Float64("super_eigvals.npy", {s, r}));
  DENDRO_ASSIGN_OR_RETURN(const std::vector<float> bases,
                          a.Float32("super_bases.npy", {s * r, d}));
  DENDRO_ASSIGN_OR_RETURN(const std::vector<double> stats, a.Float64("super_stats.npy", {s, 3}));
  for (int64_t i = 0; i < s; ++i) {
    Centroid& c = centroids[i];
    c.mean = Eigen::Map<const Eigen::VectorXd>(means.data() + i * d, d);
    c.eigvals = Eigen::Map<const Eigen::VectorXd>(eig.data() + i * r, r);
    c.eigvecs = Eigen::Map<const RowMatrixF>(bases.data() + i * r * d, r, d);
    c.tail = stats[i * 3];
    c.noise_mean = stats[i * 3 + 1];
    c.trace = stats[i * 3 + 2];
  }
  return centroids;
}

}  // namespace

absl::Status HppcaModel::Save(const std::string& dir) const {
  const Impl& impl = *impl_;
  const hppca_internal::ClassTable& t = impl.classes;
  HppcaManifest m;
  const int64_t k = m.classes = num_classes();
  const int64_t d = m.dim = dim();
  const int64_t q = m.q = t.q;
  const int64_t s = m.superclasses = num_superclasses();
  const int64_t r = m.r = s > 0 ? impl.centroids[0].eigvals.size() : 0;
  m.options = impl.options;
  m.score = std::string(PpcaScoreName(impl.options.score));
  m.scoring = std::string(HppcaScoringName(impl.options.scoring));
  m.stats = impl.stats;

  ModelArtifactWriter w(dir, kFormat);
  w.Add("labels.npy", t.labels, {k});
  w.Add("class_counts.npy", t.counts, {k});
  w.Add("class_rank.npy", t.rank, {k});
  w.Add("superclass_of.npy", impl.super_of, {k});
  w.Add("class_means.npy", absl::MakeConstSpan(t.means.data(), k * d), {k, d});
  w.Add("class_eigvals.npy", absl::MakeConstSpan(t.eigvals.data(), k * q), {k, q});
  w.Add("class_tail.npy", t.tail, {k});
  std::vector<absl::Span<const float>> bases;  // class order, from the slot-ordered copy
  for (int32_t c = 0; c < k; ++c) {
    bases.push_back(absl::MakeConstSpan(class_basis(c).data(), q * d));
  }
  w.AddPieces("class_bases.npy", std::move(bases), {k * q, d});
  RowMatrixD super_means(s, d), super_eigvals(s, r), super_stats(s, 3);
  if (s > 0) {
    for (int64_t i = 0; i < s; ++i) {
      const Centroid& c = impl.centroids[i];
      super_means.row(i) = c.mean.transpose();
      super_eigvals.row(i) = c.eigvals.transpose();
      super_stats.row(i) << c.tail, c.noise_mean, c.trace;
    }
    w.Add("super_means.npy", absl::MakeConstSpan(super_means.data(), s * d), {s, d});
    w.Add("super_eigvals.npy", absl::MakeConstSpan(super_eigvals.data(), s * r), {s, r});
    w.Add("super_bases.npy", absl::MakeConstSpan(impl.super_bases.data(), s * r * d), {s * r, d});
    w.Add("super_stats.npy", absl::MakeConstSpan(super_stats.data(), s * 3), {s, 3});
  }
  const std::vector<int32_t>& point_leaf = hierarchy().point_leaf();
  if (!point_leaf.empty()) {
    w.Add("point_leaf.npy", point_leaf, {static_cast<int64_t>(point_leaf.size())});
  }
  DENDRO_RETURN_IF_ERROR(WriteFileAtomic(dir + "/tree.json", ToJson(hierarchy(), false)));
  return w.Write(m);  // hppca.json last: a directory that has it is complete
}

absl::StatusOr<HppcaModel> HppcaModel::Load(const std::string& dir) {
  HppcaManifest m;
  DENDRO_ASSIGN_OR_RETURN(const ModelArtifactReader a,
                          ModelArtifactReader::Open(dir, kFormat, &m));
  if (m.q > m.dim || m.superclasses > m.classes || m.r > m.dim) {
    return a.Error(kFormat.manifest,
                   absl::StrCat("inconsistent sizes: ", m.classes, " classes, ", m.superclasses,
                                " super-classes, dim ", m.dim, ", q ", m.q, ", r ", m.r));
  }
  if (!(m.options.lambda > 0.0)) return a.FieldError("options.lambda", "must be positive");
  absl::StatusOr<PpcaScore> score = ParsePpcaScore(m.score);
  if (!score.ok()) return a.FieldError("options.score", std::string(score.status().message()));
  m.options.score = *score;
  absl::StatusOr<HppcaScoring> scoring = ParseHppcaScoring(m.scoring);
  if (!scoring.ok()) {
    return a.FieldError("options.scoring", std::string(scoring.status().message()));
  }
  m.options.scoring = *scoring;
  DENDRO_ASSIGN_OR_RETURN(hppca_internal::ClassTable classes, ReadClasses(a, m));
  DENDRO_ASSIGN_OR_RETURN(std::vector<int32_t> super_of, ReadSuperclassOf(a, m));
  DENDRO_ASSIGN_OR_RETURN(std::vector<Centroid> centroids, ReadCentroids(a, m));
  std::vector<int32_t> point_leaf;
  if (a.Has("point_leaf.npy")) {
    DENDRO_ASSIGN_OR_RETURN(const std::vector<int64_t> pl,
                            a.Int64("point_leaf.npy", {ModelArtifactReader::kAnyLength}));
    for (int64_t v : pl) {
      if (v < 0 || v >= m.classes) {
        return a.Error("point_leaf.npy", absl::StrCat("out-of-range value ", v));
      }
    }
    point_leaf.assign(pl.begin(), pl.end());
  }
  DENDRO_ASSIGN_OR_RETURN(
      HppcaModel model,
      HppcaBuilder::Build(m.options, m.stats, std::move(classes), std::move(super_of),
                          std::move(centroids), std::move(point_leaf)));
  // Metadata added after training (e.g. by the server) lives in tree.json.
  std::string tree_json;
  if (ReadFileToString(dir + "/tree.json", &tree_json).ok()) {
    auto tree = ParseJson(tree_json);
    if (tree.ok()) {
      // Names given to the classes (SetClassNames) are the saved leaves'.
      if (static_cast<int64_t>(tree->leaf_names().size()) == model.num_classes()) {
        DENDRO_RETURN_IF_ERROR(model.SetClassNames(tree->leaf_names()));
      }
      for (const auto& [key, value] : tree->metadata()) {
        model.mutable_metadata().emplace(key, value);
        if (key != "refined") model.impl_->coarse_tree->mutable_metadata().emplace(key, value);
      }
    }
  }
  return model;
}

}  // namespace dendro
