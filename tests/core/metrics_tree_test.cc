// Dendrogram purity, LHD and EvaluateHierarchy against brute-force pair
// enumeration on small random trees.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>
#include <random>
#include <set>
#include <vector>

#include "core/metrics/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dendro {
namespace {

using ::testing::HasSubstr;

Hierarchy RandomBinary(int32_t num_leaves, std::mt19937& rng) {
  std::vector<int32_t> active(num_leaves);
  std::iota(active.begin(), active.end(), 0);
  std::vector<Merge> merges;
  double h = 0;
  for (int32_t t = 0; t + 1 < num_leaves; ++t) {
    std::uniform_int_distribution<size_t> pick(0, active.size() - 1);
    size_t i = pick(rng);
    size_t j = pick(rng);
    while (j == i) j = pick(rng);
    h += 1.0 + rng() % 3;
    merges.push_back({active[i], active[j], h});
    // Swap-remove both (larger index first), then add the new node.
    for (size_t k : {std::max(i, j), std::min(i, j)}) {
      active[k] = active.back();
      active.pop_back();
    }
    active.push_back(num_leaves + t);
  }
  return *Hierarchy::FromMerges(num_leaves, merges);
}

// Contract random internal edges of a random binary tree.
Hierarchy RandomNary(int32_t num_leaves, std::mt19937& rng) {
  Hierarchy bin = RandomBinary(num_leaves, rng);
  const int32_t n = bin.num_nodes();
  std::vector<int32_t> up(n);
  for (int32_t v = n - 1; v >= 0; --v) {
    const int32_t p = bin.parent(v);
    up[v] = (v >= num_leaves && p >= 0 && rng() % 2) ? up[p] : v;
  }
  std::vector<int32_t> id(n, -1);
  int32_t next = 0;
  for (int32_t v = 0; v < n; ++v) {
    if (up[v] == v) id[v] = next++;
  }
  std::vector<int32_t> parent(next);
  std::vector<double> height(next);
  for (int32_t v = 0; v < n; ++v) {
    if (id[v] < 0) continue;
    parent[id[v]] = bin.parent(v) < 0 ? -1 : id[up[bin.parent(v)]];
    height[id[v]] = bin.height(v);
  }
  return *Hierarchy::FromParents(num_leaves, parent, height);
}

// Leaf sets per node, from children() only.
std::vector<std::set<int32_t>> LeafSets(const Hierarchy& h) {
  std::vector<std::set<int32_t>> sets(h.num_nodes());
  for (int32_t v = 0; v < h.num_nodes(); ++v) {
    if (h.is_leaf(v)) sets[v].insert(v);
    for (int32_t c : h.children(v)) sets[v].insert(sets[c].begin(), sets[c].end());
  }
  return sets;
}

// Definition of DP: mean over same-label point pairs of the fraction of
// points under LCA(leaf_i, leaf_j) carrying that label.
double BruteDp(const Hierarchy& h, const std::vector<int32_t>& leaf,
               const std::vector<int64_t>& truth) {
  auto sets = LeafSets(h);
  double sum = 0;
  int64_t pairs = 0;
  for (size_t i = 0; i < leaf.size(); ++i) {
    for (size_t j = i + 1; j < leaf.size(); ++j) {
      if (truth[i] != truth[j]) continue;
      int32_t lca = -1;  // smallest node covering both leaves
      for (int32_t v = 0; v < h.num_nodes() && lca < 0; ++v) {
        if (sets[v].count(leaf[i]) && sets[v].count(leaf[j])) lca = v;
      }
      double under = 0, same = 0;
      for (size_t p = 0; p < leaf.size(); ++p) {
        if (sets[lca].count(leaf[p])) {
          under += 1;
          if (truth[p] == truth[i]) same += 1;
        }
      }
      sum += same / under;
      ++pairs;
    }
  }
  return pairs == 0 ? 1.0 : sum / pairs;
}

// Tree distance in edges between two nodes, by BFS over the undirected tree.
int32_t TreeDistance(const Hierarchy& h, int32_t a, int32_t b) {
  std::vector<int32_t> dist(h.num_nodes(), -1);
  std::queue<int32_t> q;
  dist[a] = 0;
  q.push(a);
  while (!q.empty()) {
    const int32_t v = q.front();
    q.pop();
    std::vector<int32_t> nbrs(h.children(v).begin(), h.children(v).end());
    if (h.parent(v) >= 0) nbrs.push_back(h.parent(v));
    for (int32_t w : nbrs) {
      if (dist[w] < 0) {
        dist[w] = dist[v] + 1;
        q.push(w);
      }
    }
  }
  return dist[b];
}

// Definition of LHD from Palumbo et al. B.3, normalised by log2 L.
double BruteLhd(const Hierarchy& h, const std::vector<int32_t>& leaf,
                const std::vector<int64_t>& truth) {
  const int32_t L = h.num_leaves();
  if (L <= 2) return 0.0;
  double sum = 0;
  int64_t pairs = 0;
  for (size_t i = 0; i < leaf.size(); ++i) {
    for (size_t j = i + 1; j < leaf.size(); ++j) {
      if (truth[i] != truth[j] || leaf[i] == leaf[j]) continue;
      const double td = TreeDistance(h, leaf[i], leaf[j]);
      sum += (std::log2(td) - 1) / (std::log2(static_cast<double>(L)) - 1);
      ++pairs;
    }
  }
  return pairs == 0 ? 0.0 : sum / pairs;
}

struct Points {
  std::vector<int32_t> leaf;
  std::vector<int64_t> truth;
};

// Points whose class follows their leaf with probability `signal`; some
// leaves stay empty.
Points RandomPoints(const Hierarchy& h, size_t n, int classes, double signal, std::mt19937& rng) {
  Points p;
  std::uniform_real_distribution<double> u(0, 1);
  const int32_t used_leaves = std::max<int32_t>(1, h.num_leaves() - h.num_leaves() / 5);
  for (size_t i = 0; i < n; ++i) {
    const int32_t leaf = static_cast<int32_t>(rng() % used_leaves);
    p.leaf.push_back(leaf);
    const int64_t cls = u(rng) < signal ? leaf % classes : static_cast<int64_t>(rng() % classes);
    p.truth.push_back(cls * 7919 - 100);
  }
  return p;
}

TEST(TreeMetricsTest, DendrogramPurityMatchesPairEnumeration) {
  std::mt19937 rng(41);
  for (int trial = 0; trial < 120; ++trial) {
    const int32_t L = 1 + static_cast<int32_t>(rng() % 14);
    Hierarchy h = (trial % 2 && L > 2) ? RandomNary(L, rng) : RandomBinary(L, rng);
    Points p = RandomPoints(h, 1 + rng() % 60, 1 + static_cast<int>(rng() % 5),
                            (rng() % 10) / 10.0, rng);
    const double expect = BruteDp(h, p.leaf, p.truth);
    SCOPED_TRACE(testing::Message() << "trial " << trial << " L=" << L);
    for (CountStorage s : {CountStorage::kAuto, CountStorage::kDense, CountStorage::kSparse}) {
      auto dp = DendrogramPurity(h, p.leaf, p.truth, s);
      ASSERT_TRUE(dp.ok()) << dp.status();
      EXPECT_NEAR(*dp, expect, 1e-12);
    }
  }
}

TEST(TreeMetricsTest, LhdMatchesPairEnumeration) {
  std::mt19937 rng(43);
  for (int trial = 0; trial < 120; ++trial) {
    const int32_t L = 1 + static_cast<int32_t>(rng() % 16);
    Hierarchy h = (trial % 2 && L > 2) ? RandomNary(L, rng) : RandomBinary(L, rng);
    Points p = RandomPoints(h, 1 + rng() % 60, 1 + static_cast<int>(rng() % 5),
                            (rng() % 10) / 10.0, rng);
    auto lhd = LeastHierarchicalDistance(h, p.leaf, p.truth);
    ASSERT_TRUE(lhd.ok()) << lhd.status();
    EXPECT_NEAR(*lhd, BruteLhd(h, p.leaf, p.truth), 1e-12) << "trial " << trial;
  }
}

TEST(TreeMetricsTest, HandComputedSmallCase) {
  // ((0,1),2): leaf 0 = {a, a}, leaf 1 = {a, b}, leaf 2 = {b}.
  auto h = Hierarchy::FromMerges(3, std::vector<Merge>{{0, 1, 1.0}, {3, 2, 2.0}});
  ASSERT_TRUE(h.ok());
  std::vector<int32_t> leaf = {0, 0, 1, 1, 2};
  std::vector<int64_t> truth = {1, 1, 1, 2, 2};
  // a-pairs: (p0,p1) LCA leaf 0, purity 1; (p0,p2), (p1,p2) LCA node 3,
  // purity 3/4. b-pair: (p3,p4) LCA root, purity 2/5.
  EXPECT_NEAR(*DendrogramPurity(*h, leaf, truth), (1 + 0.75 + 0.75 + 0.4) / 4, 1e-15);
  // Different-leaf same-label pairs: two a-pairs at td 2, one b-pair at td 3.
  const double norm = std::log2(3.0) - 1;
  EXPECT_NEAR(*LeastHierarchicalDistance(*h, leaf, truth),
              (0 + 0 + (std::log2(3.0) - 1) / norm) / 3, 1e-15);
}

TEST(TreeMetricsTest, DegenerateCases) {
  auto h = Hierarchy::FromMerges(4, std::vector<Merge>{{0, 1, 1}, {2, 3, 1}, {4, 5, 2}});
  ASSERT_TRUE(h.ok());
  // All labels distinct: no pairs. DP is 1, LHD 0.
  EXPECT_EQ(*DendrogramPurity(*h, std::vector<int32_t>{0, 1, 2}, std::vector<int64_t>{1, 2, 3}),
            1.0);
  EXPECT_EQ(*LeastHierarchicalDistance(*h, std::vector<int32_t>{0, 1, 2},
                                       std::vector<int64_t>{1, 2, 3}),
            0.0);
  // Same labels but all in one leaf: LHD has no pairs.
  EXPECT_EQ(*LeastHierarchicalDistance(*h, std::vector<int32_t>{2, 2},
                                       std::vector<int64_t>{5, 5}),
            0.0);
  // Two leaves: LHD is 0 by definition.
  auto two = Hierarchy::FromMerges(2, std::vector<Merge>{{0, 1, 1}});
  EXPECT_EQ(*LeastHierarchicalDistance(*two, std::vector<int32_t>{0, 1},
                                       std::vector<int64_t>{5, 5}),
            0.0);
}

TEST(TreeMetricsTest, RejectsBadInput) {
  auto h = Hierarchy::FromMerges(2, std::vector<Merge>{{0, 1, 1}});
  ASSERT_TRUE(h.ok());
  auto bad_leaf = DendrogramPurity(*h, std::vector<int32_t>{0, 2}, std::vector<int64_t>{1, 1});
  ASSERT_FALSE(bad_leaf.ok());
  EXPECT_THAT(std::string(bad_leaf.status().message()),
              HasSubstr("point 1 is assigned to leaf 2, outside [0, 2)"));
  auto mismatch =
      LeastHierarchicalDistance(*h, std::vector<int32_t>{0, 1}, std::vector<int64_t>{1});
  ASSERT_FALSE(mismatch.ok());
  EXPECT_THAT(std::string(mismatch.status().message()),
              HasSubstr("truth has 1 labels but point_leaf has 2"));
  auto no_points = EvaluateHierarchy(*h, {}, std::vector<int64_t>{1});
  ASSERT_FALSE(no_points.ok());  // h has no point_leaf either
  auto bad_level = EvaluateHierarchy(*h, std::vector<int32_t>{0, 1},
                                     std::vector<int64_t>{1, 2}, 3);
  ASSERT_FALSE(bad_level.ok());
  EXPECT_THAT(std::string(bad_level.status().message()), HasSubstr("level 3 is outside [0, 2]"));
}

TEST(TreeMetricsTest, EvaluateUsesTheRightCut) {
  std::mt19937 rng(47);
  for (int trial = 0; trial < 40; ++trial) {
    const int32_t L = 2 + static_cast<int32_t>(rng() % 12);
    Hierarchy h = (trial % 2 && L > 2) ? RandomNary(L, rng) : RandomBinary(L, rng);
    const int classes = 1 + static_cast<int>(rng() % 8);
    Points p = RandomPoints(h, 10 + rng() % 80, classes, 0.7, rng);
    const int32_t distinct =
        static_cast<int32_t>(std::set<int64_t>(p.truth.begin(), p.truth.end()).size());
    const std::vector<int32_t> reachable = h.ReachableLevels();
    for (int32_t requested = 0; requested <= L; ++requested) {
      // Expected level: requested (or min(K, L) for 0), lowered to the
      // nearest reachable level.
      int32_t target = requested == 0 ? std::min(distinct, L) : requested;
      int32_t expect_level = 1;
      for (int32_t r : reachable) {
        if (r <= target) expect_level = r;
      }
      auto report = EvaluateHierarchy(h, p.leaf, p.truth, requested);
      ASSERT_TRUE(report.ok()) << report.status();
      EXPECT_EQ(report->level, expect_level);
      std::vector<int32_t> cut = *h.CutToK(expect_level);
      std::vector<int64_t> pred;
      for (int32_t l : p.leaf) pred.push_back(cut[l]);
      EXPECT_DOUBLE_EQ(report->nmi, *NormalizedMutualInfo(p.truth, pred));
      EXPECT_DOUBLE_EQ(report->ari, *AdjustedRandIndex(p.truth, pred));
      EXPECT_DOUBLE_EQ(report->acc, *ClusteringAccuracy(p.truth, pred));
      EXPECT_DOUBLE_EQ(report->leaf_purity, *LeafPurity(p.truth, pred));
      EXPECT_DOUBLE_EQ(report->dendrogram_purity, *DendrogramPurity(h, p.leaf, p.truth));
      EXPECT_DOUBLE_EQ(report->lhd, *LeastHierarchicalDistance(h, p.leaf, p.truth));
    }
    // An empty point_leaf means the tree's own assignment.
    ASSERT_TRUE(h.SetPointLeaf(p.leaf).ok());
    auto own = EvaluateHierarchy(h, {}, p.truth);
    ASSERT_TRUE(own.ok()) << own.status();
    EXPECT_DOUBLE_EQ(own->nmi, EvaluateHierarchy(h, p.leaf, p.truth)->nmi);
  }
}

TEST(TreeMetricsTest, LargeTreeDenseAndSparseAgree) {
  // 100k leaves, 1M points, 60 classes: nodes x classes = 1.2e7 is above
  // the dense limit, so kAuto goes sparse; forcing dense must agree.
  std::mt19937 rng(53);
  const int32_t L = 100000;
  Hierarchy h = RandomBinary(L, rng);
  Points p = RandomPoints(h, 1000000, 60, 0.8, rng);
  auto sparse = DendrogramPurity(h, p.leaf, p.truth, CountStorage::kSparse);
  auto dense = DendrogramPurity(h, p.leaf, p.truth, CountStorage::kDense);
  ASSERT_TRUE(sparse.ok() && dense.ok());
  EXPECT_NEAR(*sparse, *dense, 1e-12);
  EXPECT_GT(*sparse, 0.0);
  EXPECT_LT(*sparse, 1.0);
  auto lhd = LeastHierarchicalDistance(h, p.leaf, p.truth);
  ASSERT_TRUE(lhd.ok());
  EXPECT_GT(*lhd, 0.0);
}

}  // namespace
}  // namespace dendro
