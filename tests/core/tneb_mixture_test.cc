// Student-t mixture: density against SciPy, gradient against finite
// differences, EM recovery of sampled parameters, monotone likelihood,
// reproducibility, and input errors.
#include <atomic>
#include <cmath>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "Eigen/Cholesky"
#include "core/tneb/mixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/source_path.h"

namespace dendro {
namespace {

using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();

nlohmann::json ReadGolden(const std::string& name) {
  std::ifstream in(SourcePath("tests/golden/tneb/") + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

StudentMixture GoldenMixture(const nlohmann::json& g) {
  const int m = static_cast<int>(g["weights"].size());
  const int d = static_cast<int>(g["means"][0].size());
  RowMatrixD means(m, d);
  std::vector<Eigen::MatrixXd> scales(m, Eigen::MatrixXd(d, d));
  std::vector<double> dof;
  for (int k = 0; k < m; ++k) {
    for (int j = 0; j < d; ++j) means(k, j) = g["means"][k][j];
    for (int r = 0; r < d; ++r) {
      for (int c = 0; c < d; ++c) scales[k](r, c) = g["scales"][k][r][c];
    }
    dof.push_back(g["dof"][k].is_null() ? kInf : g["dof"][k].get<double>());
  }
  auto mix = StudentMixture::Create(g["weights"].get<std::vector<double>>(), means, scales, dof);
  EXPECT_TRUE(mix.ok()) << mix.status();
  return *std::move(mix);
}

TEST(TnebMixtureDensity, MatchesScipyLogPdf) {
  const nlohmann::json g = ReadGolden("mixture_density.json");
  const StudentMixture mix = GoldenMixture(g);
  const int n = static_cast<int>(g["points"].size());
  Eigen::MatrixXd pts(n, mix.dim());
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < mix.dim(); ++j) pts(i, j) = g["points"][i][j];
  }
  Eigen::MatrixXd comp;
  mix.ComponentLogProb(pts, &comp);
  const Eigen::VectorXd lp = mix.LogDensity(pts);
  for (int i = 0; i < n; ++i) {
    for (int k = 0; k < mix.num_components(); ++k) {
      EXPECT_NEAR(comp(i, k), g["component_log_prob"][i][k].get<double>(), 1e-10)
          << "point " << i << " component " << k;
    }
    EXPECT_NEAR(lp(i), g["log_density"][i].get<double>(), 1e-10) << "point " << i;
  }
}

TEST(TnebMixtureDensity, FarPointsDoNotUnderflow) {
  // Two Gaussian components; 1000 units away every density is exp(-5e5),
  // far below the smallest double, yet log p and the most likely component
  // stay exact.
  RowMatrixD mu(2, 2);
  mu << 0, 0, 10, 0;
  std::vector<Eigen::MatrixXd> sc(2, Eigen::MatrixXd::Identity(2, 2));
  auto mix = StudentMixture::Create({0.5, 0.5}, mu, sc, {kInf, kInf});
  ASSERT_TRUE(mix.ok());
  std::vector<float> far = {1000, 0, -1000, 0};
  Eigen::MatrixXd pts(2, 2);
  pts << 1000, 0, -1000, 0;
  const Eigen::VectorXd lp = mix->LogDensity(pts);
  // log p = log(0.5) - log(2 pi) - 990^2 / 2 + log(1 + exp(-(1000^2 - 990^2) / 2)).
  EXPECT_NEAR(lp(0), std::log(0.5) - std::log(2 * M_PI) - 990.0 * 990.0 / 2, 1e-6);
  EXPECT_NEAR(lp(1), std::log(0.5) - std::log(2 * M_PI) - 1000.0 * 1000.0 / 2, 1e-6);
  const std::vector<int32_t> a = mix->Assign(MatrixView(far.data(), 2, 2), FeatureTransform{});
  EXPECT_EQ(a, (std::vector<int32_t>{1, 0}));
}

TEST(TnebMixtureDensity, GradientMatchesFiniteDifferences) {
  const StudentMixture mix = GoldenMixture(ReadGolden("mixture_density.json"));
  std::mt19937_64 rng(5);
  std::normal_distribution<double> nd(0.0, 2.0);
  Eigen::MatrixXd pts(300, 3);  // more than one gradient block
  for (int i = 0; i < pts.rows(); ++i) {
    for (int j = 0; j < 3; ++j) pts(i, j) = nd(rng);
  }
  Eigen::VectorXd lp;
  Eigen::MatrixXd grad;
  mix.LogDensityAndGradient(pts, &lp, &grad, 2);
  const Eigen::VectorXd lp_ref = mix.LogDensity(pts);
  EXPECT_LT((lp - lp_ref).cwiseAbs().maxCoeff(), 1e-9);
  const double h = 1e-5;
  for (int i = 0; i < pts.rows(); i += 7) {
    for (int j = 0; j < 3; ++j) {
      Eigen::MatrixXd p = pts.row(i), q = pts.row(i);
      p(0, j) += h;
      q(0, j) -= h;
      const double fd = (mix.LogDensity(p)(0) - mix.LogDensity(q)(0)) / (2 * h);
      EXPECT_NEAR(grad(i, j), fd, 1e-6 * (1.0 + std::abs(fd))) << "point " << i << " dim " << j;
    }
  }
}

TEST(TnebMixtureDensity, CreateRejectsBadParameters) {
  RowMatrixD mu = RowMatrixD::Zero(2, 2);
  std::vector<Eigen::MatrixXd> sc(2, Eigen::MatrixXd::Identity(2, 2));
  EXPECT_THAT(std::string(StudentMixture::Create({0.5, 0.6}, mu, sc, {1, 1}).status().message()),
              HasSubstr("sum to"));
  EXPECT_THAT(std::string(StudentMixture::Create({0.5, 0.5}, mu, sc, {1, 0}).status().message()),
              HasSubstr("degrees of freedom"));
  std::vector<Eigen::MatrixXd> bad = sc;
  bad[1] << 1, 2, 2, 1;  // symmetric, indefinite
  EXPECT_THAT(std::string(StudentMixture::Create({0.5, 0.5}, mu, bad, {1, 1}).status().message()),
              HasSubstr("not positive definite"));
  bad[1] << 1, 0.5, 0.2, 1;
  EXPECT_THAT(std::string(StudentMixture::Create({0.5, 0.5}, mu, bad, {1, 1}).status().message()),
              HasSubstr("symmetric"));
}

TEST(TnebMixtureDensity, DigammaKnownValues) {
  const double euler = 0.57721566490153286;
  EXPECT_NEAR(Digamma(1.0), -euler, 1e-13);
  EXPECT_NEAR(Digamma(0.5), -euler - 2.0 * std::log(2.0), 1e-13);
  EXPECT_NEAR(Digamma(10.0), 2.2517525890667211, 1e-13);
  // Recurrence psi(x + 1) = psi(x) + 1/x.
  EXPECT_NEAR(Digamma(3.7), Digamma(2.7) + 1.0 / 2.7, 1e-13);
}

// Samples n points of a t mixture (dof = inf: Gaussian).
struct Sample {
  std::vector<float> x;
  std::vector<int> label;
};

Sample SampleMixture(const std::vector<double>& w, const RowMatrixD& mu,
                     const std::vector<Eigen::MatrixXd>& scale, double dof, int n, uint64_t seed) {
  const int d = static_cast<int>(mu.cols());
  std::mt19937_64 rng(seed);
  std::discrete_distribution<int> comp(w.begin(), w.end());
  std::normal_distribution<double> nd;
  std::chi_squared_distribution<double> chi(std::isinf(dof) ? 1.0 : dof);
  Sample s;
  for (int i = 0; i < n; ++i) {
    const int k = comp(rng);
    Eigen::VectorXd z(d);
    for (int j = 0; j < d; ++j) z(j) = nd(rng);
    const Eigen::MatrixXd l = scale[k].llt().matrixL();
    Eigen::VectorXd v = l * z;
    if (!std::isinf(dof)) v /= std::sqrt(chi(rng) / dof);
    for (int j = 0; j < d; ++j) s.x.push_back(static_cast<float>(mu(k, j) + v(j)));
    s.label.push_back(k);
  }
  return s;
}

struct TrueMixture {
  std::vector<double> w{0.5, 0.3, 0.2};
  RowMatrixD mu;
  std::vector<Eigen::MatrixXd> scale;
  TrueMixture() : mu(3, 3), scale(3, Eigen::MatrixXd(3, 3)) {
    mu << 0, 0, 0, 10, 0, 2, -3, 9, -2;
    scale[0] << 2.0, 0.6, 0.0, 0.6, 1.0, 0.3, 0.0, 0.3, 0.5;
    scale[1] << 1.0, -0.4, 0.2, -0.4, 1.5, 0.0, 0.2, 0.0, 0.8;
    scale[2] << 0.7, 0.0, 0.0, 0.0, 0.7, 0.5, 0.0, 0.5, 2.0;
  }
};

// Index of the fitted component whose mean is nearest to truth's mean k.
int Nearest(const StudentMixture& fit, const Eigen::RowVectorXd& mu) {
  int best = 0;
  for (int j = 1; j < fit.num_components(); ++j) {
    if ((fit.means().row(j) - mu).norm() < (fit.means().row(best) - mu).norm()) best = j;
  }
  return best;
}

TEST(TnebMixtureEm, RecoversSampledStudentMixture) {
  const TrueMixture t;
  const double nu = 3.0;
  const int n = 9000;
  const Sample s = SampleMixture(t.w, t.mu, t.scale, nu, n, 11);
  MatrixView x(s.x.data(), n, 3);
  MixtureOptions o;
  o.components = 3;
  o.dof = nu;
  o.ridge = 0.0;
  o.restarts = 4;
  o.tolerance = 1e-7;
  o.max_iterations = 500;
  o.seed = 3;
  NullRunContext ctx;
  auto fit = FitStudentMixture(x, FeatureTransform{}, o, ctx);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_TRUE(fit->converged);
  const StudentMixture& m = fit->mixture;
  std::vector<bool> used(3, false);
  for (int k = 0; k < 3; ++k) {
    const int j = Nearest(m, t.mu.row(k));
    ASSERT_FALSE(used[j]) << "two true components map to fitted component " << j;
    used[j] = true;
    EXPECT_NEAR(m.weights()[j], t.w[k], 0.02) << "component " << k;
    EXPECT_LT((m.means().row(j) - t.mu.row(k)).norm(), 0.1) << "component " << k;
    const double rel = (m.scale(j) - t.scale[k]).norm() / t.scale[k].norm();
    EXPECT_LT(rel, 0.08) << "component " << k << "\n" << m.scale(j);
    EXPECT_EQ(m.dof()[j], nu);
  }
}

// The safeguards of MixtureOptions: with init_min_rows the fit still finds
// the components; a scale prior worth far more rows than the data pulls
// every scale matrix onto S0 = data covariance / m^(2/d) (Gaussian
// components, so u = 1 and the weights are the rows).
TEST(TnebMixtureEm, InitMinRowsAndScalePrior) {
  const TrueMixture t;
  const int n = 3000;
  const Sample s = SampleMixture(t.w, t.mu, t.scale, 5.0, n, 21);
  MatrixView x(s.x.data(), n, 3);
  MixtureOptions o;
  o.components = 3;
  o.gaussian = true;
  o.ridge = 0.0;
  o.restarts = 2;
  o.max_iterations = 200;
  o.init_min_rows = 4;
  NullRunContext ctx;
  auto fit = FitStudentMixture(x, FeatureTransform{}, o, ctx);
  ASSERT_TRUE(fit.ok()) << fit.status();
  for (int k = 0; k < 3; ++k) {
    EXPECT_LT((fit->mixture.means().row(Nearest(fit->mixture, t.mu.row(k))) - t.mu.row(k)).norm(),
              0.3);
  }
  Eigen::MatrixXd xd(n, 3);
  for (int i = 0; i < n; ++i) {
    for (int c = 0; c < 3; ++c) xd(i, c) = s.x[3 * i + c];
  }
  const Eigen::MatrixXd centred = xd.rowwise() - xd.colwise().mean();
  const Eigen::MatrixXd s0 = (centred.transpose() * centred) / n / std::pow(3.0, 2.0 / 3.0);
  o.scale_prior_rows = 1e9;
  auto prior = FitStudentMixture(x, FeatureTransform{}, o, ctx);
  ASSERT_TRUE(prior.ok()) << prior.status();
  for (int k = 0; k < 3; ++k) {
    EXPECT_LT((prior->mixture.scale(k) - s0).norm() / s0.norm(), 1e-3) << prior->mixture.scale(k);
  }
  o.scale_prior_rows = -1.0;
  EXPECT_FALSE(FitStudentMixture(x, FeatureTransform{}, o, ctx).ok());
}

TEST(TnebMixtureEm, LearnsDegreesOfFreedom) {
  const TrueMixture t;
  const int n = 9000;
  const Sample s = SampleMixture(t.w, t.mu, t.scale, 4.0, n, 12);
  MatrixView x(s.x.data(), n, 3);
  MixtureOptions o;
  o.components = 3;
  o.dof = 1.0;  // start far from the truth
  o.learn_dof = true;
  o.ridge = 0.0;
  o.restarts = 2;
  o.tolerance = 1e-7;
  o.max_iterations = 500;
  NullRunContext ctx;
  auto fit = FitStudentMixture(x, FeatureTransform{}, o, ctx);
  ASSERT_TRUE(fit.ok()) << fit.status();
  for (int k = 0; k < 3; ++k) {
    const int j = Nearest(fit->mixture, t.mu.row(k));
    EXPECT_GT(fit->mixture.dof()[j], 2.8) << "component " << k;
    EXPECT_LT(fit->mixture.dof()[j], 6.0) << "component " << k;
  }
}

TEST(TnebMixtureEm, GaussianDataGiveLargeLearnedDof) {
  const TrueMixture t;
  const int n = 6000;
  const Sample s = SampleMixture(t.w, t.mu, t.scale, kInf, n, 13);
  MatrixView x(s.x.data(), n, 3);
  MixtureOptions o;
  o.components = 3;
  o.learn_dof = true;
  o.restarts = 2;
  o.tolerance = 1e-7;
  o.max_iterations = 500;
  NullRunContext ctx;
  auto fit = FitStudentMixture(x, FeatureTransform{}, o, ctx);
  ASSERT_TRUE(fit.ok()) << fit.status();
  for (double nu : fit->mixture.dof()) EXPECT_GT(nu, 30.0);
}

// With fixed nu and no ridge every EM step is a (parameter-expanded) EM
// step, so the mean log-likelihood never decreases. (Data with lighter tails
// than the fit: with ridge 0 an isolated outlier could otherwise seed a
// single-point component whose scale collapses, the classic degenerate
// maximum, where only the ridge escalation keeps EM going.)
TEST(TnebMixtureEm, LogLikelihoodNeverDecreases) {
  const TrueMixture t;
  const int n = 4000;
  const Sample s = SampleMixture(t.w, t.mu, t.scale, 8.0, n, 14);
  MatrixView x(s.x.data(), n, 3);
  for (bool gaussian : {false, true}) {
    for (int threads : {1, 2}) {
      MixtureOptions o;
      o.components = 6;  // mis-specified on purpose: a longer climb
      o.dof = 1.0;
      o.gaussian = gaussian;
      o.ridge = 0.0;
      o.restarts = 1;
      o.tolerance = 1e-12;
      o.max_iterations = 80;
      o.num_threads = threads;
      o.seed = 21;
      NullRunContext ctx;
      auto fit = FitStudentMixture(x, FeatureTransform{}, o, ctx);
      ASSERT_TRUE(fit.ok()) << fit.status();
      const auto& tr = fit->trace;
      ASSERT_GE(tr.size(), 20u);
      for (size_t i = 1; i < tr.size(); ++i) {
        EXPECT_GE(tr[i], tr[i - 1] - 1e-12 * (1.0 + std::abs(tr[i - 1])))
            << "iteration " << i << " gaussian " << gaussian << " threads " << threads;
      }
      EXPECT_GT(tr.back(), tr.front() + 0.01);
      EXPECT_EQ(fit->log_likelihood, tr.back());
    }
  }
}

// n rows of TrueMixture with nu = 2.
Sample TrueSample(int n, uint64_t seed) {
  const TrueMixture t;
  return SampleMixture(t.w, t.mu, t.scale, 2.0, n, seed);
}

MixtureOptions EmOptions(int components, int restarts, uint64_t seed) {
  MixtureOptions o;
  o.components = components;
  o.restarts = restarts;
  o.seed = seed;
  return o;
}

TEST(TnebMixtureEm, ReproducibleWithSeedAndIndependentOfThreads) {
  const int n = 3000;
  const Sample s = TrueSample(n, 15);
  MatrixView x(s.x.data(), n, 3);
  MixtureOptions o = EmOptions(5, 3, 99);
  NullRunContext ctx;
  o.num_threads = 2;
  auto a = FitStudentMixture(x, FeatureTransform{}, o, ctx);
  auto b = FitStudentMixture(x, FeatureTransform{}, o, ctx);
  o.num_threads = 1;
  auto c = FitStudentMixture(x, FeatureTransform{}, o, ctx);
  o.seed = 100;
  auto e = FitStudentMixture(x, FeatureTransform{}, o, ctx);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && e.ok());
  EXPECT_EQ(a->mixture.means(), b->mixture.means());
  EXPECT_EQ(a->trace, b->trace);
  EXPECT_EQ(a->mixture.means(), c->mixture.means());  // restarts >= 2: thread-independent
  EXPECT_EQ(a->best_restart, c->best_restart);
  EXPECT_NE(a->restart_log_likelihood, e->restart_log_likelihood);
}

// A warm start from a converged fit is already at a fixed point: one run
// from it converges at once to the same likelihood, and keeps its tails.
TEST(TnebMixtureEm, StartsFromAGivenMixture) {
  const int n = 3000;
  const Sample s = TrueSample(n, 17);
  MatrixView x(s.x.data(), n, 3);
  MixtureOptions o = EmOptions(3, 4, 5);
  o.tolerance = 1e-6;
  o.max_iterations = 500;
  NullRunContext ctx;
  auto cold = FitStudentMixture(x, FeatureTransform{}, o, ctx);
  ASSERT_TRUE(cold.ok()) << cold.status();
  ASSERT_TRUE(cold->converged);
  MixtureOptions warm = o;
  warm.restarts = 1;
  warm.dof = 7.0;  // replaced by the start's nu
  warm.start = &cold->mixture;
  auto again = FitStudentMixture(x, FeatureTransform{}, warm, ctx);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->converged);
  EXPECT_LE(again->iterations, 3);
  EXPECT_LT(again->iterations, cold->iterations);
  EXPECT_NEAR(again->log_likelihood, cold->log_likelihood, 1e-5);
  EXPECT_EQ(again->mixture.dof(), cold->mixture.dof());
  for (int k = 0; k < 3; ++k) {
    EXPECT_LT((again->mixture.means().row(k) - cold->mixture.means().row(k)).norm(), 1e-2);
  }
  // The start must match the fit's shape.
  warm.components = 4;
  EXPECT_THAT(FitStudentMixture(x, FeatureTransform{}, warm, ctx).status().message(),
              HasSubstr("the starting mixture has 3 components of dimension 3"));
}

