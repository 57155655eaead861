// Internals of the hppca module shared by its .cc files. Not a public API.
#ifndef DENDRO_CORE_HPPCA_INTERNAL_H_
#define DENDRO_CORE_HPPCA_INTERNAL_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "core/common/run_context.h"
#include "core/hierarchy/hierarchy.h"
#include "core/hppca/gaussian.h"
#include "core/hppca/hppca.h"
#include "core/matrix/matrix.h"

namespace dendro::hppca_internal {

// Reports progress of one stage as a sub-range [lo, hi] of the job, never
// decreasing. Report() may be called from OpenMP thread 0 only.
class Progress {
 public:
  Progress(RunContext& ctx, double lo, double hi, std::string stage)
      : ctx_(ctx), lo_(lo), hi_(hi), stage_(std::move(stage)) {}
  void Report(double fraction_of_stage);
  RunContext& ctx() { return ctx_; }
  Progress Sub(double lo_frac, double hi_frac, std::string stage) const {
    return Progress(ctx_, lo_ + (hi_ - lo_) * lo_frac, lo_ + (hi_ - lo_) * hi_frac,
                    std::move(stage));
  }

 private:
  RunContext& ctx_;
  double lo_, hi_;
  std::string stage_;
  double last_ = -1.0;
};

// ctx->Cancelled() (false for a null ctx), callable from any thread: calls
// are serialised, so a RunContext is never polled by two threads at once.
// A thread that finds another one polling returns false without waiting.
bool PollCancelled(RunContext* ctx);

// Runs f(i) for i in [0, n) on `threads` OpenMP threads (dynamic schedule).
// Every thread polls ctx (if given, through PollCancelled) before each of
// its items, so a long item on one thread does not keep the others from
// seeing a cancel; once cancelled the remaining items are skipped and
// CancelledError is returned. `on_item` (if given) is called by thread 0
// with the number of finished items.
absl::Status ParallelFor(int64_t n, int threads, RunContext* ctx,
                         const std::function<void(int64_t)>& f,
                         const std::function<void(int64_t)>& on_item = nullptr);

// Per-class PPCA models in class (sorted label) order, as fitted from data.
struct ClassTable {
  int64_t d = 0;
  int32_t q = 0;
  std::vector<int64_t> labels;   // K, ascending
  std::vector<int64_t> counts;   // K
  std::vector<int32_t> rank;     // K, q_c
  RowMatrixD means;              // K x d
  RowMatrixD eigvals;            // K x q (0 beyond q_c)
  RowMatrixF bases;              // K*q x d (zero rows beyond q_c)
  // Mean of the d - q_c discarded eigenvalues of each class's sample
  // covariance (0 when q_c = d).
  std::vector<double> tail;      // K
  // Derived by ComputeClusterExcess: the clustering Gaussian of class k is
  // the maximum-likelihood PPCA approximation of its full sample covariance,
  // noise = max(tail, lambda), excess = max(D - noise, 0).
  RowMatrixD cluster_excess;     // K x q
  double lambda = 0.0;           // set by ComputeClusterExcess

