// NEB paths: the optimised path's minimum density against the analytic
// saddle of a two-Gaussian mixture, separated vs touching components,
// resampling, errors and cancellation.
#include <cmath>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "Eigen/LU"
#include "core/tneb/neb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dendro {
namespace {

using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Dynamic-size types throughout: GCC 12 misreads fixed 2-vectors under
// AVX-512 (-Warray-bounds false positives).
using Vec = Eigen::VectorXd;
using Mat = Eigen::MatrixXd;

Vec Vec2(double a, double b) {
  Vec v(2);
  v << a, b;
  return v;
}

Mat Rotated(double degrees, double a, double b) {
  const double t = degrees * M_PI / 180.0;
  Mat r(2, 2);
  r << std::cos(t), -std::sin(t), std::sin(t), std::cos(t);
  return r * Vec2(a, b).asDiagonal() * r.transpose();
}

// log of 0.5 N(x; mu1, S1) + 0.5 N(x; mu2, S2), written out directly.
double TwoGaussianLogPdf(const Vec& x, const Vec& m1, const Mat& s1, const Vec& m2, const Mat& s2) {
  auto logn = [&](const Vec& m, const Mat& s) {
    const Vec v = x - m;
    return -std::log(2 * M_PI) - 0.5 * std::log(s.determinant()) - 0.5 * v.dot(s.inverse() * v);
  };
  const double a = std::log(0.5) + logn(m1, s1);
  const double b = std::log(0.5) + logn(m2, s2);
  const double mx = std::max(a, b);
  return mx + std::log(std::exp(a - mx) + std::exp(b - mx));
}

struct SaddleCase {
  double separation;  // means at (-separation, 0) and (separation, 0)
  double angle;       // tilt of the two elongated covariances (+/- degrees)
  int32_t steps;      // NEB steps
  double tolerance;   // on |NEB minimum - saddle|
  double min_offset;  // the saddle's least distance from the segment
};

void CheckSaddle(const SaddleCase& c) {
  SCOPED_TRACE(::testing::Message() << "separation " << c.separation << " angle " << c.angle);
  const Vec m1 = Vec2(-c.separation, 0.0), m2 = Vec2(c.separation, 0.0);
  const Mat s1 = Rotated(c.angle, 2.0, 0.15);
  const Mat s2 = Rotated(-c.angle, 2.0, 0.15);
  RowMatrixD means(2, 2);
  means.row(0) = m1.transpose();
  means.row(1) = m2.transpose();
  auto mix = StudentMixture::Create({0.5, 0.5}, means, {s1, s2}, {kInf, kInf});
  ASSERT_TRUE(mix.ok()) << mix.status();

  // Ray & Lindsay (2005): every critical point of a two-Gaussian mixture lies
  // on the ridgeline x(a) = [(1-a) P1 + a P2]^-1 [(1-a) P1 m1 + a P2 m2],
  // a in [0, 1], P = S^-1, so the best mode-to-mode pass is the lowest
  // density along it (the saddle).
  const Mat p1 = s1.inverse(), p2 = s2.inverse();
  auto ridge = [&](double a) -> Vec {
    return ((1 - a) * p1 + a * p2).inverse() * ((1 - a) * p1 * m1 + a * p2 * m2);
  };
  auto f = [&](double a) { return TwoGaussianLogPdf(ridge(a), m1, s1, m2, s2); };
  int best = 0;
  const int grid = 20000;
  for (int i = 1; i <= grid; ++i) {
    if (f(static_cast<double>(i) / grid) < f(static_cast<double>(best) / grid)) best = i;
  }
  double lo = std::max(0.0, (best - 1.0) / grid), hi = std::min(1.0, (best + 1.0) / grid);
  for (int it = 0; it < 100; ++it) {  // golden-section refinement
    const double g = 0.5 * (std::sqrt(5.0) - 1.0);
    const double a = hi - g * (hi - lo), b = lo + g * (hi - lo);
    if (f(a) < f(b)) {
      hi = b;
    } else {
      lo = a;
    }
  }
  const double saddle = f(0.5 * (lo + hi));
  const Vec saddle_at = ridge(0.5 * (lo + hi));
  // The saddle is a real pass: below both means, and off the segment.
  ASSERT_LT(saddle, TwoGaussianLogPdf(m1, m1, s1, m2, s2) - 1.0);
  ASSERT_GT(std::abs(saddle_at.y()), c.min_offset) << saddle_at.transpose();

  NullRunContext ctx;
  NebOptions o;  // 100 points, lr 0.01, 1024 evaluation points
  o.path_steps = c.steps;
  o.keep_paths = true;
  auto paths = OptimizePaths(*mix, {{0, 1}}, o, ctx);
  ASSERT_TRUE(paths.ok()) << paths.status();
  const double neb = paths->similarity[0];
  // No path can beat the pass (mountain-pass bound), and NEB finds it.
  EXPECT_LE(neb, saddle + 1e-9);
  EXPECT_GT(neb, saddle - c.tolerance);

  // The straight segment (0 steps) crosses much lower ground.
  o.path_steps = 0;
  auto straight = OptimizePaths(*mix, {{0, 1}}, o, ctx);
  ASSERT_TRUE(straight.ok());
  EXPECT_LT(straight->similarity[0], saddle - 1.0);

  // The optimised path keeps its end points and passes by the saddle.
  const RowMatrixD& path = paths->paths[0];
  EXPECT_EQ(path.row(0), means.row(0));
  EXPECT_EQ(path.row(path.rows() - 1), means.row(1));
  double closest = kInf;
  for (int i = 0; i < path.rows(); ++i) {
    closest = std::min(closest, (path.row(i).transpose() - saddle_at).norm());
  }
  EXPECT_LT(closest, 0.1);
}

TEST(TnebNeb, MinimumDensityMatchesTheAnalyticSaddle) {
  // Two elongated, tilted Gaussians: the pass between them lies 1 unit off
  // the segment between the means. Paper defaults (200 steps).
  CheckSaddle({3.0, 20.0, 200, 2e-3, 0.9});
}

TEST(TnebNeb, FarOffSaddleNeedsMoreSteps) {
  // The pass is 2 units off the segment: 200 Adam steps of 0.01 do not
  // reach it, 800 do.
  CheckSaddle({2.0, 50.0, 800, 1e-4, 1.9});
}

TEST(TnebNeb, SeparatedComponentsAreLessSimilarThanTouchingOnes) {
  // Three Student-t (nu = 1) components on a line: A and B touch, C is far.
  RowMatrixD means(3, 2);
  means << 0, 0, 2.5, 0, 12, 0;
  std::vector<Eigen::MatrixXd> sc(3, Eigen::MatrixXd::Identity(2, 2));
  auto mix = StudentMixture::Create({1.0 / 3, 1.0 / 3, 1.0 / 3}, means, sc, {1, 1, 1});
  ASSERT_TRUE(mix.ok());
  NullRunContext ctx;
  NebOptions o;
  o.path_points = 40;
  o.path_steps = 50;
  auto p = OptimizePaths(*mix, {{0, 1}, {1, 2}, {0, 2}}, o, ctx);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_GT(p->similarity[0], p->similarity[1] + 1.0);
  // A -> C cannot be better than the weakest link of A -> B -> C.
  EXPECT_LE(p->similarity[2], std::min(p->similarity[0], p->similarity[1]) + 1e-6);
  // Between B and C the minimum lies in the gap, not at a mean.
  EXPECT_GT(p->argmin_position[1], 0.2);
  EXPECT_LT(p->argmin_position[1], 0.8);
}

TEST(TnebNeb, ResampleIsEquidistantAndKeepsEnds) {
  RowMatrixD path(3, 2);
  path << 0, 0, 1, 0, 1, 1;
  const RowMatrixD r = ResampleEquidistant(path, 5);
  RowMatrixD want(5, 2);
  want << 0, 0, 0.5, 0, 1, 0, 1, 0.5, 1, 1;
  EXPECT_LT((r - want).cwiseAbs().maxCoeff(), 1e-12) << r;
  const RowMatrixD same = ResampleEquidistant(RowMatrixD::Constant(4, 3, 2.0), 6);
  EXPECT_EQ(same, RowMatrixD::Constant(6, 3, 2.0));
  // Uneven input spacing comes out even.
  RowMatrixD uneven(4, 1);
  uneven << 0, 0.1, 0.2, 3;
  const RowMatrixD e = ResampleEquidistant(uneven, 4);
  EXPECT_NEAR(e(1, 0), 1.0, 1e-12);
  EXPECT_NEAR(e(2, 0), 2.0, 1e-12);
}

class CountingContext final : public RunContext {
 public:
  explicit CountingContext(int cancel_after) : cancel_after_(cancel_after) {}
  bool Cancelled() const override { return reports_ > cancel_after_; }
  void Report(double f, std::string_view) override {
    EXPECT_GE(f, last_);
    last_ = f;
    ++reports_;
  }
  int reports_ = 0;
  double last_ = 0.0;

