// Merge tree: maximum-spanning-tree merges against a brute-force maximin
// (best bottleneck path) over all simple paths; neighbour pairs against a
// brute-force k-NN; bridging; threshold jumps.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/tneb/graph.h"
#include "core/tneb/merge.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dendro {
namespace {

using ::testing::HasSubstr;

// max over all simple paths a -> b of the minimum edge similarity, by
// exhaustive depth-first enumeration.
double BruteMaximin(int n, const std::vector<SimilarityEdge>& edges, int a, int b) {
  std::vector<std::vector<std::pair<int, double>>> adj(n);
  for (const auto& e : edges) {
    adj[e.a].push_back({e.b, e.similarity});
    adj[e.b].push_back({e.a, e.similarity});
  }
  double best = -std::numeric_limits<double>::infinity();
  std::vector<bool> on(n, false);
  std::function<void(int, double)> dfs = [&](int v, double bottleneck) {
    if (v == b) {
      best = std::max(best, bottleneck);
      return;
    }
    on[v] = true;
    for (const auto& [w, s] : adj[v]) {
      if (!on[w]) dfs(w, std::min(bottleneck, s));
    }
    on[v] = false;
  };
  dfs(a, std::numeric_limits<double>::infinity());
  return best;
}

std::vector<SimilarityEdge> RandomConnectedGraph(int n, std::mt19937_64* rng, bool ties) {
  std::uniform_real_distribution<double> u(-20.0, 5.0);
  std::uniform_int_distribution<int> coarse(-4, 1);
  auto sim = [&]() { return ties ? static_cast<double>(coarse(*rng)) : u(*rng); };
  std::set<std::pair<int, int>> seen;
  std::vector<SimilarityEdge> edges;
  for (int v = 1; v < n; ++v) {  // random spanning tree
    const int w = std::uniform_int_distribution<int>(0, v - 1)(*rng);
    seen.insert({w, v});
    edges.push_back({w, v, sim()});
  }
  const int extra = std::uniform_int_distribution<int>(0, n * (n - 1) / 2)(*rng);
  for (int i = 0; i < extra; ++i) {
    int a = std::uniform_int_distribution<int>(0, n - 1)(*rng);
    int b = std::uniform_int_distribution<int>(0, n - 1)(*rng);
    if (a == b) continue;
    if (b < a) std::swap(a, b);
    if (!seen.insert({a, b}).second) continue;
    edges.push_back({b, a, sim()});  // either orientation is accepted
  }
  return edges;
}

TEST(TnebMerge, MergesEqualBruteForceMaximin) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = std::uniform_int_distribution<int>(2, 8)(rng);
    const bool ties = trial % 3 == 0;
    const std::vector<SimilarityEdge> edges = RandomConnectedGraph(n, &rng, ties);
    const double offset = 10.0;
    auto mt = MaximumSpanningMerges(n, edges, offset);
    ASSERT_TRUE(mt.ok()) << mt.status();
    ASSERT_EQ(static_cast<int>(mt->merges.size()), n - 1);
    for (size_t t = 1; t < mt->similarity.size(); ++t) {
      EXPECT_LE(mt->similarity[t], mt->similarity[t - 1]);
    }
    auto h = Hierarchy::FromMerges(n, mt->merges);
    ASSERT_TRUE(h.ok()) << h.status();
    for (int a = 0; a < n; ++a) {
      for (int b = a + 1; b < n; ++b) {
        const int32_t lca = h->Lca(a, b);
        ASSERT_GE(lca, n);
        const double at_lca = mt->similarity[lca - n];
        EXPECT_EQ(at_lca, BruteMaximin(n, edges, a, b))
            << "trial " << trial << " pair " << a << "," << b;
        EXPECT_DOUBLE_EQ(h->height(lca), offset - at_lca);
      }
    }
    // Thresholds: cutting at the threshold for k leaves k clusters, whose
    // members are exactly the maximin-connected groups.
    const std::vector<double> thr = ThresholdsByK(mt->similarity);
    for (int k = 1; k < n; ++k) {
      auto cut = h->CutToK(k);
      ASSERT_TRUE(cut.ok());
      for (int a = 0; a < n; ++a) {
        for (int b = a + 1; b < n; ++b) {
          const bool together = BruteMaximin(n, edges, a, b) >= thr[k];
          // With tied similarities the threshold can also admit the next
          // merge, so only one direction holds then.
          if (!ties) {
            EXPECT_EQ((*cut)[a] == (*cut)[b], together) << "k " << k;
          }
          if ((*cut)[a] == (*cut)[b]) {
            EXPECT_TRUE(together) << "k " << k;
          }
        }
      }
    }
  }
}