  int32_t size() const { return static_cast<int32_t>(labels.size()); }
  void ComputeClusterExcess(double lambda_in) {
    lambda = lambda_in;
    cluster_excess.resize(size(), q);
    for (int32_t k = 0; k < size(); ++k) {
      const double noise = ClusterNoise(k);
      for (int32_t j = 0; j < q; ++j) cluster_excess(k, j) = std::max(eigvals(k, j) - noise, 0.0);
    }
  }
  double ClusterNoise(int32_t k) const { return std::max(tail[k], lambda); }
  // The clustering Gaussian of class k; `bases` must still be in class order.
  GaussianRef cluster_gaussian(int32_t k) const {
    return GaussianRef(means.data() + k * d, bases.data() + static_cast<int64_t>(k) * q * d,
                       cluster_excess.data() + static_cast<int64_t>(k) * q, d, q,
                       ClusterNoise(k));
  }
};

struct ClassFitResult {
  ClassTable table;
  std::vector<int32_t> point_class;  // N
  // Raw-data clustering samples (only when requested).
  RowMatrixF samples;
  std::vector<int32_t> sample_class;
  int32_t reduced_rank_classes = 0;
};

// One pass over the data: groups rows by label, fits each class's mean,
// covariance eigenpairs (top q) in parallel. Validates everything the public
// API promises (labels length, finite values, >= 1 row, >= 2 points per
// class). `raw_samples` > 0 also draws that many rows per class.
absl::StatusOr<ClassFitResult> FitClasses(const MatrixView& x, absl::Span<const int64_t> labels,
                                          int32_t q, int32_t raw_samples, uint64_t seed,
                                          int threads, Progress progress);

struct KMeansResult {
  std::vector<int32_t> assignment;  // K, in [0, S)
  std::vector<Centroid> centroids;  // S
  int32_t iterations = 0;
  bool converged = false;
  int32_t reseeded = 0;
  int32_t dropped = 0;
  double objective = 0.0;  // sum over classes of KL(class || its centroid)
  double seed_seconds = 0.0;
};

// k-means++ seeds by Bhattacharyya distance (Algorithm 3): S distinct class
// indices, the first uniform, then each with probability proportional to
// its distance to the nearest chosen seed.
//
// `sample` in [S, K) runs the seeding on a uniform random sample of that
// many classes (-1 or >= K: all of them; values below S are raised to S).
// The sample is drawn from the same generator as the seeding, so the seeds
// are a function of `seed` alone. Training does not sample (see
// docs/methods.md: at K = 10,000 a sample of 800 lost 0.007 super-class
// accuracy at T = 5).
absl::StatusOr<std::vector<int32_t>> BhattacharyyaSeeds(absl::Span<const GaussianRef> classes,
                                                        int32_t s, uint64_t seed, int threads,
                                                        RunContext* ctx, int64_t sample = -1);

// How AssignByKl computes the cross term F(P, Q) of the surviving pairs (see
// kmeans.cc): per pair from the bases' products (q r d each), or for all
// pairs at once as Frobenius products of d x d matrices (d^2 / 2 each plus
// q d^2 / 2 per class), which is cheaper when q r is large against d / 2.
// kAuto picks the one with fewer operations.
enum class KlCrossTerm { kAuto, kBasisProducts, kGramProducts };

// The index of the KL-nearest Gaussian (argmin_s KL(class_i || centroid_s),
// ties to the lower s) for every class; exact, with cheap bounds pruning.
// `kl` (optional) receives the winning divergences.
//
// `cache` (optional) carries exact divergences between calls with the same
// classes and the same number of centroids: values(i, j) = KL(class i ||
// centroid j) for every column j with valid[j] set. Only the other columns
// are computed (all of their pairs, unpruned) and stored, and their valid
// flags set; the caller clears valid[j] whenever centroid j changes. A cache
// of the wrong shape is reset. The result is still the exact argmin.
struct KlCache {
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> values;  // K x S
  std::vector<char> valid;                                                         // S
};
absl::StatusOr<std::vector<int32_t>> AssignByKl(absl::Span<const GaussianRef> classes,
                                                absl::Span<const LowRankGaussian> centroids,
                                                int threads, RunContext* ctx,
                                                std::vector<double>* kl = nullptr,
                                                KlCrossTerm cross = KlCrossTerm::kAuto,
                                                KlCache* cache = nullptr);

// Theorem 2 centroids (rank r) of the classes assigned to each of s groups.
absl::StatusOr<std::vector<Centroid>> GroupCentroids(absl::Span<const GaussianRef> classes,
                                                     absl::Span<const int32_t> assignment,
                                                     int32_t s, int32_t r, int threads,
                                                     RunContext* ctx);

// Each class reduced to its top `rank` directions (0, or rank >= its own:
// unchanged): the excess variance of the directions it drops is spread
// evenly over all d directions (added to the noise), so the total variance
// stays. Views of the classes' own memory; needs each class's excess in
// descending order (as fitted).
std::vector<GaussianRef> TopDirections(absl::Span<const GaussianRef> classes, int32_t rank);

// Gaussian k-means (Algorithm 2, steps 2-6), run `restarts` times from
// different seedings; the run with the smallest objective wins. The
// seedings compare the classes on their top `seeding_rank` directions
// (TopDirections; 0: all of them); assignments and centroids use the whole
// class models.
absl::StatusOr<KMeansResult> GaussianKMeans(absl::Span<const GaussianRef> classes, int32_t s,
                                            int32_t r, int32_t max_iterations, int32_t restarts,
                                            int32_t seeding_rank, uint64_t seed, int threads,
                                            Progress progress);

// Raw-data variant (section 5.4): Euclidean k-means on the samples, classes
// to the majority cluster, empty clusters dropped, Theorem 2 centroids.
absl::StatusOr<KMeansResult> RawDataKMeans(absl::Span<const GaussianRef> classes,
                                           const RowMatrixF& samples,
                                           absl::Span<const int32_t> sample_class, int32_t s,
                                           int32_t r, int32_t max_iterations, uint64_t seed,
                                           int threads, Progress progress);

// Scoring tables for a bank of PPCA models (classes in slot order, or
// super-classes). Scores are computed for rows already centred on `center`.
struct ScorerBank {
  int32_t n = 0;        // models
  int32_t k = 0;        // components per model
  int64_t d = 0;
  const float* bases = nullptr;  // n*k x d
  RowMatrixF means;     // n x d, mean - center
  RowMatrixF proj;      // n x k, basis_j . (mean - center)
  RowMatrixF weights;   // n x k, D_j / (D_j + lambda)
  std::vector<double> mean_norm2;  // n
  std::vector<double> offset;      // n: log|Sigma| for kLogDet, else 0
  double inv_lambda = 1.0;
  // For screening calls of a few rows (predict.cc): `bases` in binary16
  // (core/hppca/half.h); per basis row b, e + 2 Gamma(d) (|b| + e) rounded
  // up, where e = |b - float(binary16(b))|: times |x|, a bound on how far
  // x . b from the binary16 copy is from x . b in float32; per model the norm
  // of its centred mean. Empty when !HalfAvailable() or when some basis
  // entry lies beyond binary16's range.
  std::vector<uint16_t> bases_half;  // n*k x d
  RowMatrixF half_slack;             // n x k
  std::vector<float> mean_norm;      // n: |means row|
  bool has_half() const { return !bases_half.empty(); }
  int64_t Bytes() const;
};

}  // namespace dendro::hppca_internal

