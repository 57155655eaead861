// Hierarchical PPCA classifiers (Wang & Barbu, "Hierarchical Probabilistic
// PCA", sections 3-4): one probabilistic-PCA Gaussian per class, the classes
// clustered into S super-classes, and prediction that scores the S
// super-classes first and then only the classes of the T best ones.
//
// Training (FitHppca), for labelled rows x (N x d float32) and labels (any
// int64 values):
//   * Classes are the sorted distinct labels; class k is the k-th smallest.
//     Predictions return the original label values.
//   * Per class (section 3.3): mean (eq. 3), sample covariance with 1/(n-1)
//     (eq. 4), its top-q eigenpairs (L, D) and the PPCA covariance
//     Sigma = L D L^T + lambda I (eq. 6). The data are read once: rows are
//     grouped by class and each class block is reduced with GEMMs (Gram
//     matrix when n_c < d, scatter matrix otherwise), classes in parallel.
//   * A class needs >= 2 points (a single point is InvalidArgument naming the
//     label). A class with n_c <= q points keeps q_c = n_c - 1 components
//     (the rank of its sample covariance); the padded components have D = 0
//     and contribute nothing. No input yields NaN scores (values are
//     bounded by kHppcaMaxAbsValue; scores saturate at the float32 range).
//   * Super-classes (section 4.4, Algorithms 2-3): k-means over the class
//     Gaussians, seeded by k-means++ with the Bhattacharyya distance (eq. 14),
//     assigning by KL divergence (eq. 15), centroids by Theorem 2 (eqs. 17,
//     18), until no class moves or `kmeans_iterations` rounds.
//       - Seeding is the greedy form of k-means++ (as in scikit-learn): each
//         step draws 2 + ln S candidates proportionally to their distance and
//         keeps the one that lowers the summed distance most (with K > 256
//         the candidates are compared on 256 sampled classes). Plain
//         k-means++ often seeds two centroids in one true group, which Lloyd
//         iterations with KL never undo. `kmeans_restarts` > 1 keeps the best
//         of several runs by the summed KL. The seeding's distances see each
//         class reduced to its top `seeding_rank` directions (the dropped
//         excess variance spread over all d); the rounds use whole models.
//       - The paper clusters the full sample covariances C_k. K full d x d
//         matrices do not fit in memory for K = 10,000 (and are singular when
//         n_c <= d), so each class enters clustering as the maximum-
//         likelihood PPCA approximation of C_k (Tipping & Bishop): its top-q
//         eigenpairs and, in the other directions, the mean of the discarded
//         eigenvalues (at least lambda). Likewise a centroid enters the KL
//         assignment as its ML PPCA approximation with r components.
//       - The KL assignment is exact. A round computes the divergences to
//         the centroids that changed in the previous round only; the others
//         are the same exact values kept from the round that computed them
//         (a centroid is a function of its member set). A super-class left
//         empty is re-seeded with the class farthest (in KL) from its own
//         centroid.
//   * Super-class PPCA models: top-r eigenpairs of the Theorem 2 covariance,
//     scored like classes with the same lambda.
//   * Optional "raw data" clustering (section 5.4): `raw_samples_per_class`
//     random rows per class are clustered by Euclidean k-means (greedy
//     k-means++ seeding); each class joins the cluster holding most of its
//     samples (ties: lower cluster id); clusters no class chose are dropped.
//   * S = kFlatClassifier gives the flat classifier (no super-classes); S =
//     kAutoSuperclasses picks the S >= default_top_t that minimises the
//     prediction cost model below with K / S classes per super-class
//     (ChooseHppcaSuperclasses): sqrt(T K c(q) / c(r)), which is section
//     4.3's sqrt(K * default_top_t) when q = r.
//
// Prediction cost (EstimateHppcaPredictCost, docs/methods.md "When the
// hierarchy pays"): per row, in units of one multiply-add of a large GEMM,
//   flat         = K c(q)
//   hierarchical = S c(r) + E c(q) + T (d + kHppcaOpenCost)
//   c(p)         = (p + 1) d + kHppcaComponentCost p + kHppcaModelCost
// where E is the number of class models the T opened super-classes hold. The
// constants were measured on one machine (docs/benchmarks.md); the rule uses
// no clock, so a model behaves the same on every machine. A model whose
// options say HppcaScoring::kAuto (the default) scores a request that names
// neither flat scoring nor T by this estimate at default_top_t:
// hierarchically only where it costs less than kHppcaHierarchyShare of flat,
// else flat, which is never less accurate (it scores every class). Its
// super-classes and trees are the same either way.
//
// Scores (smaller is better): kMahalanobis is the paper's default, the
// Theorem 1 form (eq. 7) of the Mahalanobis distance (eq. 2),
//   r(x) = (|x - mu|^2 - sum_j D_j / (D_j + lambda) (l_j . (x - mu))^2) / lambda;
// kLogDet adds log|Sigma| (eq. 1). Scoring is batched: for a block of rows
// the projections onto every opened super-class's class bases are one GEMM
// per super-class over just the rows that opened it.
//
// The fitted model is also a Hierarchy, in two forms with the same leaves
// (classes, sorted label order) and point_leaf (the class of each training
// row):
//   * coarse_hierarchy(): internal nodes = super-classes with >= 2 classes
//     at height 1, the root at height 2 (classes of one-class super-classes
//     hang off the root; with a single super-class, or flat, the root is at
//     height 1 and has every class as a child).
//   * hierarchy(): its binary refinement (core/hierarchy/refine.h), so that
//     every cut is reachable -- CutToK(k) for every k, and SciPy's maxclust
//     on the exported linkage. Each node with m > 2 children becomes m - 1
//     binary merges by average linkage of its children, a class represented
//     by its mean and a super-class by its centroid mean (Theorem 2), with
//     the squared Euclidean distance between those means; ties go to the
//     smallest node ids; the j-th merge gets h0 + (H - h0) j / (m - 1) (h0:
//     largest child height, H: the node's height), then equal heights of
//     different nodes are separated in (height, id) order (so super-classes
//     end up near, not exactly at, height 1). Deterministic, and rebuilt by
//     Load from the stored means, so older saved models get it too.
// This is what exports, cuts and evaluations use; the coarse form is the
// paper's two-level structure.
#ifndef DENDRO_CORE_HPPCA_HPPCA_H_
#define DENDRO_CORE_HPPCA_HPPCA_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/common/run_context.h"
#include "core/hierarchy/hierarchy.h"
#include "core/hppca/choices.h"
#include "core/hppca/gaussian.h"
#include "core/matrix/matrix.h"

