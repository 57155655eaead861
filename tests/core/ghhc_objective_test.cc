// gHHC's batched objectives against a scalar transcription of eqs. 12-15
// built on the reference geometry (poincare.h), and their analytic gradients
// against finite differences of that transcription; eq. 4 parent selection
// and point placement against brute force.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/ghhc/objective.h"
#include "core/ghhc/poincare.h"
#include "gtest/gtest.h"

namespace dendro::ghhc {
namespace {

RowMat<double> RandomRows(std::mt19937_64& rng, int n, int d, double lo, double hi) {
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> unif(lo, hi);
  RowMat<double> m(n, d);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < d; ++j) m(i, j) = normal(rng);
    m.row(i) *= unif(rng) / m.row(i).norm();
  }
  return m;
}

RowMat<double> Gumbel(std::mt19937_64& rng, int b, int m) {
  std::uniform_real_distribution<double> u(1e-12, 1.0);
  RowMat<double> g(b, 2 * m);
  for (int i = 0; i < g.size(); ++i) g.data()[i] = -std::log(-std::log(u(rng)));
  return g;
}

// Eq. 15 for one batch, written out per node with the scalar geometry.
double ReferenceLoss(const RowMat<double>& pts, const RowMat<double>& nodes,
                     const RowMat<double>& noise, Link link) {
  const int m = static_cast<int>(nodes.rows());
  auto s = [link](double y) {
    return link == Link::kSigmoid ? 1.0 / (1.0 + std::exp(-y)) : std::log1p(std::exp(y));
  };
  double total = 0;
  for (int t = 0; t < pts.rows() / 3; ++t) {
    std::vector<double> a(m), b(m), c(m), p(m), q(m);
    for (int n = 0; n < m; ++n) {
      a[n] = ChildParentDissimilarity(pts.row(3 * t).transpose(), nodes.row(n).transpose());
      b[n] = ChildParentDissimilarity(pts.row(3 * t + 1).transpose(), nodes.row(n).transpose());
      c[n] = ChildParentDissimilarity(pts.row(3 * t + 2).transpose(), nodes.row(n).transpose());
    }
    // Eq. 12 with noise, its argmax, eq. 13-14 without it.
    int best = 0;
    double z = 0;
    for (int n = 0; n < m; ++n) {
      p[n] = -std::max(a[n], b[n]) + (noise.rows() ? noise(t, n) : 0.0);
      if (p[n] > p[best]) best = n;
    }
    for (int n = 0; n < m; ++n) z += std::exp(p[n]);
    for (int n = 0; n < m; ++n) p[n] = std::exp(p[n]) / z;
    z = 0;
    for (int n = 0; n < m; ++n) {
      q[n] = n == best
                 ? 0.0
                 : std::exp(-std::max({a[n], b[n], c[n]}) + (noise.rows() ? noise(t, m + n) : 0.0));
      z += q[n];
    }
    for (int n = 0; n < m; ++n) {
      q[n] /= z;
      total += s(a[n] * (p[n] - q[n])) + s(b[n] * (p[n] - q[n])) + s(c[n] * (q[n] - p[n]));
    }
  }
  return total;
}

struct Case {
  double point_lo, point_hi;  // norm range of the data points
  bool noise;
  Link link;
};

class TripleObjectiveTest : public ::testing::TestWithParam<Case> {};

