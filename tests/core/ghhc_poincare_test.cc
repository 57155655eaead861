// Poincaré-ball geometry of gHHC against closed forms and finite
// differences: distance (eq. 1) vs the Möbius-addition form, norm (eq. 2),
// d_cp (eqs. 3, 16), the retraction (eq. 19) and the Riemannian gradient
// scale (eq. 20) vs the metric measured through the distance.
#include <cmath>
#include <random>

#include "core/ghhc/poincare.h"
#include "gtest/gtest.h"

namespace dendro::ghhc {
namespace {

Eigen::VectorXd RandomInBall(std::mt19937_64& rng, int d, double max_norm) {
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> unif(0.05, max_norm);
  Eigen::VectorXd v(d);
  for (int i = 0; i < d; ++i) v[i] = normal(rng);
  return v * (unif(rng) / v.norm());
}

// Möbius addition x (+) y in the Poincaré ball.
Eigen::VectorXd MobiusAdd(const Eigen::VectorXd& x, const Eigen::VectorXd& y) {
  const double xy = x.dot(y), xx = x.squaredNorm(), yy = y.squaredNorm();
  return ((1 + 2 * xy + yy) * x + (1 - xx) * y) / (1 + 2 * xy + xx * yy);
}

// Central differences of f at v.
template <typename F>
Eigen::VectorXd NumericGradient(F f, const Eigen::VectorXd& v, double h = 1e-6) {
  Eigen::VectorXd g(v.size());
  for (int i = 0; i < v.size(); ++i) {
    Eigen::VectorXd a = v, b = v;
    a[i] += h;
    b[i] -= h;
    g[i] = (f(a) - f(b)) / (2 * h);
  }
  return g;
}

TEST(PoincareTest, DistanceMatchesMobiusForm) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int d = 1 + trial % 9;
    const Eigen::VectorXd x = RandomInBall(rng, d, 0.95);
    const Eigen::VectorXd y = RandomInBall(rng, d, 0.95);
    const double expected = 2.0 * std::atanh(MobiusAdd(-x, y).norm());
    EXPECT_NEAR(PoincareDistance(x, y), expected, 1e-9 * (1 + expected));
    EXPECT_NEAR(PoincareDistance(x, y), PoincareDistance(y, x), 1e-12);
  }
}

TEST(PoincareTest, DistanceAlongALineIsTheDifferenceOfNorms) {
  // On a line through the origin, d(a u, b u) = |2 atanh(a) - 2 atanh(b)|.
  Eigen::VectorXd u(3);
  u << 0.6, 0.0, -0.8;
  for (double a : {-0.7, -0.1, 0.0, 0.3, 0.85}) {
    for (double b : {-0.5, 0.2, 0.9}) {
      EXPECT_NEAR(PoincareDistance(a * u, b * u), std::abs(2 * std::atanh(a) - 2 * std::atanh(b)),
                  1e-10);
    }
  }
  EXPECT_EQ(PoincareDistance(0.4 * u, 0.4 * u), 0.0);
}

TEST(PoincareTest, NormIsTheDistanceToTheOrigin) {
  std::mt19937_64 rng(8);
  for (int trial = 0; trial < 50; ++trial) {
    const Eigen::VectorXd x = RandomInBall(rng, 5, 0.99);
    EXPECT_NEAR(PoincareNorm(x.norm()), PoincareDistance(x, Eigen::VectorXd::Zero(5)), 1e-9);
    // Eq. 2's middle form.
    const double r2 = x.squaredNorm();
    EXPECT_NEAR(PoincareNorm(x.norm()), std::acosh((1 + r2) / (1 - r2)), 1e-9);
  }
  EXPECT_EQ(PoincareNorm(0.0), 0.0);
}

TEST(PoincareTest, ChildParentDissimilarityClosedForm) {
  Eigen::VectorXd child(2), parent(2);
  child << 0.5, 0.1;
  parent << 0.2, 0.0;  // smaller norm: plain distance
  const double d = PoincareDistance(child, parent);
  EXPECT_DOUBLE_EQ(ChildParentDissimilarity(child, parent), d);
  // Swapped roles: the parent is farther out, weighted by 1 + norm gap.
  const double gap = 2 * std::atanh(child.norm()) - 2 * std::atanh(parent.norm());
  EXPECT_NEAR(ChildParentDissimilarity(parent, child), d * (1 + gap), 1e-12);
  // Margin (eq. 16): active while the gap is below gamma.
  EXPECT_NEAR(ChildParentDissimilarity(child, parent, 2 * gap), d * (1 + gap), 1e-12);
  EXPECT_NEAR(ChildParentDissimilarity(child, parent, 0.5 * gap), d, 1e-12);
}