 private:
  int cancel_after_;
};

TEST(TnebNeb, ReportsProgressAndCancels) {
  RowMatrixD means(2, 2);
  means << 0, 0, 3, 0;
  std::vector<Eigen::MatrixXd> sc(2, Eigen::MatrixXd::Identity(2, 2));
  auto mix = StudentMixture::Create({0.5, 0.5}, means, sc, {1, 1});
  ASSERT_TRUE(mix.ok());
  NebOptions o;
  o.path_steps = 30;
  CountingContext all(1 << 30);
  ASSERT_TRUE(OptimizePaths(*mix, {{0, 1}}, o, all).ok());
  EXPECT_EQ(all.last_, 1.0);
  EXPECT_GE(all.reports_, 30);
  CountingContext cancel(10);
  EXPECT_TRUE(absl::IsCancelled(OptimizePaths(*mix, {{0, 1}}, o, cancel).status()));
}

TEST(TnebNeb, RejectsBadArguments) {
  RowMatrixD means(2, 2);
  means << 0, 0, 3, 0;
  std::vector<Eigen::MatrixXd> sc(2, Eigen::MatrixXd::Identity(2, 2));
  auto mix = StudentMixture::Create({0.5, 0.5}, means, sc, {1, 1});
  ASSERT_TRUE(mix.ok());
  NullRunContext ctx;
  NebOptions o;
  EXPECT_THAT(std::string(OptimizePaths(*mix, {{0, 0}}, o, ctx).status().message()),
              HasSubstr("not two distinct components"));
  EXPECT_THAT(std::string(OptimizePaths(*mix, {{0, 2}}, o, ctx).status().message()),
              HasSubstr("not two distinct components"));
  o.path_points = 1;
  EXPECT_THAT(std::string(OptimizePaths(*mix, {{0, 1}}, o, ctx).status().message()),
              HasSubstr("path_points"));
  o.path_points = 10;
  o.learning_rate = 0;
  EXPECT_THAT(std::string(OptimizePaths(*mix, {{0, 1}}, o, ctx).status().message()),
              HasSubstr("learning_rate"));
  o.learning_rate = 0.01;
  o.path_steps = -1;
  EXPECT_THAT(std::string(OptimizePaths(*mix, {{0, 1}}, o, ctx).status().message()),
              HasSubstr("path_steps must be >= 0, got -1"));
  o.path_steps = 5;
  o.eval_points = 1;
  EXPECT_THAT(std::string(OptimizePaths(*mix, {{0, 1}}, o, ctx).status().message()),
              HasSubstr("eval_points must be >= 2"));
  o.eval_points = 2;
  EXPECT_TRUE(ValidateNebOptions(o).ok());
  EXPECT_TRUE(OptimizePaths(*mix, {{0, 1}}, o, ctx).ok());
}

}  // namespace
}  // namespace dendro
