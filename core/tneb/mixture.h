// Student-t mixtures with full scale matrices: the density model of t-NEB
// (Ritzert et al., "Hierarchical clustering with maximum density paths and
// mixture models", section 3 step 1 and appendix D).
//
// Component k has weight w_k, location mu_k, scale matrix Sigma_k (d x d,
// symmetric positive definite) and nu_k degrees of freedom:
//
//   log f_k(x) = lgamma((nu+d)/2) - lgamma(nu/2) - d/2 log(nu pi)
//                - 1/2 log|Sigma_k| - (nu+d)/2 log(1 + delta/nu),
//   delta = (x - mu_k)^T Sigma_k^{-1} (x - mu_k)   (squared Mahalanobis),
//
// and nu_k = +infinity denotes a Gaussian component
// (log f_k = -d/2 log(2 pi) - 1/2 log|Sigma_k| - delta/2): the g-NEB variant.
// The mixture density is p(x) = sum_k w_k f_k(x); everything is evaluated in
// log space (Cholesky factors, log-determinants, log-sum-exp), so nothing
// underflows far from the data.
//
// Fitting (FitStudentMixture) is EM (ECM when the degrees of freedom are
// learned), following the authors' package (studenttmixture):
//   * init: per restart, the best of 3 k-means runs (k-means++ seeding,
//     Lloyd iterations) gives the locations; every scale matrix starts as
//     the data covariance + ridge I; equal weights;
//   * E-step: responsibilities r_ik by log-sum-exp, latent scale weights
//     u_ik = (nu_k + d) / (nu_k + delta_ik) (u = 1 for Gaussians);
//   * M-step: w_k = mean_i r_ik; mu_k = sum r u x / sum r u;
//     Sigma_k = sum r u (x - mu_k)(x - mu_k)^T / sum r u + ridge I. Dividing
//     by sum r u rather than sum r is the parameter-expanded EM step of Kent,
//     Tyler & Vardi / Liu, Rubin & Wu (the authors' package does the same);
//     with ridge = 0 and fixed nu it never decreases the likelihood;
//   * learned nu_k: the standard ECM equation (Peel & McLachlan 2000),
//       1 - psi(nu/2) + log(nu/2) + sum_i r_ik (log u_ik - u_ik) / sum_i r_ik
//         + psi((nu_old + d)/2) - log((nu_old + d)/2) = 0,
//     solved by bisection and clamped to [1, 1000] (the package clamps at 1;
//     no root means nu -> infinity, i.e. the clamp);
//   * convergence: |change of the mean log-likelihood| < tolerance; at most
//     max_iterations M-steps per restart;
//   * restarts: each seeded deterministically from (seed, restart index),
//     run in parallel; the kept model is the restart with the best mean
//     log-likelihood (or MixtureOptions::restart_score) among those that
//     converged (among all restarts when none converged;
//     MixtureFit::converged then says so);
//   * a scale matrix that is not positive definite after the ridge (e.g. a
//     component that collapsed onto one point when the ridge is 0) gets more
//     ridge, x10 per step up to 1e8 x (starting from 1e-12 x the mean data
//     variance when the ridge is 0); if that fails too, the restart is
//     dropped as failed. A component that loses all responsibility gets
//     weight 0 and keeps its last location and scale.
// Every iteration is one pass of blocked dense linear algebra over the data
// (triangular products for the Mahalanobis distances, a symmetric rank-k
// update per component for the scale matrices); the data are read in row
// blocks, never copied whole.
#ifndef DENDRO_CORE_TNEB_MIXTURE_H_
#define DENDRO_CORE_TNEB_MIXTURE_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "Eigen/Core"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/common/run_context.h"
#include "core/matrix/matrix.h"