TEST(TnebMixtureEm, KeepsBestConvergedRestart) {
  const TrueMixture t;
  const int n = 3000;
  const Sample s = SampleMixture(t.w, t.mu, t.scale, 2.0, n, 16);
  MatrixView x(s.x.data(), n, 3);
  MixtureOptions o;
  o.components = 8;
  o.restarts = 6;
  o.max_iterations = 12;  // some restarts stop before converging
  o.seed = 5;
  NullRunContext ctx;
  auto fit = FitStudentMixture(x, FeatureTransform{}, o, ctx);
  ASSERT_TRUE(fit.ok()) << fit.status();
  int converged = 0;
  for (int r = 0; r < o.restarts; ++r) {
    if (fit->restart_converged[r]) {
      ++converged;
      EXPECT_LE(fit->restart_log_likelihood[r], fit->log_likelihood);
    }
  }
  EXPECT_EQ(converged, fit->converged_restarts);
  if (converged > 0) {
    EXPECT_TRUE(fit->converged);
    EXPECT_TRUE(fit->restart_converged[fit->best_restart]);
  } else {
    EXPECT_FALSE(fit->converged);
  }
}

TEST(TnebMixtureEm, RestartScoreRanksTheRestarts) {
  const int n = 2000;
  const Sample s = TrueSample(n, 17);
  MatrixView x(s.x.data(), n, 3);
  MixtureOptions o = EmOptions(6, 5, 3);
  NullRunContext ctx;
  auto by_ll = FitStudentMixture(x, FeatureTransform{}, o, ctx);
  ASSERT_TRUE(by_ll.ok()) << by_ll.status();
  EXPECT_TRUE(by_ll->restart_score.empty());
  // Ranking by the lowest log-likelihood must keep another restart, with the
  // same per-restart fits.
  const Eigen::MatrixXd xd =
      Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
          s.x.data(), n, 3)
          .cast<double>();
  int calls = 0;
  o.restart_score = [&](const StudentMixture& m) -> absl::StatusOr<double> {
    ++calls;
    EXPECT_EQ(m.num_components(), 6);
    double w = 0.0;
    for (double v : m.weights()) w += v;
    EXPECT_NEAR(w, 1.0, 1e-12);
    return -m.LogDensity(xd).sum() / n;
  };
  auto by_score = FitStudentMixture(x, FeatureTransform{}, o, ctx);
  ASSERT_TRUE(by_score.ok()) << by_score.status();
  EXPECT_EQ(calls, o.restarts - by_score->failed_restarts);
  EXPECT_EQ(by_score->restart_log_likelihood, by_ll->restart_log_likelihood);
  ASSERT_EQ(by_score->restart_score.size(), static_cast<size_t>(o.restarts));
  for (int r = 0; r < o.restarts; ++r) {
    if (std::isnan(by_score->restart_log_likelihood[r])) continue;
    EXPECT_NEAR(by_score->restart_score[r], -by_score->restart_log_likelihood[r], 1e-9);
    if (by_score->restart_converged[r]) {
      EXPECT_GE(by_score->restart_log_likelihood[r], by_score->log_likelihood);
    }
  }
  ASSERT_NE(by_ll->log_likelihood, by_score->log_likelihood)
      << "the draw needs restarts that end at different likelihoods";
  EXPECT_NE(by_ll->best_restart, by_score->best_restart);

  o.restart_score = [](const StudentMixture&) -> absl::StatusOr<double> {
    return absl::FailedPreconditionError("no score");
  };
  auto failed = FitStudentMixture(x, FeatureTransform{}, o, ctx);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(failed.status().message(), "no score");
}