namespace dendro {

enum class PpcaScore {
  kMahalanobis,  // eq. 7 (= eq. 2), the default
  kLogDet,       // eq. 1: eq. 2 + log|Sigma|
};
std::string_view PpcaScoreName(PpcaScore s);  // "mahalanobis", "log_det"
absl::StatusOr<PpcaScore> ParsePpcaScore(std::string_view name);

inline constexpr int32_t kAutoSuperclasses = 0;
inline constexpr int32_t kFlatClassifier = -1;

// The cost model's constants, in multiply-adds of a large GEMM: the work of
// each of a model's components beyond its GEMM column (the weighted square),
// of each scored model (its score and the top-k offer), and of each opened
// super-class (copying the row for its GEMM, its candidate list). Fitted to
// one-thread CPU times over K = 50..1,000 and d = 4..512 in two runs
// (tests/bench/hppca_cost_fit.py; docs/benchmarks.md), rounded.
inline constexpr double kHppcaComponentCost = 28.0;
inline constexpr double kHppcaModelCost = 110.0;
inline constexpr double kHppcaOpenCost = 2700.0;
// kAuto scores hierarchically only where the estimate is below this share of
// flat's: the fit's error (median 20%, up to 40%) and the GEMMs of small
// super-classes, slower per multiply-add than flat's large ones, put
// estimates of 0.8 to 1 on both sides of break-even (measured on two
// threads at K = 50); flat is the exact answer, so a near tie goes to it.
inline constexpr double kHppcaHierarchyShare = 0.75;

// Per-row prediction work, in multiply-adds of a large GEMM (see above).
struct HppcaPredictCost {
  double flat = 0;
  double hierarchical = 0;  // equal to flat for a flat model
};
// d features; K classes of q components; S super-classes of r components, T
// of them opened per row, holding `classes_opened` classes in all per row.
HppcaPredictCost EstimateHppcaPredictCost(int64_t d, int32_t k, int32_t q, int32_t s, int32_t r,
                                          int32_t t, double classes_opened);
// The S in [min(T, K), K] with the smallest hierarchical cost when each
// super-class holds K / S classes and T are opened; the smaller S on a tie.
// (Fewer than T super-classes would all be opened: no hierarchy at all.)
int32_t ChooseHppcaSuperclasses(int64_t d, int32_t k, int32_t q, int32_t r, int32_t t);

// Largest magnitude of a feature value, in training and prediction rows
// alike. The scores are computed with float32 products (x B^T, x mu^T) and
// returned as float32; inside this range every intermediate and every score
// is finite for any d <= 10^5, so no input yields a NaN or infinite score.
// Rows outside it are InvalidArgument naming the row, column and range.
inline constexpr float kHppcaMaxAbsValue = 1e9f;

struct HppcaOptions {
  int32_t q = 50;          // class PPCA components, 0 <= q <= d
  int32_t r = 50;          // super-class PPCA components, 0 <= r <= d
  double lambda = 0.01;    // PPCA noise variance, > 0
  PpcaScore score = PpcaScore::kMahalanobis;
  // S: kAutoSuperclasses, kFlatClassifier or 1 <= S <= K.
  int32_t superclasses = kAutoSuperclasses;
  bool raw_data_clustering = false;
  int32_t raw_samples_per_class = 20;  // paper section 5.4
  int32_t kmeans_iterations = 50;      // cap on k-means rounds (>= 1)
  // Gaussian k-means runs from this many k-means++ seedings (seeds derived
  // from `seed`); the partition with the smallest summed KL wins.
  int32_t kmeans_restarts = 1;
  // The k-means++ seeding compares classes on their top `seeding_rank`
  // directions (the rest of their variance spread isotropically); 0: all q,
  // as Algorithm 3 is written. See docs/methods.md for why 10.
  int32_t seeding_rank = 10;
  uint64_t seed = 0;                   // k-means++ and raw-data sampling
  int32_t default_top_t = 5;           // T when a request gives none (>= 1)
  // How a request that names neither flat nor T is scored (above). Models
  // saved before this option existed load as kHierarchical, as they
  // predicted then.
  HppcaScoring scoring = HppcaScoring::kAuto;
  int num_threads = 0;                 // 0: all cores
};

// How a fit went; also recorded in the hierarchy's metadata.
struct HppcaFitStats {
  int32_t kmeans_iterations = 0;   // assignment rounds run
  bool kmeans_converged = false;   // the last round moved no class
  int32_t reseeded_superclasses = 0;
  int32_t dropped_superclasses = 0;  // raw-data clustering only
  int32_t reduced_rank_classes = 0;  // classes with q_c < q
  double kmeans_objective = 0.0;     // sum_k KL(class k || its super-class); 0 if raw/flat
  double class_seconds = 0, cluster_seconds = 0, total_seconds = 0;
  double seed_seconds = 0;  // k-means++ seeding, part of cluster_seconds
};

struct HppcaPredictOptions {
  // Super-classes opened per row; 0: the model's default scoring
  // (HppcaModel::default_flat(): every class, or default_top_t super-
  // classes). Clamped to the number of super-classes (T = S scores every
  // class, like flat).
  int32_t top_t = 0;
  int32_t top_k = 1;   // classes returned per row, >= 1; clamped to K
  bool flat = false;   // score every class (always so for a flat model)
  // Rows scored together. 0: automatic -- 1024 when flat; hierarchical
  // blocks hold about 64 rows per super-class opening (64 S / T, within
  // [512, 8192]) so that each per-super-class GEMM has enough rows.
  int32_t block_rows = 0;
  int num_threads = 0;       // 0: all cores
  // Hierarchical prediction of a few rows (at most kHppcaScreenMaxRows) first
  // scores each row against binary16 copies of the bases, with a bound on
  // how far each such score can be from its float32 value, and scores in
  // float32 only the models that bound leaves in contention: the answer is
  // that of float32 scoring, for about half the memory traffic. Off: every
  // model in float32. Ignored where the CPU lacks F16C.
  bool screen_in_half = true;
};

// Calls of at most this many rows are screened (above); larger ones are
// scored by batched float32 GEMMs, which share every basis read among
// enough rows to be limited by arithmetic instead of memory.
inline constexpr int64_t kHppcaScreenMaxRows = 64;

struct HppcaPrediction {
  int64_t rows = 0;
  int32_t top_k = 0;   // effective
  int32_t top_t = 0;   // effective; 0 when flat
  std::vector<int32_t> classes;    // rows x top_k class indices, best first
  std::vector<int64_t> labels;     // rows x top_k original labels
  std::vector<float> scores;       // rows x top_k scores (smaller is better)
  std::vector<int32_t> superclasses;       // rows x top_t, best first
  std::vector<int32_t> classes_evaluated;  // rows: class models scored
  // Paper eq. 12 over the batch: K / (S + mean classes evaluated); 1 if flat.
  double OperationSpeedup(int64_t num_classes, int32_t num_superclasses) const;
};

class HppcaModel {
 public:
  HppcaModel(HppcaModel&&) noexcept;
  HppcaModel& operator=(HppcaModel&&) noexcept;
  ~HppcaModel();