TEST_P(TripleObjectiveTest, LossAndGradientMatchTheTranscription) {
  const Case c = GetParam();
  std::mt19937_64 rng(11);
  const int b = 4, m = 7, d = 5;
  for (int trial = 0; trial < 5; ++trial) {
    const RowMat<double> pts = RandomRows(rng, 3 * b, d, c.point_lo, c.point_hi);
    const RowMat<double> nodes = RandomRows(rng, m, d, 0.05, 0.8);
    const RowMat<double> noise = c.noise ? Gumbel(rng, b, m) : RowMat<double>(0, 2 * m);
    TripleWorkspace<double> ws;
    RowMat<double> grad = RowMat<double>::Zero(m, d);
    const double loss = TripleObjective<double>(pts, nodes, noise, c.link, &grad, &ws);
    const double ref = ReferenceLoss(pts, nodes, noise, c.link);
    EXPECT_NEAR(loss, ref, 1e-9 * std::abs(ref));
    // Finite differences of the transcription.
    const double h = 1e-6;
    for (int n = 0; n < m; ++n) {
      for (int j = 0; j < d; ++j) {
        RowMat<double> up = nodes, dn = nodes;
        up(n, j) += h;
        dn(n, j) -= h;
        const double fd =
            (ReferenceLoss(pts, up, noise, c.link) - ReferenceLoss(pts, dn, noise, c.link)) /
            (2 * h);
        EXPECT_NEAR(grad(n, j), fd, 1e-5 * (1 + std::abs(fd)))
            << "trial " << trial << " node " << n << " coord " << j;
      }
    }
    // Gradient with respect to the points (learned point embeddings), which
    // also leaves the node gradient unchanged.
    RowMat<double> node_grad = RowMat<double>::Zero(m, d), pgrad(1, 1);
    TripleObjective<double>(pts, nodes, noise, c.link, &node_grad, &ws, &pgrad);
    EXPECT_LT((node_grad - grad).norm(), 1e-12 * (1 + grad.norm()));
    ASSERT_EQ(pgrad.rows(), 3 * b);
    ASSERT_EQ(pgrad.cols(), d);
    for (int q = 0; q < 3 * b; ++q) {
      for (int j = 0; j < d; ++j) {
        RowMat<double> up = pts, dn = pts;
        up(q, j) += h;
        dn(q, j) -= h;
        const double fd =
            (ReferenceLoss(up, nodes, noise, c.link) - ReferenceLoss(dn, nodes, noise, c.link)) /
            (2 * h);
        EXPECT_NEAR(pgrad(q, j), fd, 1e-5 * (1 + std::abs(fd)))
            << "trial " << trial << " point row " << q << " coord " << j;
      }
    }
    RowMat<double> pgrad_only(1, 1);
    TripleObjective<double>(pts, nodes, noise, c.link, nullptr, &ws, &pgrad_only);
    EXPECT_LT((pgrad_only - pgrad).norm(), 1e-12 * (1 + pgrad.norm()));
    // The gradient accumulates.
    RowMat<double> twice = grad;
    TripleObjective<double>(pts, nodes, noise, c.link, &twice, &ws);
    EXPECT_LT((twice - 2 * grad).norm(), 1e-12 * (1 + grad.norm()));
    // float32 kernel agrees.
    TripleWorkspace<float> wsf;
    RowMat<float> gradf = RowMat<float>::Zero(m, d);
    const RowMat<float> nf = noise.cast<float>();
    const double lossf =
        TripleObjective<float>(pts.cast<float>(), nodes.cast<float>(), nf, c.link, &gradf, &wsf);
    EXPECT_NEAR(lossf, loss, 1e-4 * std::abs(loss));
    EXPECT_LT((gradf.cast<double>() - grad).norm(), 2e-3 * (1 + grad.norm()));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TripleObjectiveTest,
    ::testing::Values(Case{0.9, 0.9, true, Link::kSigmoid},  // gHHC's setting
                      Case{0.9, 0.9, false, Link::kSigmoid}, Case{0.9, 0.9, true, Link::kSoftplus},
                      // points inside the nodes' radius: the norm penalty of eq. 3 is active
                      Case{0.1, 0.7, true, Link::kSigmoid},
                      Case{0.1, 0.7, false, Link::kSoftplus}));

TEST(TripleObjectiveTest, NoGradientRequested) {
  std::mt19937_64 rng(12);
  const RowMat<double> pts = RandomRows(rng, 6, 3, 0.9, 0.9);
  const RowMat<double> nodes = RandomRows(rng, 4, 3, 0.1, 0.8);
  TripleWorkspace<double> ws;
  const double loss =
      TripleObjective<double>(pts, nodes, RowMat<double>(0, 8), Link::kSigmoid, nullptr, &ws);
  EXPECT_NEAR(loss, ReferenceLoss(pts, nodes, RowMat<double>(0, 8), Link::kSigmoid), 1e-9);
}

TEST(MarginObjectiveTest, ValueAndGradient) {
  std::mt19937_64 rng(13);
  const int m = 9, d = 4;
  RowMat<double> nodes = RandomRows(rng, m, d, 0.05, 0.8);
  const std::vector<int32_t> parent = NodeParents(nodes);
  for (double margin : {0.0, 0.25, 1.5}) {
    RowMat<double> grad = RowMat<double>::Zero(m, d);
    const double v = MarginObjective(nodes, parent, margin, &grad);
    double ref = 0;
    for (int c = 0; c < m; ++c) {
      if (parent[c] >= 0) {
        ref += ChildParentDissimilarity(nodes.row(c).transpose(), nodes.row(parent[c]).transpose(),
                                        margin);
      }
    }
    EXPECT_NEAR(v, ref, 1e-12 * (1 + ref));
    const double h = 1e-6;
    for (int n = 0; n < m; ++n) {
      for (int j = 0; j < d; ++j) {
        RowMat<double> up = nodes, dn = nodes;
        up(n, j) += h;
        dn(n, j) -= h;
        const double fd = (MarginObjective(up, parent, margin, nullptr) -
                           MarginObjective(dn, parent, margin, nullptr)) /
                          (2 * h);
        EXPECT_NEAR(grad(n, j), fd, 1e-5 * (1 + std::abs(fd)));
      }
    }
  }
}

TEST(NodeParentsTest, MatchesBruteForceAndOrdersNorms) {
  std::mt19937_64 rng(14);
  for (int trial = 0; trial < 20; ++trial) {
    const int m = 3 + trial * 17;
    RowMat<double> nodes = RandomRows(rng, m, 6, 0.0, 0.8);
    // Ties in norm: copy some norms exactly (clipped nodes share 0.8).
    for (int n = 0; n < m; n += 3) nodes.row(n) *= 0.8 / nodes.row(n).norm();
    const std::vector<int32_t> parent = NodeParents(nodes, 2);
    const std::vector<int32_t> parent_f = NodeParents(nodes, 2, /*float_products=*/true);
    int roots = 0;
    for (int c = 0; c < m; ++c) {
      const double nc = nodes.row(c).squaredNorm();
      double best = std::numeric_limits<double>::infinity();
      int arg = -1;
      for (int p = 0; p < m; ++p) {
        const double np = nodes.row(p).squaredNorm();
        if (!(np < nc || (np == nc && p < c))) continue;
        const double v =
            ChildParentDissimilarity(nodes.row(c).transpose(), nodes.row(p).transpose());
        if (v < best - 1e-12) {
          best = v;
          arg = p;
        }
      }
      EXPECT_EQ(parent[c], arg) << "trial " << trial << " node " << c;
      // float32 products: the same choice unless near-tied.
      if (arg >= 0) {
        const int32_t pf = parent_f[c];
        ASSERT_GE(pf, 0);
        EXPECT_NEAR(ChildParentDissimilarity(nodes.row(c).transpose(), nodes.row(pf).transpose()),
                    best, 1e-3 * (1 + best));
      } else {
        EXPECT_EQ(parent_f[c], -1);
      }
      if (parent[c] < 0) {
        ++roots;
      } else {
        EXPECT_LE(nodes.row(parent[c]).norm(), nodes.row(c).norm());
      }
    }
    EXPECT_EQ(roots, 1);
  }
}

TEST(NearestNodesTest, MatchesBruteForcePoincareArgmin) {
  std::mt19937_64 rng(15);
  const RowMat<double> pts = RandomRows(rng, 700, 8, 0.9, 0.9);
  const RowMat<double> nodes = RandomRows(rng, 37, 8, 0.0, 0.8);
  std::vector<uint8_t> allowed(37);
  for (int n = 0; n < 37; ++n) allowed[n] = n % 3 != 0;
  for (bool masked : {false, true}) {
    std::vector<int32_t> got(700);
    NearestNodes(pts.cast<float>(), nodes.cast<float>(),
                 masked ? absl::Span<const uint8_t>(allowed) : absl::Span<const uint8_t>(),
                 got.data());
    for (int i = 0; i < 700; ++i) {
      double best = std::numeric_limits<double>::infinity(), second = best;
      int arg = -1;
      for (int n = 0; n < 37; ++n) {
        if (masked && !allowed[n]) continue;
        const double v = PoincareDistance(pts.row(i).transpose(), nodes.row(n).transpose());
        if (v < best) {
          second = best;
          best = v;
          arg = n;
        } else if (v < second) {
          second = v;
        }
      }
      if (second - best > 1e-4) {
        EXPECT_EQ(got[i], arg) << "point " << i;
      }
    }
  }
}

}  // namespace
}  // namespace dendro::ghhc