TEST(TnebMerge, RejectsBadGraphs) {
  EXPECT_THAT(std::string(MaximumSpanningMerges(3, {{0, 1, -1.0}}, 0.0).status().message()),
              HasSubstr("disconnected"));
  EXPECT_THAT(std::string(MaximumSpanningMerges(3, {{0, 3, -1.0}}, 0.0).status().message()),
              HasSubstr("not two distinct nodes"));
  EXPECT_THAT(std::string(MaximumSpanningMerges(2, {{1, 1, -1.0}}, 0.0).status().message()),
              HasSubstr("not two distinct nodes"));
  EXPECT_THAT(
      std::string(MaximumSpanningMerges(2, {{0, 1, std::numeric_limits<double>::quiet_NaN()}}, 0.0)
                      .status()
                      .message()),
      HasSubstr("similarity"));
  EXPECT_THAT(std::string(MaximumSpanningMerges(2, {{0, 1, 3.0}}, 1.0).status().message()),
              HasSubstr("height offset"));
  auto single = MaximumSpanningMerges(1, {}, 0.0);
  ASSERT_TRUE(single.ok());
  EXPECT_TRUE(single->merges.empty());
}

TEST(TnebMerge, NearestPairsMatchBruteForce) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> nd;
  for (int trial = 0; trial < 50; ++trial) {
    const int m = std::uniform_int_distribution<int>(2, 15)(rng);
    const int k = std::uniform_int_distribution<int>(1, 12)(rng);
    RowMatrixD means(m, 4);
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < 4; ++j) means(i, j) = nd(rng);
    }
    std::set<std::pair<int, int>> want;
    for (int a = 0; a < m; ++a) {
      std::vector<std::pair<double, int>> d;
      for (int b = 0; b < m; ++b) {
        if (b != a) d.push_back({(means.row(a) - means.row(b)).squaredNorm(), b});
      }
      std::sort(d.begin(), d.end());
      for (int i = 0; i < std::min<int>(k, m - 1); ++i) {
        want.insert({std::min(a, d[i].second), std::max(a, d[i].second)});
      }
    }
    const std::vector<ComponentPair> got = NearestComponentPairs(means, k);
    const std::set<std::pair<int, int>> got_set(got.begin(), got.end());
    EXPECT_EQ(got_set, want);
    EXPECT_TRUE(std::is_sorted(got.begin(), got.end()));
    EXPECT_EQ(got.size(), want.size());  // no duplicates
  }
}

TEST(TnebMerge, BridgesDisconnectedGroups) {
  // Two tight groups of 3 far apart on a line, plus a lone far point: with
  // k = 2 the neighbour graph has 3 groups.
  RowMatrixD means(7, 1);
  means << 0, 1, 2, 100, 101, 102, 500;
  const std::vector<ComponentPair> pairs = NearestComponentPairs(means, 2);
  const std::vector<ComponentPair> bridges = BridgingPairs(means, pairs);
  // 6 is the k-NN of nobody but has its own 2-NN {4, 5}: only the two
  // groups {0,1,2} and {3,4,5,6} remain, bridged by their closest means.
  EXPECT_EQ(bridges, (std::vector<ComponentPair>{{2, 3}}));
  const std::vector<ComponentPair> k1 = NearestComponentPairs(means, 1);
  // k = 1: {0,1}, {1,2}, {3,4}, {4,5}, {5,6} -> groups {0,1,2}, {3,4,5,6}.
  EXPECT_EQ(BridgingPairs(means, k1), (std::vector<ComponentPair>{{2, 3}}));
  RowMatrixD three(3, 1);
  three << 0, 10, 30;
  EXPECT_EQ(BridgingPairs(three, {}), (std::vector<ComponentPair>{{0, 1}, {0, 2}, {1, 2}}));
  EXPECT_TRUE(BridgingPairs(three, NearestComponentPairs(three, 1)).empty());
}