namespace dendro {

struct HppcaModel::Impl {
  HppcaOptions options;
  HppcaFitStats stats;
  hppca_internal::ClassTable classes;  // class order, bases in class order
  int32_t num_superclasses = 0;
  std::vector<int32_t> super_of;                // K (-1 when flat)
  std::vector<std::vector<int32_t>> members;    // S
  std::vector<Centroid> centroids;              // S
  std::vector<int32_t> super_node;              // S, nodes of `tree`
  std::vector<int32_t> super_coarse_node;       // S, nodes of `coarse_tree`
  std::optional<Hierarchy> tree;         // refined (binary), see hppca.h
  std::optional<Hierarchy> coarse_tree;  // classes -> super-classes -> root

  // Slot order: classes grouped by super-class (super-class s owns slots
  // [slot_begin[s], slot_begin[s + 1])); identity when flat.
  std::vector<int32_t> slot_class, class_slot, slot_begin;
  RowMatrixF slot_bases;  // K*q x d in slot order (the class bases for scoring)
  RowMatrixF super_bases;  // S*r x d
  Eigen::VectorXf center;  // d
  hppca_internal::ScorerBank class_bank, super_bank;
  // A request naming neither flat nor T scores every class (HppcaModel::
  // default_flat); predict_cost is the estimate that chose it under kAuto.
  bool default_flat = true;
  HppcaPredictCost predict_cost;
};

// Assembles a model (slot order, tree, scoring caches) from its parts.
class HppcaBuilder {
 public:
  // `classes.bases` may be released after the call (the model keeps its own
  // slot-ordered copy and drops the class-ordered one). `super_of` empty or
  // all -1 means flat.
  static absl::StatusOr<HppcaModel> Build(HppcaOptions options, HppcaFitStats stats,
                                          hppca_internal::ClassTable classes,
                                          std::vector<int32_t> super_of,
                                          std::vector<Centroid> centroids,
                                          std::vector<int32_t> point_leaf);
  static const HppcaModel::Impl& impl(const HppcaModel& m) { return *m.impl_; }

 private:
  // The steps of Build, in order.
  static absl::Status GroupMembers(int32_t s, std::vector<int32_t>& super_of,
                                   HppcaModel::Impl& impl);
  static void OrderSlots(int32_t k, int32_t s, HppcaModel::Impl& impl);
  static void PermuteBasesToSlots(HppcaModel::Impl& impl, hppca_internal::ClassTable& classes);
  static absl::Status FillScoringCaches(HppcaModel::Impl& impl);
  static void ChooseDefaultScoring(HppcaModel::Impl& impl);
  static absl::Status BuildTrees(HppcaModel::Impl& impl, std::vector<int32_t> point_leaf);
};

}  // namespace dendro

#endif  // DENDRO_CORE_HPPCA_INTERNAL_H_
