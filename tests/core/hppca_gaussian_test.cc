// Low-rank Gaussian algebra of the HPPCA module (KL, Bhattacharyya, Theorem 2
// centroid) against straightforward dense double-precision formulas.
#include "core/hppca/gaussian.h"
#include "core/hppca/internal.h"

#include <cmath>
#include <random>
#include <vector>

#include "Eigen/Cholesky"
#include "Eigen/Eigenvalues"
#include "Eigen/QR"
#include "gtest/gtest.h"

namespace dendro {
namespace {

using Eigen::MatrixXd;
using Eigen::VectorXd;

// A Gaussian with an orthonormal (float) basis of `rank` rows; a few excess
// values are exactly zero (and, if `zero_rows`, so are their rows).
LowRankGaussian RandomGaussian(int64_t d, int32_t rank, std::mt19937_64& rng,
                               bool zero_rows = false, double mean_scale = 1.0) {
  std::normal_distribution<double> n(0.0, 1.0);
  std::uniform_real_distribution<double> u(0.05, 3.0);
  LowRankGaussian g;
  g.mean = VectorXd::NullaryExpr(d, [&](Eigen::Index) { return mean_scale * n(rng); });
  MatrixXd a = MatrixXd::NullaryExpr(d, std::max(rank, 1), [&](Eigen::Index, Eigen::Index) {
    return n(rng);
  });
  Eigen::HouseholderQR<MatrixXd> qr(a);
  const MatrixXd q = qr.householderQ() * MatrixXd::Identity(d, std::max(rank, 1));
  g.basis = q.leftCols(rank).transpose().cast<float>();
  g.excess.resize(rank);
  for (int32_t j = 0; j < rank; ++j) {
    g.excess[j] = (j % 5 == 4) ? 0.0 : u(rng);
    if (zero_rows && j % 5 == 4) g.basis.row(j).setZero();
  }
  g.noise = std::uniform_real_distribution<double>(0.01, 0.5)(rng);
  return g;
}

double DenseLogDet(const MatrixXd& s) {
  Eigen::LLT<MatrixXd> llt(s);
  return 2.0 * llt.matrixLLT().diagonal().array().log().sum();
}

double DenseKl(const LowRankGaussian& p, const LowRankGaussian& q) {
  const MatrixXd sp = DenseCovariance(p.ref()), sq = DenseCovariance(q.ref());
  const MatrixXd sq_inv = sq.inverse();
  const VectorXd delta = p.mean - q.mean;
  const double d = static_cast<double>(p.mean.size());
  return 0.5 * (DenseLogDet(sq) - DenseLogDet(sp) - d + (sq_inv * sp).trace() +
                delta.dot(sq_inv * delta));
}

double DenseBhattacharyya(const LowRankGaussian& a, const LowRankGaussian& b) {
  const MatrixXd sa = DenseCovariance(a.ref()), sb = DenseCovariance(b.ref());
  const MatrixXd s = 0.5 * (sa + sb);
  const VectorXd delta = a.mean - b.mean;
  return 0.125 * delta.dot(s.inverse() * delta) +
         0.5 * (DenseLogDet(s) - 0.5 * (DenseLogDet(sa) + DenseLogDet(sb)));
}

TEST(GaussianTest, LogDetAndTraceInverseMatchDense) {
  std::mt19937_64 rng(1);
  for (int32_t rank : {0, 1, 4, 9}) {
    const LowRankGaussian g = RandomGaussian(9, rank, rng);
    const MatrixXd s = DenseCovariance(g.ref());
    EXPECT_NEAR(LogDet(g.ref()), DenseLogDet(s), 1e-5 * (1 + std::fabs(DenseLogDet(s))));
    EXPECT_NEAR(TraceInverse(g.ref()), s.inverse().trace(), 1e-5 * s.inverse().trace());
  }
}

TEST(GaussianTest, KlMatchesDenseReference) {
  std::mt19937_64 rng(2);
  const int64_t d = 12;
  int checked = 0;
  for (int32_t rp : {0, 1, 3, 7, 12}) {
    for (int32_t rq : {0, 2, 5, 12}) {
      for (bool zero_rows : {false, true}) {
        const LowRankGaussian p = RandomGaussian(d, rp, rng, zero_rows);
        const LowRankGaussian q = RandomGaussian(d, rq, rng, zero_rows);
        const double want = DenseKl(p, q);
        const double got = KlDivergence(p.ref(), q.ref());
        EXPECT_NEAR(got, want, 1e-5 * (1.0 + std::fabs(want))) << "rp=" << rp << " rq=" << rq;
        EXPECT_GE(got, -1e-6);
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 40);
  // KL of a Gaussian to itself is zero; KL is asymmetric in general.
  const LowRankGaussian a = RandomGaussian(d, 4, rng), b = RandomGaussian(d, 6, rng);
  EXPECT_NEAR(KlDivergence(a.ref(), a.ref()), 0.0, 1e-4);
  EXPECT_GT(std::fabs(KlDivergence(a.ref(), b.ref()) - KlDivergence(b.ref(), a.ref())), 1e-3);
}

TEST(GaussianTest, KlStaysFiniteInHighDimension) {
  // d in the hundreds with a tiny noise: the dense determinant would
  // underflow in float, the eigenbasis form must not.
  std::mt19937_64 rng(3);
  LowRankGaussian p = RandomGaussian(400, 50, rng), q = RandomGaussian(400, 50, rng);
  p.noise = 0.01;
  q.noise = 0.01;
  const double kl = KlDivergence(p.ref(), q.ref());
  EXPECT_TRUE(std::isfinite(kl));
  EXPECT_NEAR(kl, DenseKl(p, q), 1e-5 * std::fabs(kl));
  const double b = BhattacharyyaDistance(p.ref(), q.ref());
  EXPECT_TRUE(std::isfinite(b));
  EXPECT_NEAR(b, DenseBhattacharyya(p, q), 1e-5 * std::fabs(b));
}

TEST(GaussianTest, BhattacharyyaMatchesDenseReferenceAndIsSymmetric) {
  std::mt19937_64 rng(4);
  const int64_t d = 10;
  for (int32_t ra : {0, 1, 4, 10}) {
    for (int32_t rb : {0, 3, 10}) {
      const LowRankGaussian a = RandomGaussian(d, ra, rng, ra == 4);
      const LowRankGaussian b = RandomGaussian(d, rb, rng);
      const double want = DenseBhattacharyya(a, b);
      const double got = BhattacharyyaDistance(a.ref(), b.ref());
      EXPECT_NEAR(got, want, 1e-5 * (1.0 + std::fabs(want))) << ra << " " << rb;
      EXPECT_NEAR(BhattacharyyaDistance(b.ref(), a.ref()), got, 1e-6 * (1.0 + std::fabs(got)));
      // The pruning bound really is a lower bound.
      EXPECT_LE(BhattacharyyaLowerBound(a.ref(), b.ref()), got + 1e-9);
    }
  }
  const LowRankGaussian a = RandomGaussian(d, 3, rng);
  EXPECT_NEAR(BhattacharyyaDistance(a.ref(), a.ref()), 0.0, 1e-6);
}

TEST(GaussianTest, BhattacharyyaLowerBoundHoldsForFarMeans) {
  std::mt19937_64 rng(5);
  for (int i = 0; i < 20; ++i) {
    const LowRankGaussian a = RandomGaussian(15, 5, rng, false, 5.0);
    const LowRankGaussian b = RandomGaussian(15, 8, rng, false, 5.0);
    const double lb = BhattacharyyaLowerBound(a.ref(), b.ref());
    EXPECT_GT(lb, 0.0);
    EXPECT_LE(lb, DenseBhattacharyya(a, b) + 1e-9);
  }
}

// Dense eqs. 17 and 18.
void DenseCentroid(const std::vector<LowRankGaussian>& m, VectorXd* mu, MatrixXd* sigma) {
  const int64_t d = m[0].mean.size();
  *mu = VectorXd::Zero(d);
  for (const auto& g : m) *mu += g.mean;
  *mu /= static_cast<double>(m.size());
  *sigma = MatrixXd::Zero(d, d);
  for (const auto& g : m) {
    const VectorXd dm = g.mean - *mu;
    *sigma += DenseCovariance(g.ref()) + dm * dm.transpose();
  }
  *sigma /= static_cast<double>(m.size());
}

double SummedDenseKl(const std::vector<LowRankGaussian>& m, const VectorXd& mu,
                     const MatrixXd& sigma) {
  const MatrixXd inv = sigma.inverse();
  const double ld = DenseLogDet(sigma);
  double s = 0.0;
  for (const auto& g : m) {
    const MatrixXd sp = DenseCovariance(g.ref());
    const VectorXd dm = g.mean - mu;
    s += 0.5 * (ld - DenseLogDet(sp) - static_cast<double>(mu.size()) + (inv * sp).trace() +
                dm.dot(inv * dm));
  }
  return s;
}

std::vector<GaussianRef> Refs(const std::vector<LowRankGaussian>& m) {
  std::vector<GaussianRef> r;
  for (const auto& g : m) r.push_back(g.ref());
  return r;
}

// Sigma as the centroid represents it: V^T diag(eigvals - tail) V + tail I
// (exact at rank d; zero rows of V stand for eigenvalues equal to the tail).
MatrixXd Reconstruct(const Centroid& c) {
  const MatrixXd v = c.eigvecs.cast<double>();
  const int64_t d = c.mean.size();
  const VectorXd excess = (c.eigvals.array() - c.tail).matrix();
  return v.transpose() * excess.asDiagonal() * v + c.tail * MatrixXd::Identity(d, d);
}

TEST(GaussianTest, TheoremTwoCentroidMatchesClosedFormAtFullRank) {
  std::mt19937_64 rng(6);
  const int64_t d = 8;
  // Few members (Gram route, m <= d) and many (scatter route, m > d).
  for (int members : {2, 6}) {
    std::vector<LowRankGaussian> m;
    for (int i = 0; i < members; ++i) m.push_back(RandomGaussian(d, 1 + i % 3, rng));
    VectorXd mu;
    MatrixXd sigma;
    DenseCentroid(m, &mu, &sigma);
    auto c = TheoremTwoCentroid(Refs(m), static_cast<int32_t>(d));
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_LT((c->mean - mu).norm(), 1e-12);
    EXPECT_LT((Reconstruct(*c) - sigma).norm(), 1e-5 * sigma.norm()) << members;
    EXPECT_NEAR(c->trace, sigma.trace(), 1e-9 * sigma.trace());
    // Descending eigenvalues.
    for (Eigen::Index l = 1; l < c->eigvals.size(); ++l) {
      EXPECT_GE(c->eigvals[l - 1], c->eigvals[l] - 1e-12);
    }
    // The PPCA form at full rank is the same Gaussian.
    const LowRankGaussian g = CentroidGaussian(*c);
    EXPECT_LT((DenseCovariance(g.ref()) - sigma).norm(), 1e-5 * sigma.norm());
  }
}

TEST(GaussianTest, TheoremTwoCentroidMinimisesSummedKl) {
  std::mt19937_64 rng(7);
  const int64_t d = 7;
  std::vector<LowRankGaussian> m;
  for (int i = 0; i < 5; ++i) m.push_back(RandomGaussian(d, 2, rng));
  auto c = TheoremTwoCentroid(Refs(m), static_cast<int32_t>(d));
  ASSERT_TRUE(c.ok());
  const VectorXd mu = c->mean;
  const MatrixXd sigma = Reconstruct(*c);
  {
    VectorXd mu_ref;
    MatrixXd sigma_ref;
    DenseCentroid(m, &mu_ref, &sigma_ref);
    ASSERT_LT((sigma - sigma_ref).norm(), 1e-5 * sigma_ref.norm());
  }
  const double best = SummedDenseKl(m, mu, sigma);
  std::normal_distribution<double> n(0.0, 1.0);
  int tried = 0;
  for (double eps : {1e-1, 1e-2, 1e-3}) {
    for (int t = 0; t < 20; ++t) {
      // Mean shift.
      const VectorXd dmu = VectorXd::NullaryExpr(d, [&](Eigen::Index) { return eps * n(rng); });
      EXPECT_GT(SummedDenseKl(m, mu + dmu, sigma), best);
      // Symmetric covariance perturbation that keeps it positive definite.
      MatrixXd e = MatrixXd::NullaryExpr(d, d, [&](Eigen::Index, Eigen::Index) { return n(rng); });
      const MatrixXd sym = 0.5 * (e + e.transpose()) * eps * sigma.norm() /
                           std::sqrt(static_cast<double>(d));
      const MatrixXd s2 = sigma + sym;
      if (Eigen::SelfAdjointEigenSolver<MatrixXd>(s2).eigenvalues().minCoeff() <= 0) continue;
      EXPECT_GT(SummedDenseKl(m, mu, s2), best) << "eps=" << eps;
      ++tried;
    }
  }
  EXPECT_GT(tried, 30);
}

// The rank-r centroid against the dense eigendecomposition, for `members`
// Gaussians of rank 3 in d dimensions.
void ExpectCentroidKeepsTopEigenpairsAndTail(int64_t d, int members, int32_t r, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<LowRankGaussian> m;
  for (int i = 0; i < members; ++i) m.push_back(RandomGaussian(d, 3, rng));
  VectorXd mu;
  MatrixXd sigma;
  DenseCentroid(m, &mu, &sigma);
  Eigen::SelfAdjointEigenSolver<MatrixXd> es(sigma);
  auto c = TheoremTwoCentroid(Refs(m), r);
  ASSERT_TRUE(c.ok());
  for (int32_t l = 0; l < r; ++l) {
    const double want = es.eigenvalues()[d - 1 - l];
    EXPECT_NEAR(c->eigvals[l], want, 1e-6 * want);
    // Same direction up to sign.
    const double cosine = std::fabs(c->eigvecs.row(l).cast<double>().dot(es.eigenvectors().col(d - 1 - l)));
    EXPECT_NEAR(cosine, 1.0, 1e-4);
  }
  EXPECT_NEAR(c->tail, es.eigenvalues().head(d - r).mean(), 1e-6 * c->tail);
  // The ML PPCA approximation preserves the trace.
  const LowRankGaussian g = CentroidGaussian(*c);
  EXPECT_NEAR(DenseCovariance(g.ref()).trace(), sigma.trace(), 1e-4 * sigma.trace());
}

TEST(GaussianTest, LowRankCentroidKeepsTopEigenpairsAndTail) {
  // 4 members x (rank + 1) = 16 <= d: the Gram route.
  ExpectCentroidKeepsTopEigenpairsAndTail(20, 4, 5, 8);
}

TEST(GaussianTest, LowRankCentroidOfManyMembersKeepsTopEigenpairsAndTail) {
  // 30 x 4 = 120 > d = 48: the d x d route; 4 r <= d takes the top-r
  // eigensolver, 4 r > d the full one.
  ExpectCentroidKeepsTopEigenpairsAndTail(48, 30, 6, 18);
  ExpectCentroidKeepsTopEigenpairsAndTail(48, 30, 20, 19);
}

TEST(GaussianTest, CentroidOfOneGaussianIsItself) {
  std::mt19937_64 rng(9);
  const LowRankGaussian a = RandomGaussian(10, 4, rng);
  auto c = TheoremTwoCentroid({a.ref()}, 4);
  ASSERT_TRUE(c.ok());
  const LowRankGaussian g = CentroidGaussian(*c);
  EXPECT_LT((DenseCovariance(g.ref()) - DenseCovariance(a.ref())).norm(), 1e-5);
  EXPECT_NEAR(KlDivergence(a.ref(), g.ref()), 0.0, 1e-4);
}

// Moments after members join and leave equal the centroid of the final set
// computed from scratch, at full and low rank, with the origin far from the
// members (rounding only) and with members added, removed and added again.
TEST(GaussianTest, CentroidMomentsFollowJoinsAndLeaves) {
  std::mt19937_64 rng(21);
  const int64_t d = 24;
  std::vector<LowRankGaussian> pool;
  for (int i = 0; i < 14; ++i) pool.push_back(RandomGaussian(d, 1 + i % 4, rng, i % 3 == 0));
  for (double origin_shift : {0.0, 50.0}) {
    SCOPED_TRACE(origin_shift);
    CentroidMoments moments(VectorXd::Constant(d, origin_shift));
    // Joins 0..9, then 3, 7 and 9 leave, 11..13 join, 7 joins again.
    moments.Add(Refs({pool.begin(), pool.begin() + 10}));
    moments.Remove(Refs({pool[3], pool[7], pool[9]}));
    moments.Add(Refs({pool.begin() + 11, pool.end()}));
    moments.Add(Refs({pool[7]}));
    std::vector<LowRankGaussian> now;
    for (int i : {0, 1, 2, 4, 5, 6, 8, 11, 12, 13, 7}) now.push_back(pool[i]);
    EXPECT_EQ(moments.count(), static_cast<int64_t>(now.size()));
    for (int32_t r : {static_cast<int32_t>(d), 5}) {
      SCOPED_TRACE(r);
      auto got = moments.ToCentroid(r);
      auto want = TheoremTwoCentroid(Refs(now), r);
      ASSERT_TRUE(got.ok() && want.ok());
      EXPECT_LT((got->mean - want->mean).norm(), 1e-10 * (1.0 + origin_shift));
      EXPECT_NEAR(got->noise_mean, want->noise_mean, 1e-12);
      EXPECT_NEAR(got->trace, want->trace, 1e-9 * want->trace);
      EXPECT_NEAR(got->tail, want->tail, 1e-8 * want->tail);
      for (int32_t l = 0; l < r; ++l) {
        EXPECT_NEAR(got->eigvals[l], want->eigvals[l], 1e-8 * want->eigvals[0]);
      }
      EXPECT_LT((Reconstruct(*got) - Reconstruct(*want)).norm(), 1e-5 * Reconstruct(*want).norm());
    }
  }
  CentroidMoments empty(VectorXd::Zero(d));
  EXPECT_FALSE(empty.ToCentroid(2).ok());
  empty.Add(Refs({pool[0]}));
  EXPECT_FALSE(empty.ToCentroid(static_cast<int32_t>(d) + 1).ok());
  EXPECT_TRUE(empty.ToCentroid(0).ok());
}

// The Gram route of the exact KL assignment builds its packed d x d
// matrices in column blocks of 64: at d = 150 (three blocks, the last one
// partial) every pair's divergence equals the direct formula.
TEST(GaussianTest, GramRouteKlMatchesDirectAcrossColumnBlocks) {
  std::mt19937_64 rng(23);
  const int64_t d = 150;
  std::vector<LowRankGaussian> classes, cents;
  for (int i = 0; i < 9; ++i) classes.push_back(RandomGaussian(d, 3 + i % 5, rng, i % 4 == 0));
  for (int j = 0; j < 4; ++j) cents.push_back(RandomGaussian(d, 6 + j, rng));
  const std::vector<GaussianRef> refs = Refs(classes);
  NullRunContext ctx;
  hppca_internal::KlCache cache;  // keeps every pair's exact value
  std::vector<double> kl;
  auto got = hppca_internal::AssignByKl(refs, cents, 2, &ctx, &kl,
                                        hppca_internal::KlCrossTerm::kGramProducts, &cache);
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t i = 0; i < classes.size(); ++i) {
    for (size_t j = 0; j < cents.size(); ++j) {
      const double want = KlDivergence(refs[i], cents[j].ref());
      EXPECT_NEAR(cache.values(i, j), want, 1e-9 * std::fabs(want) + 1e-9) << i << " " << j;
    }
  }
}

// KL is invariant when every Gaussian is scaled alike (means by c,
// variances by c^2). The Gram route forms its packed matrices in single
// precision; at c = 1e20 the variances (about 1e40) are beyond float's
// range and at c = 1e-20 (about 1e-40) below its normal range, and the
// route must still give the unscaled divergences and the same assignment.
TEST(GaussianTest, GramRouteKlDoesNotDependOnTheDataScale) {
  std::mt19937_64 rng(31);
  const int64_t d = 40;
  std::vector<LowRankGaussian> classes, cents;
  for (int i = 0; i < 12; ++i) classes.push_back(RandomGaussian(d, 2 + i % 4, rng));
  for (int j = 0; j < 3; ++j) cents.push_back(RandomGaussian(d, 5, rng));
  auto scaled = [](std::vector<LowRankGaussian> g, double c) {
    for (LowRankGaussian& x : g) {
      x.mean *= c;
      x.excess *= c * c;
      x.noise *= c * c;
    }
    return g;
  };
  NullRunContext ctx;
  const std::vector<GaussianRef> refs = Refs(classes);
  std::vector<double> want_kl;
  auto want = hppca_internal::AssignByKl(refs, cents, 1, &ctx, &want_kl,
                                         hppca_internal::KlCrossTerm::kGramProducts);
  ASSERT_TRUE(want.ok()) << want.status();
  for (double c : {1e20, 1e-20}) {
    SCOPED_TRACE(c);
    const std::vector<LowRankGaussian> sc = scaled(classes, c), sq = scaled(cents, c);
    std::vector<double> kl;
    auto got = hppca_internal::AssignByKl(Refs(sc), sq, 1, &ctx, &kl,
                                          hppca_internal::KlCrossTerm::kGramProducts);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, *want);
    for (size_t i = 0; i < classes.size(); ++i) {
      EXPECT_NEAR(kl[i], want_kl[i], 1e-6 * (std::fabs(want_kl[i]) + d)) << i;
    }
  }
}

TEST(GaussianTest, CentroidRejectsBadInput) {
  std::mt19937_64 rng(10);
  EXPECT_FALSE(TheoremTwoCentroid({}, 2).ok());
  const LowRankGaussian a = RandomGaussian(5, 2, rng), b = RandomGaussian(6, 2, rng);
  EXPECT_FALSE(TheoremTwoCentroid({a.ref(), b.ref()}, 2).ok());
  EXPECT_FALSE(TheoremTwoCentroid({a.ref()}, 6).ok());
}

}  // namespace
}  // namespace dendro