TEST(TnebMixtureEm, SingularDataAreHandledByTheRidge) {
  // All points on a line in 3-D: every scale matrix is singular without the
  // ridge. With the ridge EM must finish without failing.
  std::vector<float> x;
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(-5, 5);
  for (int i = 0; i < 500; ++i) {
    const double t = u(rng);
    x.insert(x.end(), {static_cast<float>(t), static_cast<float>(2 * t), static_cast<float>(-t)});
  }
  MatrixView xv(x.data(), 500, 3);
  MixtureOptions o;
  o.components = 4;
  o.restarts = 2;
  NullRunContext ctx;
  auto fit = FitStudentMixture(xv, FeatureTransform{}, o, ctx);
  ASSERT_TRUE(fit.ok()) << fit.status();
  for (int k = 0; k < 4; ++k) {
    EXPECT_TRUE(fit->mixture.scale(k).allFinite());
  }
}

TEST(TnebMixtureEm, RejectsBadOptions) {
  std::vector<float> x(40, 0.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7);
  MatrixView xv(x.data(), 20, 2);
  NullRunContext ctx;
  MixtureOptions o;
  o.components = 25;
  EXPECT_THAT(std::string(FitStudentMixture(xv, {}, o, ctx).status().message()),
              HasSubstr("20 rows but 25 mixture components"));
  o.components = 2;
  o.dof = 0.0;
  EXPECT_THAT(std::string(FitStudentMixture(xv, {}, o, ctx).status().message()),
              HasSubstr("degrees of freedom"));
  o.dof = 1.0;
  o.ridge = -1;
  EXPECT_THAT(std::string(FitStudentMixture(xv, {}, o, ctx).status().message()),
              HasSubstr("ridge"));
  o.ridge = 1e-4;
  o.tolerance = 0;
  EXPECT_THAT(std::string(FitStudentMixture(xv, {}, o, ctx).status().message()),
              HasSubstr("tolerance"));
}