namespace dendro {

// Per-feature affine map applied to every input row before modelling:
// z_j = (x_j - center_j) / scale_j. Empty vectors mean the identity.
struct FeatureTransform {
  std::vector<double> center;
  std::vector<double> scale;
  bool identity() const { return center.empty(); }
};

// Per-column mean and population standard deviation (numpy's std, ddof 0) of
// x. InvalidArgument naming the column if a column is constant.
absl::StatusOr<FeatureTransform> StandardizationOf(const MatrixView& x);

// rows [begin, begin + out->rows()) of x as double, transformed by t, into
// the column-major `out` (which must already have x.cols() columns).
void LoadRows(const MatrixView& x, const FeatureTransform& t, int64_t begin, Eigen::MatrixXd* out);

class StudentMixture {
 public:
  // Validates (equal sizes, weights >= 0 summing to 1 within 1e-6, finite
  // means, symmetric positive definite scales, dof > 0 or +infinity) and
  // precomputes Cholesky factors, their inverses, precision matrices and
  // log-determinants.
  static absl::StatusOr<StudentMixture> Create(std::vector<double> weights, RowMatrixD means,
                                               std::vector<Eigen::MatrixXd> scales,
                                               std::vector<double> dof);

  int dim() const { return static_cast<int>(means_.cols()); }
  int num_components() const { return static_cast<int>(means_.rows()); }
  const std::vector<double>& weights() const { return weights_; }
  const RowMatrixD& means() const { return means_; }  // one row per component
  const Eigen::MatrixXd& scale(int k) const { return scales_[k]; }
  double log_det(int k) const { return log_det_[k]; }  // log |Sigma_k|
  const std::vector<double>& dof() const { return dof_; }

  // out(i, k) = log w_k + log f_k(x_i) for the rows of `points` (any
  // number of rows, dim() columns). Components with weight 0 give -inf.
  void ComponentLogProb(const Eigen::Ref<const Eigen::MatrixXd>& points,
                        Eigen::MatrixXd* out) const;
  // log p(x_i) for each row.
  Eigen::VectorXd LogDensity(const Eigen::Ref<const Eigen::MatrixXd>& points,
                             int num_threads = 1) const;
  // log p(x_i) and d log p / dx at each row (grad has the shape of points).
  // Rows are processed in blocks on up to num_threads threads (0 = all).
  void LogDensityAndGradient(const Eigen::Ref<const Eigen::MatrixXd>& points,
                             Eigen::VectorXd* log_p, Eigen::MatrixXd* grad,
                             int num_threads = 0) const;
  // Most likely component (argmax_k log w_k f_k, ties to the lower k) of
  // every row of x after transform t; x.cols() must equal dim().
  std::vector<int32_t> Assign(const MatrixView& x, const FeatureTransform& t,
                              int num_threads = 0) const;

  // The listed components (in that order), weights renormalised to sum 1.
  absl::StatusOr<StudentMixture> Subset(absl::Span<const int32_t> keep) const;
  // Largest / smallest eigenvalue of each scale matrix.
  std::vector<double> Elongations() const;

 private:
  StudentMixture() = default;

