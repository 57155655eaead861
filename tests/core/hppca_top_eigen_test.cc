// TopEigenpairs (the largest eigenpairs through tridiagonal inverse
// iteration) against Eigen's full symmetric eigensolver.
#include "core/hppca/top_eigen.h"

#include <cmath>
#include <random>

#include "Eigen/Eigenvalues"
#include "Eigen/QR"
#include "gtest/gtest.h"

namespace dendro {
namespace {

using Eigen::MatrixXd;
using Eigen::VectorXd;

// Q diag(spectrum) Q^T with a random orthogonal Q.
MatrixXd WithSpectrum(const VectorXd& spectrum, std::mt19937_64& rng) {
  const int64_t n = spectrum.size();
  std::normal_distribution<double> g(0.0, 1.0);
  const MatrixXd x = MatrixXd::NullaryExpr(n, n, [&](Eigen::Index, Eigen::Index) { return g(rng); });
  const MatrixXd q = Eigen::HouseholderQR<MatrixXd>(x).householderQ();
  return q * spectrum.asDiagonal() * q.transpose();
}

// Eigenvalues equal to the full solver's, vectors orthonormal with small
// residuals |A v - lambda v|.
void ExpectTopPairs(const MatrixXd& a, int64_t r) {
  const int64_t n = a.rows();
  Eigen::SelfAdjointEigenSolver<MatrixXd> full(a);
  VectorXd values;
  MatrixXd vectors;
  TopEigenpairs(a, r, &values, &vectors);
  ASSERT_EQ(values.size(), r);
  ASSERT_EQ(vectors.rows(), n);
  ASSERT_EQ(vectors.cols(), r);
  const double scale = full.eigenvalues().cwiseAbs().maxCoeff();
  for (int64_t l = 0; l < r; ++l) {
    EXPECT_NEAR(values[l], full.eigenvalues()[n - 1 - l], 1e-10 * scale) << "l=" << l;
    const VectorXd res = a * vectors.col(l) - values[l] * vectors.col(l);
    EXPECT_LT(res.norm(), 1e-8 * scale) << "l=" << l;
  }
  const MatrixXd gram = vectors.transpose() * vectors;
  EXPECT_LT((gram - MatrixXd::Identity(r, r)).cwiseAbs().maxCoeff(), 1e-8);
}

TEST(TopEigenTest, DistinctSpectrumMatchesFullSolver) {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(0.0, 10.0);
  const VectorXd spectrum = VectorXd::NullaryExpr(120, [&](Eigen::Index) { return u(rng); });
  const MatrixXd a = WithSpectrum(spectrum, rng);
  ExpectTopPairs(a, 1);
  ExpectTopPairs(a, 15);
  ExpectTopPairs(a, 120);
}

TEST(TopEigenTest, RepeatedAndClusteredEigenvaluesGiveOrthonormalVectors) {
  std::mt19937_64 rng(2);
  VectorXd spectrum = VectorXd::Constant(80, 0.5);
  spectrum.head(6).setConstant(7.0);                           // exactly repeated, on top
  for (int i = 6; i < 12; ++i) spectrum[i] = 5.0 + 1e-9 * i;   // a tight cluster
  for (int i = 12; i < 20; ++i) spectrum[i] = 3.0 - 0.1 * i;
  const MatrixXd a = WithSpectrum(spectrum, rng);
  ExpectTopPairs(a, 12);
  ExpectTopPairs(a, 30);  // reaches into the 60-fold eigenvalue 0.5
}

TEST(TopEigenTest, ReadsOnlyTheLowerTriangleAndIsDeterministic) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  const VectorXd spectrum = VectorXd::NullaryExpr(50, [&](Eigen::Index) { return u(rng); });
  const MatrixXd a = WithSpectrum(spectrum, rng);
  MatrixXd lower = a;
  lower.triangularView<Eigen::StrictlyUpper>().setConstant(1e6);
  VectorXd v1, v2;
  MatrixXd x1, x2;
  TopEigenpairs(a, 10, &v1, &x1);
  TopEigenpairs(lower, 10, &v2, &x2);
  EXPECT_EQ(v1, v2);
  EXPECT_EQ(x1, x2);
  ExpectTopPairs(a, 10);  // with negative eigenvalues too
}

TEST(TopEigenTest, EdgeSizes) {
  VectorXd values;
  MatrixXd vectors;
  TopEigenpairs(MatrixXd::Constant(1, 1, 3.0), 1, &values, &vectors);
  EXPECT_EQ(values[0], 3.0);
  EXPECT_EQ(std::fabs(vectors(0, 0)), 1.0);
  TopEigenpairs(MatrixXd::Identity(4, 4), 0, &values, &vectors);
  EXPECT_EQ(values.size(), 0);
  EXPECT_EQ(vectors.cols(), 0);
  ExpectTopPairs(MatrixXd::Identity(5, 5) * 2.0, 3);  // T already diagonal
}

TEST(TopEigenTest, LargestEigenpairsAgreesOnBothRoutes) {
  std::mt19937_64 rng(4);
  std::uniform_real_distribution<double> u(0.0, 5.0);
  const VectorXd spectrum = VectorXd::NullaryExpr(40, [&](Eigen::Index) { return u(rng); });
  const MatrixXd a = WithSpectrum(spectrum, rng);
  Eigen::SelfAdjointEigenSolver<MatrixXd> full(a);
  for (int64_t r : {1, 10, 11, 40}) {  // 4 r <= 40: inverse iteration; above: full solver
    VectorXd values;
    MatrixXd vectors;
    LargestEigenpairs(a, r, &values, &vectors);
    ASSERT_EQ(values.size(), r);
    ASSERT_EQ(vectors.cols(), r);
    for (int64_t l = 0; l < r; ++l) {
      EXPECT_NEAR(values[l], full.eigenvalues()[39 - l], 1e-10) << "r=" << r << " l=" << l;
      EXPECT_NEAR(std::fabs(vectors.col(l).dot(full.eigenvectors().col(39 - l))), 1.0, 1e-8);
    }
  }
}

}  // namespace
}  // namespace dendro