class CancelAfter final : public RunContext {
 public:
  explicit CancelAfter(int checks) : left_(checks) {}
  bool Cancelled() const override { return --left_ < 0; }
  void Report(double, std::string_view) override {}

 private:
  mutable std::atomic<int> left_;
};

TEST(TnebMixtureEm, Cancels) {
  const TrueMixture t;
  const Sample s = SampleMixture(t.w, t.mu, t.scale, 2.0, 3000, 17);
  MatrixView x(s.x.data(), 3000, 3);
  MixtureOptions o;
  o.components = 5;
  o.restarts = 4;
  CancelAfter ctx(20);
  EXPECT_TRUE(absl::IsCancelled(FitStudentMixture(x, {}, o, ctx).status()));
}

TEST(TnebMixtureEm, StandardizationOfColumns) {
  std::vector<float> x = {1, 10, 2, 10, 3, 40, 6, 20};
  MatrixView xv(x.data(), 4, 2);
  auto t = StandardizationOf(xv);
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ(t->center[0], 3.0);
  EXPECT_DOUBLE_EQ(t->center[1], 20.0);
  EXPECT_NEAR(t->scale[0], std::sqrt((4 + 1 + 0 + 9) / 4.0), 1e-12);
  EXPECT_NEAR(t->scale[1], std::sqrt((100 + 100 + 400 + 0) / 4.0), 1e-12);
  Eigen::MatrixXd rows(2, 2);
  LoadRows(xv, *t, 2, &rows);
  EXPECT_NEAR(rows(0, 0), 0.0, 1e-12);
  EXPECT_NEAR(rows(1, 1), 0.0, 1e-12);
  EXPECT_NEAR(rows(0, 1), 20.0 / t->scale[1], 1e-12);
  std::vector<float> c = {1, 5, 2, 5, 3, 5};
  EXPECT_THAT(std::string(StandardizationOf(MatrixView(c.data(), 3, 2)).status().message()),
              HasSubstr("column 1 is constant"));
}

}  // namespace
}  // namespace dendro