TEST(TnebMerge, ChooseKPicksTheLargestJump) {
  // 6 leaves; merges at -1, -1.5, -2 then a drop to -10, -10.5: three
  // clusters are stable over the widest range of water levels.
  const std::vector<double> s = {-1.0, -1.5, -2.0, -10.0, -10.5};
  auto ak = ChooseK(s);
  ASSERT_TRUE(ak.ok());
  EXPECT_EQ(ak->k, 3);
  EXPECT_DOUBLE_EQ(ak->jump, 8.0);
  EXPECT_DOUBLE_EQ(ak->second_jump, 0.5);
  EXPECT_EQ(ak->jumps, (std::vector<double>{0, 0, 0.5, 8.0, 0.5, 0.5}));
  const std::vector<double> thr = ThresholdsByK(s);
  ASSERT_EQ(thr.size(), 7u);
  EXPECT_EQ(thr[5], -1.0);  // first merge: 6 -> 5
  EXPECT_EQ(thr[3], -2.0);
  EXPECT_EQ(thr[1], -10.5);  // last merge: 2 -> 1
  EXPECT_TRUE(std::isinf(thr[6]));
  // Ties go to the smaller k.
  auto tie = ChooseK(std::vector<double>{0.0, -1.0, -2.0});
  ASSERT_TRUE(tie.ok());
  EXPECT_EQ(tie->k, 2);
  EXPECT_THAT(std::string(ChooseK(std::vector<double>{-1.0}).status().message()),
              HasSubstr("at least 3 leaf clusters"));
}

TEST(TnebMerge, MergeSimilaritiesRoundTripThroughHeights) {
  const std::vector<SimilarityEdge> edges = {{0, 1, -2.0}, {1, 2, -5.0}, {2, 3, -1.0}};
  auto mt = MaximumSpanningMerges(4, edges, 1.0);
  ASSERT_TRUE(mt.ok());
  auto h = Hierarchy::FromMerges(4, mt->merges);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(MergeSimilarities(*h, 1.0), (std::vector<double>{-1.0, -2.0, -5.0}));
  EXPECT_EQ(mt->similarity, (std::vector<double>{-1.0, -2.0, -5.0}));
}

// Two real clusters {0, 1} and {2, 3}, and node 4, a tail of cluster {2, 3}
// whose peak (-3.0) lies just above its saddle (-3.1) with node 3 but below
// the saddle between the clusters (-2.5). Density merging cuts the tail off
// first (k = 2 separates node 4); persistence merging keeps it with its
// cluster and splits the two real ones.
TEST(TnebMerge, PersistenceMergesTailsFirst) {
  const std::vector<SimilarityEdge> edges = {
      {0, 1, -1.0}, {2, 3, -1.2}, {1, 2, -2.5}, {3, 4, -3.1}, {0, 4, -6.0}};
  const std::vector<double> peak = {0.0, -0.5, -0.2, -0.4, -3.0};
  auto dens = MaximumSpanningMerges(5, edges, 0.0);
  ASSERT_TRUE(dens.ok()) << dens.status();
  auto hd = Hierarchy::FromMerges(5, dens->merges);
  ASSERT_TRUE(hd.ok());
  EXPECT_EQ(*hd->CutToK(2), (std::vector<int32_t>{0, 0, 0, 0, 1}));

  auto pers = PersistenceMerges(dens->tree_edges, peak);
  ASSERT_TRUE(pers.ok()) << pers.status();
  ASSERT_EQ(pers->merges.size(), 4u);
  // Persistence: {0,1}: min(0, -0.5) + 1.0 = 0.5; {2,3}: -0.4 + 1.2 = 0.8;
  // {1,2}: min(0, -0.2) + 2.5 = 2.3; {3,4}: -3.0 + 3.1 = 0.1.
  EXPECT_EQ(pers->similarity.size(), 4u);
  EXPECT_NEAR(pers->similarity[0], -0.1, 1e-12);
  EXPECT_NEAR(pers->similarity[1], -0.5, 1e-12);
  EXPECT_NEAR(pers->similarity[2], -0.8, 1e-12);
  EXPECT_NEAR(pers->similarity[3], -2.3, 1e-12);
  for (size_t t = 0; t < pers->merges.size(); ++t) {
    EXPECT_NEAR(pers->merges[t].height, -pers->similarity[t], 1e-12);
  }
  auto hp = Hierarchy::FromMerges(5, pers->merges);
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(*hp->CutToK(2), (std::vector<int32_t>{0, 0, 1, 1, 1}));
  EXPECT_EQ(*hp->CutToK(3), (std::vector<int32_t>{0, 0, 1, 2, 2}));

  // Bad input: wrong edge count, a cycle, edges out of order, a bad peak.
  EXPECT_FALSE(PersistenceMerges(dens->tree_edges, {0.0, 0.0}).ok());
  std::vector<SimilarityEdge> cyc = {{0, 1, -1.0}, {1, 2, -2.0}, {0, 2, -3.0}, {3, 4, -4.0}};
  EXPECT_FALSE(PersistenceMerges(cyc, peak).ok());
  std::vector<SimilarityEdge> unordered = {{0, 1, -2.0}, {1, 2, -1.0}, {2, 3, -3.0}, {3, 4, -4.0}};
  EXPECT_FALSE(PersistenceMerges(unordered, peak).ok());
  EXPECT_FALSE(
      PersistenceMerges(dens->tree_edges, {0.0, 0.0, std::nan(""), 0.0, 0.0}).ok());
}

