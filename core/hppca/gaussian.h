// Gaussians in "low rank plus isotropic noise" form, the representation
// Hierarchical PPCA (Wang & Barbu) uses for class and super-class models:
//
//   Sigma = B^T diag(e) B + noise * I_d,
//
// with B a k x d matrix whose rows are orthonormal directions (or all-zero
// rows, which must then carry e = 0), e >= 0 the *excess* variances along
// them and noise > 0. A class PPCA model (paper eq. 6, Sigma = L D L^T +
// lambda I) is B = L^T, e = D, noise = lambda. Because noise > 0 every
// log-determinant and inverse is finite for any d; all formulas below work
// in the k-dimensional eigenbasis (matrix determinant lemma, Woodbury) and
// never form a d x d matrix, in O(d k^2) per pair.
//
// Bases are float32 (they are the bulk of a model: K x q x d); every sum that
// feeds a distance is accumulated in double. The formulas assume the rows of
// B are orthonormal to float precision (rows with zero excess may be
// anything: they never contribute).
#ifndef DENDRO_CORE_HPPCA_GAUSSIAN_H_
#define DENDRO_CORE_HPPCA_GAUSSIAN_H_

#include <cstdint>
#include <vector>

#include "Eigen/Core"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/matrix/matrix.h"

namespace dendro {

// A read-only view of one Gaussian; the referenced memory must outlive it.
struct GaussianRef {
  GaussianRef(const double* mean, const float* basis, const double* excess, int64_t dim,
              int32_t rank, double noise)
      : mean(mean, dim), basis(basis, rank, dim), excess(excess, rank), noise(noise) {}
  int64_t dim() const { return mean.size(); }
  int32_t rank() const { return static_cast<int32_t>(excess.size()); }

