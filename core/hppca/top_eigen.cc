#include "core/hppca/top_eigen.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "Eigen/Eigenvalues"

namespace dendro {
namespace {

// LU factorisation with partial pivoting of the tridiagonal matrix
// T - shift I (T: diagonal `diag`, off-diagonal `off`), as LAPACK's dgttrf,
// and solves with it (dgtts2). Pivots smaller than `tiny` are raised to it
// in magnitude: T - shift I is nearly singular by construction here, and
// only the direction of the solution matters.
class ShiftedTridiagonalLu {
 public:
  ShiftedTridiagonalLu(const Eigen::VectorXd& diag, const Eigen::VectorXd& off, double shift,
                       double tiny)
      : n_(diag.size()), d_(diag.array() - shift), dl_(off), du_(off),
        du2_(Eigen::VectorXd::Zero(std::max<int64_t>(n_ - 2, 0))), ipiv_(n_) {
    for (int64_t i = 0; i < n_; ++i) ipiv_[i] = i;
    for (int64_t i = 0; i + 1 < n_; ++i) {
      if (std::fabs(d_[i]) >= std::fabs(dl_[i])) {
        // No interchange: eliminate the subdiagonal entry.
        if (d_[i] != 0.0) {
          const double fact = dl_[i] / d_[i];
          dl_[i] = fact;
          d_[i + 1] -= fact * du_[i];
        }
      } else {
        // Interchange rows i and i + 1.
        const double fact = d_[i] / dl_[i];
        d_[i] = dl_[i];
        dl_[i] = fact;
        const double temp = du_[i];
        du_[i] = d_[i + 1];
        d_[i + 1] = temp - fact * d_[i + 1];
        if (i + 2 < n_) {
          du2_[i] = du_[i + 1];
          du_[i + 1] = -fact * du_[i + 1];
        }
        ipiv_[i] = i + 1;
      }
    }
    for (int64_t i = 0; i < n_; ++i) {
      if (std::fabs(d_[i]) < tiny) d_[i] = d_[i] < 0.0 ? -tiny : tiny;
    }
  }

  // b <- (T - shift I)^{-1} b.
  void Solve(Eigen::VectorXd* b_in) const {
    Eigen::VectorXd& b = *b_in;
    for (int64_t i = 0; i + 1 < n_; ++i) {
      const int64_t ip = ipiv_[i];
      const double temp = b[2 * i + 1 - ip] - dl_[i] * b[ip];
      b[i] = b[ip];
      b[i + 1] = temp;
    }
    b[n_ - 1] /= d_[n_ - 1];
    if (n_ > 1) b[n_ - 2] = (b[n_ - 2] - du_[n_ - 2] * b[n_ - 1]) / d_[n_ - 2];
    for (int64_t i = n_ - 3; i >= 0; --i) {
      b[i] = (b[i] - du_[i] * b[i + 1] - du2_[i] * b[i + 2]) / d_[i];
    }
  }

 private:
  int64_t n_;
  Eigen::VectorXd d_, dl_, du_, du2_;
  std::vector<int64_t> ipiv_;
};

}  // namespace

void TopEigenpairs(const Eigen::MatrixXd& a, int64_t r, Eigen::VectorXd* values,
                   Eigen::MatrixXd* vectors) {
  const int64_t n = a.rows();
  r = std::clamp<int64_t>(r, 0, n);
  values->resize(r);
  vectors->resize(n, r);
  if (r == 0) return;
  if (n == 1) {
    (*values)[0] = a(0, 0);
    (*vectors)(0, 0) = 1.0;
    return;
  }
  const Eigen::Tridiagonalization<Eigen::MatrixXd> tri(a);
  const Eigen::VectorXd diag = tri.diagonal();
  const Eigen::VectorXd off = tri.subDiagonal();
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es;
  es.computeFromTridiagonal(diag, off, Eigen::EigenvaluesOnly);
  const Eigen::VectorXd& w = es.eigenvalues();  // ascending
  // Scale of T (its 1-norm bound) for the tolerances, as in LAPACK's dstein:
  // eigenvalues closer than 1e-3 |T| form a cluster whose vectors are
  // re-orthogonalised against each other; equal eigenvalues are separated
  // by a few ulps of |T| so that the shifted systems differ.
  double norm = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    double row = std::fabs(diag[i]);
    if (i > 0) row += std::fabs(off[i - 1]);
    if (i + 1 < n) row += std::fabs(off[i]);
    norm = std::max(norm, row);
  }
  const double eps = std::numeric_limits<double>::epsilon();
  const double scale = std::max(norm, std::numeric_limits<double>::min());
  const double cluster_tol = 1e-3 * scale;
  const double separate = 10.0 * eps * scale;
  const double tiny = eps * scale;
  Eigen::MatrixXd z(n, r);  // eigenvectors of T, column l for w[n - 1 - l]
  double prev_shift = 0.0;
  int64_t cluster_begin = 0;
  for (int64_t l = 0; l < r; ++l) {
    const double lambda = w[n - 1 - l];
    double shift = lambda;
    if (l > 0) {
      if (prev_shift - lambda > cluster_tol) cluster_begin = l;
      // Descending order: keep each shift strictly below the previous one.
      shift = std::min(shift, prev_shift - separate);
    }
    prev_shift = shift;
    (*values)[l] = lambda;
    const ShiftedTridiagonalLu lu(diag, off, shift, tiny);
    // A fixed start vector with no special structure (all components
    // nonzero and unequal), then three steps of inverse iteration, each
    // followed by Gram-Schmidt against the cluster's earlier vectors.
    Eigen::VectorXd x(n);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = 1.0 + 0.5 * std::sin(static_cast<double>(i) * 1.618033988749895 + l);
    }
    x.normalize();
    for (int iter = 0; iter < 3; ++iter) {
      lu.Solve(&x);
      for (int64_t m = cluster_begin; m < l; ++m) x -= z.col(m).dot(x) * z.col(m);
      const double nrm = x.norm();
      if (!(nrm > 0.0) || !std::isfinite(nrm)) {
        // Cannot happen for a finite symmetric matrix; fall back to a unit
        // vector orthogonal to the cluster so that the output stays orthonormal.
        x = Eigen::VectorXd::Unit(n, l % n);
        for (int64_t m = cluster_begin; m < l; ++m) x -= z.col(m).dot(x) * z.col(m);
        x.normalize();
        break;
      }
      x /= nrm;
    }
    z.col(l) = x;
  }
  // Back to the basis of `a`: the Householder reflections of the reduction.
  *vectors = tri.matrixQ() * z;
}

void LargestEigenpairs(const Eigen::MatrixXd& a, int64_t r, Eigen::VectorXd* values,
                       Eigen::MatrixXd* vectors) {
  const int64_t n = a.rows();
  r = std::clamp<int64_t>(r, 0, n);
  if (4 * r <= n) {
    TopEigenpairs(a, r, values, vectors);
    return;
  }
  const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(a);  // reads the lower triangle
  values->resize(r);
  vectors->resize(n, r);
  for (int64_t l = 0; l < r; ++l) {
    (*values)[l] = es.eigenvalues()[n - 1 - l];
    vectors->col(l) = es.eigenvectors().col(n - 1 - l);
  }
}

}  // namespace dendro