// The graph merge on three well-separated 20-D blobs split into six
// components (two per blob): components of one blob share many kNN edges,
// components of different blobs none, so the cut at 3 recovers the blobs.
TEST(TnebGraph, SeparatedBlobsMergeWithinBlobsFirst) {
  constexpr int kDim = 20;
  constexpr int kPer = 120;
  std::mt19937_64 rng(5);
  std::normal_distribution<double> nd;
  std::vector<float> x;
  std::vector<int32_t> leaf, blob;
  for (int i = 0; i < 3 * kPer; ++i) {
    const int b = i % 3;
    for (int c = 0; c < kDim; ++c) {
      x.push_back(static_cast<float>((c == b ? 30.0 : 0.0) + nd(rng)));
    }
    blob.push_back(b);
    // Two components per blob, split on the sign of the last coordinate.
    leaf.push_back(2 * b + (x.back() > 0.0f ? 1 : 0));
  }
  const int64_t n = static_cast<int64_t>(blob.size());
  RowMatrixD means = RowMatrixD::Zero(6, kDim);
  std::vector<double> count(6, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int c = 0; c < kDim; ++c) means(leaf[i], c) += x[i * kDim + c];
    count[leaf[i]] += 1.0;
  }
  for (int k = 0; k < 6; ++k) means.row(k) /= count[k];

  const std::vector<int64_t> rows = GraphSampleRows(n);
  ASSERT_EQ(static_cast<int64_t>(rows.size()), n);
  auto nn = NearestNeighborGraph(MatrixView(x.data(), n, kDim), FeatureTransform{}, rows,
                                 kGraphNeighbors, 2);
  ASSERT_TRUE(nn.ok()) << nn.status();
  ASSERT_EQ(nn->size(), static_cast<size_t>(n * kGraphNeighbors));
  for (int64_t i = 0; i < n; ++i) {
    for (int c = 0; c < kGraphNeighbors; ++c) {
      const int32_t j = (*nn)[i * kGraphNeighbors + c];
      EXPECT_NE(j, i);
      EXPECT_EQ(blob[j], blob[i]);  // no edge crosses the wide gaps
    }
  }
  const std::vector<SimilarityEdge> edges = GraphSimilarities(6, leaf, *nn, kGraphNeighbors, means);
  ASSERT_EQ(edges.size(), 15u);
  for (const SimilarityEdge& e : edges) {
    if (e.a / 2 == e.b / 2) {
      EXPECT_GT(e.similarity, 0.0);
    } else {
      EXPECT_LT(e.similarity, 0.0);
      EXPECT_GT(e.similarity, -1.0);
    }
    EXPECT_LE(e.similarity, 1.0);
  }
  double offset = 0.0;
  auto mt = ComponentMerges(6, edges, std::vector<double>(6, 1.0), /*persistence=*/false, &offset);
  ASSERT_TRUE(mt.ok()) << mt.status();
  EXPECT_EQ(offset, 1.0);
  auto h = Hierarchy::FromMerges(6, mt->merges);
  ASSERT_TRUE(h.ok()) << h.status();
  const std::vector<int32_t> cut = *h->CutToK(3);
  EXPECT_EQ(cut[0], cut[1]);
  EXPECT_EQ(cut[2], cut[3]);
  EXPECT_EQ(cut[4], cut[5]);
  EXPECT_EQ(std::set<int32_t>(cut.begin(), cut.end()).size(), 3u);

  // Above kGraphMaxRows the graph takes every ceil(n / max)-th row.
  const std::vector<int64_t> sub = GraphSampleRows(10, 4);
  EXPECT_EQ(sub, (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_GT(GraphPeakBytes(100000, 64), GraphPeakBytes(1000, 64));
}

}  // namespace
}  // namespace dendro