  int64_t dim() const;
  int32_t num_classes() const;
  int32_t num_superclasses() const;  // 0 for a flat classifier
  const HppcaOptions& options() const;  // as trained (superclasses: as requested)
  const HppcaFitStats& fit_stats() const;
  // Whether a request naming neither flat nor T scores every class: always
  // for a flat model; else as options().scoring says, kAuto resolved by
  // predict_cost() (flat unless the hierarchy costs less than
  // kHppcaHierarchyShare of it).
  bool default_flat() const;
  // Whether hierarchical calls of at most kHppcaScreenMaxRows rows are
  // screened in binary16 (HppcaPredictOptions::screen_in_half; the CPU has
  // F16C). The rows of such a call share the super-class products.
  bool screens_rows() const;
  // The cost model at default_top_t, E from this model's super-class sizes:
  // a row of class c opens its own super-class and T - 1 others of the mean
  // size of the rest, weighted by the classes' training counts.
  HppcaPredictCost predict_cost() const;
  // The refined (binary) tree and the two-level tree it refines (see above).
  const Hierarchy& hierarchy() const;
  const Hierarchy& coarse_hierarchy() const;
  // Names the classes: names[k] names class k (labels()[k]), the leaves of
  // both trees; by default a class is named by its label's digits. Exactly
  // num_classes() names, each as CheckLeafNames requires (else
  // InvalidArgument). Kept by Save/Load and carried over by AddClasses for
  // the classes the base model has.
  absl::Status SetClassNames(std::vector<std::string> names);
  // The refined hierarchy's free-form metadata (kept by Save/Load; the
  // coarse tree has a copy taken when the model was built or loaded).
  std::map<std::string, std::string>& mutable_metadata();