TEST(PoincareTest, GradientsMatchFiniteDifferences) {
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 60; ++trial) {
    const int d = 2 + trial % 6;
    const Eigen::VectorXd x = RandomInBall(rng, d, 0.9);
    const Eigen::VectorXd y = RandomInBall(rng, d, 0.9);
    const Eigen::VectorXd gy = PoincareDistanceGradient(x, y);
    const Eigen::VectorXd ny =
        NumericGradient([&](const Eigen::VectorXd& v) { return PoincareDistance(x, v); }, y);
    EXPECT_LT((gy - ny).norm(), 1e-5 * (1 + ny.norm())) << "trial " << trial;
    const Eigen::VectorXd gn = PoincareNormGradient(y);
    const Eigen::VectorXd nn =
        NumericGradient([](const Eigen::VectorXd& v) { return PoincareNorm(v.norm()); }, y);
    EXPECT_LT((gn - nn).norm(), 1e-5 * (1 + nn.norm()));
    for (double margin : {0.0, 0.3, 3.0}) {
      Eigen::VectorXd gc, gp;
      ChildParentGradient(x, y, margin, &gc, &gp);
      const Eigen::VectorXd nc = NumericGradient(
          [&](const Eigen::VectorXd& v) { return ChildParentDissimilarity(v, y, margin); }, x);
      const Eigen::VectorXd np = NumericGradient(
          [&](const Eigen::VectorXd& v) { return ChildParentDissimilarity(x, v, margin); }, y);
      EXPECT_LT((gc - nc).norm(), 1e-5 * (1 + nc.norm())) << "trial " << trial;
      EXPECT_LT((gp - np).norm(), 1e-5 * (1 + np.norm())) << "trial " << trial;
    }
  }
}

TEST(PoincareTest, GradientAtCoincidentPointsIsZero) {
  Eigen::VectorXd x(3);
  x << 0.1, 0.2, 0.3;
  EXPECT_EQ(PoincareDistanceGradient(x, x).norm(), 0.0);
  EXPECT_EQ(PoincareNormGradient(Eigen::VectorXd::Zero(3)).norm(), 0.0);
}

TEST(PoincareTest, RiemannianScaleInvertsTheMetricMeasuredByTheDistance) {
  // The metric is lambda(z)^2 I with lambda = 2 / (1 - ||z||^2); measure
  // lambda as d(z, z + h v) / (h ||v||) and check scale = 1 / lambda^2.
  std::mt19937_64 rng(10);
  for (int trial = 0; trial < 30; ++trial) {
    const Eigen::VectorXd z = RandomInBall(rng, 4, 0.85);
    Eigen::VectorXd v = RandomInBall(rng, 4, 0.5);
    const double h = 1e-7;
    const double lambda = PoincareDistance(z, z + h * v) / (h * v.norm());
    EXPECT_NEAR(RiemannianScale(z.squaredNorm()), 1.0 / (lambda * lambda),
                1e-5 / (lambda * lambda));
  }
  EXPECT_DOUBLE_EQ(RiemannianScale(0.0), 0.25);
  EXPECT_DOUBLE_EQ(RiemannianScale(0.64), 0.36 * 0.36 / 4);
}

TEST(PoincareTest, RetractionKeepsInsideAndClips) {
  Eigen::VectorXd z(2);
  z << 0.3, 0.4;  // norm 0.5: unchanged
  Retract(z, 0.8);
  EXPECT_DOUBLE_EQ(z[0], 0.3);
  EXPECT_DOUBLE_EQ(z[1], 0.4);
  z << 0.6, 0.6;  // norm 0.85 > 0.8: clipped, direction kept
  Retract(z, 0.8);
  EXPECT_NEAR(z.norm(), 0.8, 1e-12);
  EXPECT_NEAR(z[0], z[1], 1e-15);
  z << 3.0, 4.0;  // outside the ball: onto norm 1 - eps, then clipped
  Eigen::VectorXd w = z;
  Retract(w, 0.99999999);
  EXPECT_NEAR(w.norm(), 1 - 1e-5, 1e-12);
  Retract(z, 0.8);
  EXPECT_NEAR(z[0], 0.48, 1e-12);
  EXPECT_NEAR(z[1], 0.64, 1e-12);
  Eigen::VectorXf f(2);
  f << 0.9f, 0.0f;
  Retract(f, 0.8);
  EXPECT_NEAR(f[0], 0.8f, 1e-6f);
}

}  // namespace
}  // namespace dendro::ghhc