  Eigen::Map<const Eigen::VectorXd> mean;  // d
  Eigen::Map<const RowMatrixF> basis;      // rank x d, orthonormal rows (or zero)
  Eigen::Map<const Eigen::VectorXd> excess;  // rank, >= 0
  double noise;                             // > 0
};

// An owning Gaussian in the same form.
struct LowRankGaussian {
  Eigen::VectorXd mean;
  RowMatrixF basis;       // rank x d
  Eigen::VectorXd excess;  // rank
  double noise = 1.0;
  GaussianRef ref() const {
    return GaussianRef(mean.data(), basis.data(), excess.data(), mean.size(),
                       static_cast<int32_t>(excess.size()), noise);
  }
};

// log |Sigma| = sum_j log(e_j + noise) + (d - k) log(noise).
double LogDet(const GaussianRef& g);
// tr(Sigma^{-1}) = sum_j 1 / (e_j + noise) + (d - k) / noise.
double TraceInverse(const GaussianRef& g);

// KL(P || Q) between N(p.mean, Sigma_p) and N(q.mean, Sigma_q), paper eq. 15:
//   1/2 [log|Sigma_q| / |Sigma_p| - d + tr(Sigma_q^{-1} Sigma_p)
//        + (mu_p - mu_q)^T Sigma_q^{-1} (mu_p - mu_q)].
// Dimensions must agree (checked only in debug builds).
double KlDivergence(const GaussianRef& p, const GaussianRef& q);

// Bhattacharyya distance, paper eq. 14:
//   1/8 dmu^T Sigma^{-1} dmu + 1/2 ln(|Sigma| / sqrt(|Sigma_a| |Sigma_b|)),
//   Sigma = (Sigma_a + Sigma_b) / 2.
// Computed through the (k_a + k_b)-square capacitance matrix (Woodbury /
// determinant lemma), reduced by its Schur complement.
double BhattacharyyaDistance(const GaussianRef& a, const GaussianRef& b);
// The same with the ka x kb cross Gram a.basis * b.basis^T given (batched
// callers compute many of them in one GEMM).
double BhattacharyyaWithCross(const GaussianRef& a, const GaussianRef& b,
                              const Eigen::Ref<const Eigen::MatrixXf>& cross);
// ... and also the projections a.basis (mu_a - mu_b), b.basis (mu_a - mu_b)
// and |mu_a - mu_b|^2.
double BhattacharyyaFromParts(const GaussianRef& a, const GaussianRef& b,
                              const Eigen::Ref<const Eigen::MatrixXf>& cross,
                              const Eigen::Ref<const Eigen::VectorXd>& proj_a,
                              const Eigen::Ref<const Eigen::VectorXd>& proj_b, double dist2);

// A cheap lower bound on BhattacharyyaDistance(a, b) from the means and the
// largest excess variances only (used to prune k-means++ seeding):
//   |dmu|^2 / (8 (max_j e_a,j / 2 + max_j e_b,j / 2 + (noise_a + noise_b) / 2)).
double BhattacharyyaLowerBound(const GaussianRef& a, const GaussianRef& b);

// The Theorem 2 centroid of a set of Gaussians (paper eqs. 17, 18): the
// Gaussian N(mu, Sigma) minimising sum_i KL(N_i || N(mu, Sigma)),
//   mu = mean of the mu_i,
//   Sigma = mean of [Sigma_i + (mu_i - mu)(mu_i - mu)^T].
// Sigma is full rank in general; it is kept as its top-`rank` eigenpairs plus
// the mean of the remaining d - rank eigenvalues (`tail`). With rank = d the
// representation is exact.
struct Centroid {
  Eigen::VectorXd mean;     // d
  RowMatrixF eigvecs;       // rank x d, top eigenvectors of Sigma (zero rows
                            // where Sigma has no variance beyond noise_mean)
  Eigen::VectorXd eigvals;  // rank, eigenvalues of Sigma, descending
  double tail = 0.0;        // mean of the other d - rank eigenvalues of Sigma
                            // (noise_mean when rank == d)
  double noise_mean = 0.0;  // mean of the members' noise variances
  double trace = 0.0;       // tr(Sigma)
};
// `members` must be non-empty and share one dimension d; 0 <= rank <= d.
absl::StatusOr<Centroid> TheoremTwoCentroid(absl::Span<const GaussianRef> members,
                                            int32_t rank);

// The sums over a set of Gaussians from which its Theorem 2 centroid
// follows, kept up to date as members join and leave: a change costs one
// d x (k+1) by (k+1) x d product for the member's rank k, where recomputing
// the centroid costs one per member. About a fixed origin o:
//   n, sum of noise_i, s1 = sum (mu_i - o),
//   S2 = sum [B_i^T diag(e_i) B_i + (mu_i - o)(mu_i - o)^T]   (d x d),
// so that mu = o + s1 / n and Sigma - noise_mean I = S2 / n - (s1 / n)(s1 / n)^T.
// The origin only affects rounding: take one near the members (for example
// the mean of all the Gaussians that will ever be members).
//
// Invariant: the sums are those of the multiset of Gaussians added and not
// removed since construction (removing a Gaussian that was not added is the
// caller's error and is not detected). Results equal TheoremTwoCentroid's up
// to rounding; they depend on the order of the changes only through it.
class CentroidMoments {
 public:
  explicit CentroidMoments(Eigen::VectorXd origin);

  // Adds or removes every Gaussian of `members`; all must have the origin's
  // dimension.
  void Add(absl::Span<const GaussianRef> members) { Update(members, /*add=*/true); }
  void Remove(absl::Span<const GaussianRef> members) { Update(members, /*add=*/false); }
  int64_t count() const { return count_; }

  // The centroid of the current members; `count()` must be >= 1 and
  // 0 <= rank <= d.
  absl::StatusOr<Centroid> ToCentroid(int32_t rank) const;

 private:
  void Update(absl::Span<const GaussianRef> members, bool add);

  Eigen::VectorXd origin_;
  int64_t count_ = 0;
  double noise_sum_ = 0.0;
  Eigen::VectorXd s1_;
  Eigen::MatrixXd s2_;  // symmetric: only the lower triangle (diagonal included) is kept
};

// The probabilistic-PCA Gaussian closest to the centroid in the maximum-
// likelihood sense (Tipping & Bishop): the same top eigenvectors, noise =
// `tail` (the mean discarded eigenvalue) and excess = eigvals - tail. Exact
// when rank == d. This is the super-class Gaussian KL assignment uses.
LowRankGaussian CentroidGaussian(const Centroid& c);

// Dense d x d covariance, for tests and small-d references.
Eigen::MatrixXd DenseCovariance(const GaussianRef& g);

}  // namespace dendro

#endif  // DENDRO_CORE_HPPCA_GAUSSIAN_H_
