#include "core/hppca/gaussian.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "Eigen/Cholesky"
#include "Eigen/Eigenvalues"
#include "absl/strings/str_cat.h"
#include "core/hppca/top_eigen.h"

namespace dendro {
namespace {

// b * v for a float basis and a double vector, accumulated in double.
Eigen::VectorXd Project(const Eigen::Map<const RowMatrixF>& b, const Eigen::VectorXd& v) {
  Eigen::VectorXd out(b.rows());
  const int64_t d = b.cols();
  for (Eigen::Index j = 0; j < b.rows(); ++j) {
    const float* row = b.row(j).data();
    double acc0 = 0.0, acc1 = 0.0, acc2 = 0.0, acc3 = 0.0;
    int64_t i = 0;
    for (; i + 4 <= d; i += 4) {
      acc0 += static_cast<double>(row[i]) * v[i];
      acc1 += static_cast<double>(row[i + 1]) * v[i + 1];
      acc2 += static_cast<double>(row[i + 2]) * v[i + 2];
      acc3 += static_cast<double>(row[i + 3]) * v[i + 3];
    }
    for (; i < d; ++i) acc0 += static_cast<double>(row[i]) * v[i];
    out[j] = (acc0 + acc1) + (acc2 + acc3);
  }
  return out;
}

// The top `rank` eigenpairs of the symmetric d x d matrix `cov` (lower
// triangle read), eigenvalues clamped at 0: the d x d route of a centroid.
void TopOfCovariance(const Eigen::MatrixXd& cov, int32_t rank, Eigen::VectorXd* f,
                     Eigen::MatrixXd* u) {
  // Only the top `rank` eigenpairs (top_eigen.h): about 6x cheaper than the
  // full solver at d = 640, rank = 50 (docs/methods.md).
  Eigen::VectorXd top;
  LargestEigenpairs(cov, rank, &top, u);
  *f = top.cwiseMax(0.0);
}

// Completes a centroid whose mean and noise_mean are set, from the leading
// eigenvalues `f` (descending, >= 0, at most `rank` of them) and eigenvectors
// `u` (d x f.size()) of Sigma - noise_mean I, whose trace is `tm`: the other
// eigenvalues of Sigma within the top `rank` are noise_mean (their vectors
// zero rows), and `tail` is the mean of the d - rank left.
void SetSpectrum(const Eigen::VectorXd& f, const Eigen::MatrixXd& u, double tm, int32_t rank,
                 Centroid* c) {
  const int64_t d = c->mean.size();
  c->trace = tm + c->noise_mean * static_cast<double>(d);
  c->eigvecs = RowMatrixF::Zero(rank, d);
  c->eigvals = Eigen::VectorXd::Constant(rank, c->noise_mean);
  double top_sum = 0.0;
  for (int64_t l = 0; l < f.size(); ++l) {
    c->eigvals[l] = f[l] + c->noise_mean;
    c->eigvecs.row(l) = u.col(l).transpose().cast<float>();
    top_sum += f[l];
  }
  c->tail = rank < d ? c->noise_mean + std::max(tm - top_sum, 0.0) / static_cast<double>(d - rank)
                     : c->noise_mean;
}

}  // namespace

double LogDet(const GaussianRef& g) {
  double s = static_cast<double>(g.dim() - g.rank()) * std::log(g.noise);
  for (int32_t j = 0; j < g.rank(); ++j) s += std::log(g.excess[j] + g.noise);
  return s;
}

double TraceInverse(const GaussianRef& g) {
  double s = static_cast<double>(g.dim() - g.rank()) / g.noise;
  for (int32_t j = 0; j < g.rank(); ++j) s += 1.0 / (g.excess[j] + g.noise);
  return s;
}

double KlDivergence(const GaussianRef& p, const GaussianRef& q) {
  const double d = static_cast<double>(p.dim());
  const double s2 = q.noise;
  // omega_l = e_l / (e_l + s2): Sigma_q^{-1} = (I - B^T diag(omega) B) / s2.
  const Eigen::VectorXd omega = q.excess.array() / (q.excess.array() + s2);
  // Mean term.
  const Eigen::VectorXd delta = p.mean - q.mean;
  const Eigen::VectorXd a = Project(q.basis, delta);
  const double mahal = (delta.squaredNorm() - (omega.array() * a.array().square()).sum()) / s2;
  // tr(Sigma_q^{-1} Sigma_p) = noise_p tr(Sigma_q^{-1})
  //   + (sum_j e_j |v_j|^2 - sum_{l,j} omega_l e_j (u_l . v_j)^2) / s2.
  double trace = p.noise * TraceInverse(q);
  if (p.rank() > 0) {
    double f = 0.0;
    if (q.rank() > 0) {
      const Eigen::MatrixXd g = (q.basis * p.basis.transpose()).cast<double>();  // rq x kp
      f = (omega.asDiagonal() * g.array().square().matrix() * p.excess).sum();
    }
    trace += (p.excess.sum() - f) / s2;
  }
  return 0.5 * (LogDet(q) - LogDet(p) - d + trace + mahal);
}

double BhattacharyyaFromParts(const GaussianRef& a, const GaussianRef& b,
                              const Eigen::Ref<const Eigen::MatrixXf>& cross,
                              const Eigen::Ref<const Eigen::VectorXd>& proj_a,
                              const Eigen::Ref<const Eigen::VectorXd>& proj_b, double dist2) {
  const int64_t dim = a.dim();
  const int32_t ka = a.rank(), kb = b.rank();
  const double s2 = 0.5 * (a.noise + b.noise);
  // Sigma = W W^T + s2 I with W = [B_a^T diag(sqrt(e_a / 2)), B_b^T diag(sqrt(e_b / 2))].
  // Capacitance C = s2 I + W^T W = [[A, M], [M^T, D]] with diagonal A, D (the
  // rows of a basis are orthonormal where their excess is nonzero) and
  // M = diag(sa) B_a B_b^T diag(sb); it is reduced through the Schur
  // complement S = D - M^T A^{-1} M:
  //   log|C| = log|A| + log|S|,
  //   z^T C^{-1} z = za^T A^{-1} za + w^T S^{-1} w,  w = zb - M^T A^{-1} za.
  const Eigen::VectorXd sa = (0.5 * a.excess).cwiseSqrt();
  const Eigen::VectorXd sb = (0.5 * b.excess).cwiseSqrt();
  const Eigen::VectorXd diag_a = (0.5 * a.excess).array() + s2;
  const Eigen::VectorXd diag_d = (0.5 * b.excess).array() + s2;
  const Eigen::VectorXd za = sa.cwiseProduct(proj_a);
  const Eigen::VectorXd zb = sb.cwiseProduct(proj_b);
  double logdet_c = diag_a.array().log().sum();
  double quad = (za.array().square() / diag_a.array()).sum();
  if (kb > 0) {
    Eigen::MatrixXd schur = diag_d.asDiagonal();
    Eigen::VectorXd w = zb;
    if (ka > 0) {
      const Eigen::MatrixXd m = sa.asDiagonal() * cross.cast<double>() * sb.asDiagonal();
      const Eigen::MatrixXd am = diag_a.cwiseInverse().asDiagonal() * m;  // A^{-1} M
      schur.noalias() -= m.transpose() * am;
      w.noalias() -= am.transpose() * za;
    }
    Eigen::LLT<Eigen::MatrixXd> llt(schur);
    logdet_c += 2.0 * llt.matrixLLT().diagonal().array().log().sum();
    quad += llt.matrixL().solve(w).squaredNorm();
  }
  const double logdet_mid = static_cast<double>(dim - ka - kb) * std::log(s2) + logdet_c;
  const double mahal = (dist2 - quad) / s2;
  return 0.125 * mahal + 0.5 * (logdet_mid - 0.5 * (LogDet(a) + LogDet(b)));
}

double BhattacharyyaWithCross(const GaussianRef& a, const GaussianRef& b,
                              const Eigen::Ref<const Eigen::MatrixXf>& cross) {
  const Eigen::VectorXd delta = a.mean - b.mean;
  return BhattacharyyaFromParts(a, b, cross, Project(a.basis, delta), Project(b.basis, delta),
                                delta.squaredNorm());
}

double BhattacharyyaDistance(const GaussianRef& a, const GaussianRef& b) {
  if (a.rank() == 0 || b.rank() == 0) {
    return BhattacharyyaWithCross(a, b, Eigen::MatrixXf::Zero(a.rank(), b.rank()));
  }
  const Eigen::MatrixXf cross = a.basis * b.basis.transpose();  // ka x kb
  return BhattacharyyaWithCross(a, b, cross);
}

double BhattacharyyaLowerBound(const GaussianRef& a, const GaussianRef& b) {
  const double ea = a.rank() > 0 ? a.excess.maxCoeff() : 0.0;
  const double eb = b.rank() > 0 ? b.excess.maxCoeff() : 0.0;
  const double top = 0.5 * (ea + eb) + 0.5 * (a.noise + b.noise);
  // Sigma's largest eigenvalue is <= top, so dmu^T Sigma^{-1} dmu >= |dmu|^2 / top;
  // the log-determinant term is >= 0 (log det is concave).
  return (a.mean - b.mean).squaredNorm() / (8.0 * top);
}

absl::StatusOr<Centroid> TheoremTwoCentroid(absl::Span<const GaussianRef> members,
                                            int32_t rank) {
  if (members.empty()) return absl::InvalidArgumentError("centroid of an empty set of Gaussians");
  const int64_t d = members[0].dim();
  if (rank < 0 || rank > d) {
    return absl::InvalidArgumentError(
        absl::StrCat("centroid rank ", rank, " outside [0, d=", d, "]"));
  }
  int64_t m = 0;
  for (const GaussianRef& g : members) {
    if (g.dim() != d) {
      return absl::InvalidArgumentError(
          absl::StrCat("centroid members disagree on dimension: ", g.dim(), " vs ", d));
    }
    m += g.rank() + 1;
  }
  const double n = static_cast<double>(members.size());
  Centroid c;
  c.mean = Eigen::VectorXd::Zero(d);
  c.noise_mean = 0.0;
  for (const GaussianRef& g : members) {
    c.mean += g.mean;
    c.noise_mean += g.noise;
  }
  c.mean /= n;
  c.noise_mean /= n;
  // Sigma - noise_mean I = M^T M with the rows of M: sqrt(e_ij / n) b_ij and
  // (mu_i - mu) / sqrt(n).
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> mt(m, d);
  int64_t row = 0;
  const double inv_sqrt_n = 1.0 / std::sqrt(n);
  for (const GaussianRef& g : members) {
    for (int32_t j = 0; j < g.rank(); ++j) {
      mt.row(row++) = std::sqrt(std::max(g.excess[j], 0.0) / n) * g.basis.row(j).cast<double>();
    }
    mt.row(row++) = (g.mean - c.mean).transpose() * inv_sqrt_n;
  }
  const double tm = mt.squaredNorm();
  Eigen::VectorXd f;  // eigenvalues of M^T M, descending
  Eigen::MatrixXd u;  // d x f.size() eigenvectors
  if (rank > 0) {
    if (m <= d) {
      // Gram route: M M^T (m x m) shares the nonzero spectrum.
      const Eigen::MatrixXd gram = mt * mt.transpose();
      Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(gram);
      const int64_t avail = std::min<int64_t>(rank, m);
      f.resize(avail);
      u.resize(d, avail);
      const double fmax = std::max(es.eigenvalues()[m - 1], 0.0);
      for (int64_t l = 0; l < avail; ++l) {
        const double fl = es.eigenvalues()[m - 1 - l];
        if (fl > 1e-12 * fmax && fl > 0.0) {
          f[l] = fl;
          u.col(l) = mt.transpose() * es.eigenvectors().col(m - 1 - l) / std::sqrt(fl);
        } else {
          f[l] = 0.0;
          u.col(l).setZero();
        }
      }
    } else {
      Eigen::MatrixXd cov = Eigen::MatrixXd::Zero(d, d);
      cov.selfadjointView<Eigen::Lower>().rankUpdate(mt.transpose());
      TopOfCovariance(cov, rank, &f, &u);
    }
  }
  SetSpectrum(f, u, tm, rank, &c);
  return c;
}

CentroidMoments::CentroidMoments(Eigen::VectorXd origin)
    : origin_(std::move(origin)),
      s1_(Eigen::VectorXd::Zero(origin_.size())),
      s2_(Eigen::MatrixXd::Zero(origin_.size(), origin_.size())) {}

void CentroidMoments::Update(absl::Span<const GaussianRef> members, bool add) {
  const double sign = add ? 1.0 : -1.0;
  const int64_t d = origin_.size();
  int64_t m = 0;
  for (const GaussianRef& g : members) m += g.rank() + 1;
  if (m == 0) return;
  // The columns of W: sqrt(e_ij) b_ij and mu_i - o, so that S2 changes by
  // sign * W W^T. Only its lower triangle is formed, in column blocks of
  // kLowerColumns, each one GEMM of the rows at and below the block: about
  // half the arithmetic of the full product (Eigen's selfadjoint rank update
  // was no faster than the full GEMM at d = 640 from 50 or 5,100 columns,
  // docs/benchmarks.md).
  Eigen::MatrixXd w(d, m);
  int64_t col = 0;
  for (const GaussianRef& g : members) {
    for (int32_t j = 0; j < g.rank(); ++j) {
      w.col(col++) =
          std::sqrt(std::max(g.excess[j], 0.0)) * g.basis.row(j).transpose().cast<double>();
    }
    const Eigen::VectorXd delta = g.mean - origin_;
    w.col(col++) = delta;
    s1_ += sign * delta;
    noise_sum_ += sign * g.noise;
    count_ += add ? 1 : -1;
  }
  constexpr int64_t kLowerColumns = 64;
  for (int64_t x0 = 0; x0 < d; x0 += kLowerColumns) {
    const int64_t nb = std::min(kLowerColumns, d - x0);
    auto block = s2_.block(x0, x0, d - x0, nb);
    if (add) {
      block.noalias() += w.bottomRows(d - x0) * w.middleRows(x0, nb).transpose();
    } else {
      block.noalias() -= w.bottomRows(d - x0) * w.middleRows(x0, nb).transpose();
    }
  }
}

absl::StatusOr<Centroid> CentroidMoments::ToCentroid(int32_t rank) const {
  const int64_t d = origin_.size();
  if (count_ < 1) return absl::InvalidArgumentError("centroid of an empty set of Gaussians");
  if (rank < 0 || rank > d) {
    return absl::InvalidArgumentError(
        absl::StrCat("centroid rank ", rank, " outside [0, d=", d, "]"));
  }
  const double n = static_cast<double>(count_);
  const Eigen::VectorXd shift = s1_ / n;
  Centroid c;
  c.mean = origin_ + shift;
  c.noise_mean = noise_sum_ / n;
  // Sigma - noise_mean I, in the lower triangle (all LargestEigenpairs reads).
  Eigen::MatrixXd cov = s2_ / n;
  cov.selfadjointView<Eigen::Lower>().rankUpdate(shift, -1.0);
  const double tm = cov.trace();
  Eigen::VectorXd f;
  Eigen::MatrixXd u;
  if (rank > 0) TopOfCovariance(cov, rank, &f, &u);
  SetSpectrum(f, u, tm, rank, &c);
  return c;
}

LowRankGaussian CentroidGaussian(const Centroid& c) {
  LowRankGaussian g;
  g.mean = c.mean;
  g.basis = c.eigvecs;
  g.noise = c.tail;
  g.excess = (c.eigvals.array() - c.tail).max(0.0).matrix();
  return g;
}

Eigen::MatrixXd DenseCovariance(const GaussianRef& g) {
  const Eigen::MatrixXd b = g.basis.cast<double>();
  Eigen::MatrixXd s = b.transpose() * g.excess.asDiagonal() * b;
  s.diagonal().array() += g.noise;
  return s;
}

}  // namespace dendro