  // Class k in [0, K): original label, training count, components kept (q_c),
  // mean (d), basis (q x d rows, rows >= q_c are zero) and eigenvalues (q,
  // zero beyond q_c), and its super-class (-1 when flat).
  absl::Span<const int64_t> labels() const;
  int64_t class_count(int32_t k) const;
  int32_t class_rank(int32_t k) const;
  Eigen::Map<const Eigen::VectorXd> class_mean(int32_t k) const;
  Eigen::Map<const RowMatrixF> class_basis(int32_t k) const;
  Eigen::Map<const Eigen::VectorXd> class_eigvals(int32_t k) const;
  int32_t superclass_of(int32_t k) const;
  // The class's PPCA Gaussian (excess = eigenvalues, noise = lambda): what
  // prediction scores.
  GaussianRef class_gaussian(int32_t k) const;
  // The Gaussian super-class clustering uses for the class: the maximum-
  // likelihood PPCA approximation of its full sample covariance (eigenvalues
  // D along the basis, noise = max(class_tail, lambda) elsewhere).
  GaussianRef class_cluster_gaussian(int32_t k) const;
  // Mean of the d - q_c eigenvalues of the sample covariance not kept.
  double class_tail(int32_t k) const;

  // Super-class s in [0, S): member classes (ascending), Theorem 2 centroid
  // (top-r eigenpairs of its covariance), and the node for it -- the node
  // whose leaves are exactly its members -- in hierarchy() and in
  // coarse_hierarchy() (-1 for a one-class super-class, which has no node of
  // its own).
  absl::Span<const int32_t> superclass_members(int32_t s) const;
  const Centroid& superclass_centroid(int32_t s) const;
  int32_t superclass_node(int32_t s) const;
  int32_t superclass_coarse_node(int32_t s) const;