  std::vector<double> weights_;
  RowMatrixD means_;
  Eigen::MatrixXd mu_t_;  // means_ transposed (d x m)
  std::vector<Eigen::MatrixXd> scales_;
  std::vector<double> dof_;
  std::vector<double> log_det_;
  // Per component: log w_k + the normalising constant of log f_k.
  std::vector<double> log_coef_;
  // U_k = L_k^{-T} (upper triangular), Sigma_k = L_k L_k^T, so that
  // delta = |(x - mu)^T U_k|^2 row-wise.
  std::vector<Eigen::MatrixXd> inv_chol_t_;
  std::vector<Eigen::MatrixXd> precision_;  // Sigma_k^{-1}
};

struct MixtureOptions {
  int32_t components = 25;  // m
  double dof = 1.0;         // nu (start value when learned)
  bool learn_dof = false;   // ECM update of nu per component
  bool gaussian = false;    // nu = infinity (g-NEB); dof/learn_dof ignored
  double ridge = 1e-4;      // added to each scale matrix's diagonal
  int32_t restarts = 20;
  int32_t max_iterations = 100;  // M-steps per restart
  double tolerance = 0.01;       // on the change of the mean log-likelihood
  uint64_t seed = 0;
  int num_threads = 0;  // 0: all cores
  // Beyond the authors' package (t-NEB sets init_min_rows above
  // kTnebAuthorsStartMaxDimension, scale_prior_rows only when asked; 0 keeps
  // the package's behaviour exactly):
  // init_min_rows: after each k-means run, a centre that owns fewer than
  // this many rows (k-means++ puts centres on single far rows in high
  // dimensions) is re-drawn at a uniformly drawn row and Lloyd runs again,
  // up to kInitRedraws rounds; clamped to n / m.
  int32_t init_min_rows = 0;
  // scale_prior_rows = p > 0: a conjugate (inverse-Wishart style) prior on
  // every scale matrix, worth p pseudo-rows at the data-scale matrix
  // S0 = data covariance / m^(2/d) (Fraley & Raftery's default scale for
  // a MAP Gaussian mixture). The M-step becomes
  //   Sigma_k = (sum r u D D^T + p S0) / (sum r u + p) + ridge I,
  // so a component holding a few rows stays near the data's scale instead
  // of shrinking onto them (only the ridge would stop it otherwise).
  double scale_prior_rows = 0.0;
  // Ranks the restarts in place of their mean log-likelihood when set
  // (higher is better). Called after all restarts ran, on the calling
  // thread, once per restart that did not fail, with its mixture; a non-OK
  // status ends the fit with that status. t-NEB ranks by the log-likelihood
  // of the components its filter keeps.
  std::function<absl::StatusOr<double>(const StudentMixture&)> restart_score;
  // A warm start: when set, every restart starts from this mixture (its
  // locations, weights, scale matrices and degrees of freedom; a scale that
  // is not positive definite after the ridge escalation fails the restart)
  // instead of k-means, so one restart suffices. It must have `components`
  // components of the data's dimension (InvalidArgument otherwise); its
  // degrees of freedom replace `dof` (learn_dof still applies). Not owned.
  const StudentMixture* start = nullptr;
};

struct MixtureFit {
  StudentMixture mixture;
  double log_likelihood = 0.0;  // mean log p(x_i) of the kept restart
  int32_t best_restart = -1;
  int32_t iterations = 0;  // M-steps of the kept restart
  bool converged = false;  // whether the kept restart converged
  int32_t converged_restarts = 0;
  int32_t failed_restarts = 0;   // numerically failed (see above)
  int64_t total_iterations = 0;  // M-steps over all restarts
  // Mean log-likelihood after each E-step of the kept restart; the last
  // entry is log_likelihood.
  std::vector<double> trace;
  // Per restart: final mean log-likelihood (NaN when failed), iterations,
  // convergence.
  std::vector<double> restart_log_likelihood;
  // Per restart: restart_score's value (NaN when failed); empty without it.
  std::vector<double> restart_score;
  std::vector<int32_t> restart_iterations;
  std::vector<bool> restart_converged;
};

// Fits an m-component mixture to the rows of x (after transform t). Checks
// the options and that x has at least m rows, but not finiteness (callers
// validate). Reports progress per restart; CancelledError when ctx is
// cancelled (checked between iterations and between row blocks).
// Bit-identical results for the same inputs, options and seed when
// restarts >= 2 or num_threads == 1 (a single restart spreads its row
// blocks over threads, which changes the summation order).
absl::StatusOr<MixtureFit> FitStudentMixture(const MatrixView& x, const FeatureTransform& t,
                                             const MixtureOptions& options, RunContext& ctx);

// Digamma function psi(x) for x > 0 (exposed for testing).
double Digamma(double x);

}  // namespace dendro

#endif  // DENDRO_CORE_TNEB_MIXTURE_H_