  // Class index of a label, or -1.
  int32_t ClassOfLabel(int64_t label) const;

  // Top-k classes of each row (rows.cols() must be dim(); every value
  // finite), hierarchical (Algorithm 1) unless flat.
  absl::StatusOr<HppcaPrediction> Predict(const MatrixView& rows,
                                          const HppcaPredictOptions& options) const;
  // Every class's score for every row: rows x K, column k = class k.
  absl::StatusOr<RowMatrixD> ScoreClasses(const MatrixView& rows) const;
  // Every super-class's score: rows x S.
  absl::StatusOr<RowMatrixD> ScoreSuperclasses(const MatrixView& rows) const;

  // Bytes of model parameters held in memory (means, bases, eigenvalues,
  // super-class models, prediction caches).
  int64_t MemoryBytes() const;

  // A model artifact (core/io/model_artifact.h) in the existing directory
  // `dir`, each file written atomically, hppca.json last; all .npy
  // little-endian, C order:
  //   hppca.json           manifest: format "dendro.hppca", version 1, dim,
  //                        classes, superclasses, q, r, options, stats
  //   labels.npy           K int64        class_counts.npy  K int64
  //   class_rank.npy       K int32        superclass_of.npy K int32 (flat: -1)
  //   class_means.npy      K x d float64  class_eigvals.npy K x q float64
  //   class_tail.npy       K float64
  //   class_bases.npy      K*q x d float32 (class k: rows k*q .. k*q+q-1)
  //   super_means.npy      S x d float64  super_eigvals.npy S x r float64
  //   super_bases.npy      S*r x d float32  super_stats.npy S x 3 float64
  //                        (tail, noise_mean, trace)
  //   tree.json            hierarchy() (informational; Load rebuilds both
  //                        trees and keeps only its metadata)
  //   point_leaf.npy       N int32 (if present)
  // Load's errors about damaged files are DataLoss (NotFound when hppca.json
  // or a required array is missing). Save/Load live in model_io.cc, which
  // needs dendro_io.
  absl::Status Save(const std::string& dir) const;
  static absl::StatusOr<HppcaModel> Load(const std::string& dir);

 private:
  struct Impl;
  explicit HppcaModel(std::unique_ptr<Impl> impl);
  friend class HppcaBuilder;
  std::unique_ptr<Impl> impl_;
};

// Checks the option ranges against d feature columns (what FitHppca checks
// before reading any data).
absl::Status ValidateHppcaOptions(const HppcaOptions& options, int64_t d);

// Validates the input (N >= 1, labels.size() == N, finite values, >= 2
// classes, every class >= 2 points, option ranges) and trains.
absl::StatusOr<HppcaModel> FitHppca(const MatrixView& x, absl::Span<const int64_t> labels,
                                    const HppcaOptions& options, RunContext& ctx);

struct HppcaAddOptions {
  // Re-run super-class k-means over all classes (old and new) with the base
  // model's options; otherwise each new class joins the super-class whose
  // PPCA Gaussian is nearest in KL (all new classes are placed against the
  // base model's super-classes), and the centroid and PPCA model of every
  // super-class that gained classes are recomputed from all its members by
  // Theorem 2. Raw-data models recluster over the class Gaussians (the base
  // training rows are not kept).
  bool recluster = false;
  int num_threads = 0;
};

// Adds the classes of (x, labels) to `base`: only the new classes' PPCA
// models are fitted (with base's q and lambda). Labels that `base` already
// has are InvalidArgument (naming the label); so are a wrong column count
// and the FitHppca input errors. A flat base stays flat. The result's
// point_leaf is base's (re-indexed) followed by the new rows'.
absl::StatusOr<HppcaModel> AddClasses(const HppcaModel& base, const MatrixView& x,
                                      absl::Span<const int64_t> labels,
                                      const HppcaAddOptions& options, RunContext& ctx);

}  // namespace dendro

#endif  // DENDRO_CORE_HPPCA_HPPCA_H_
