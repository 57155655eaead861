// RefineToBinary: n-ary nodes resolved by average linkage of their children,
// checked on hand-made trees and against a brute-force agglomeration.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "core/hierarchy/export.h"
#include "core/hierarchy/hierarchy.h"
#include "core/hierarchy/refine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/refine_test_util.h"

namespace dendro {
namespace {

using refine_test::ExpectEveryCut;
using refine_test::AllMergeHeightsDistinct;
using refine_test::Iota;
using refine_test::LeafSet;

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A star: `num_leaves` leaves under one root at `height`.
Hierarchy Star(int32_t num_leaves, double height = 1.0) {
  std::vector<int32_t> parent(num_leaves + 1, num_leaves);
  parent[num_leaves] = -1;
  std::vector<double> h(num_leaves + 1, 0.0);
  h[num_leaves] = height;
  auto t = Hierarchy::FromParents(num_leaves, parent, h);
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

// 1-D positions -> absolute difference.
NodeDistance OnLine(std::vector<double> pos) {
  return [pos = std::move(pos)](int32_t a, int32_t b) { return std::fabs(pos[a] - pos[b]); };
}

TEST(RefineTest, StarTreeReachesEveryK) {
  const Hierarchy star = Star(7, 2.5);
  ASSERT_FALSE(star.CutToK(3).ok());
  auto r = RefineToBinary(star, OnLine({0, 1, 3, 7, 15, 31, 63}));
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectEveryCut(*r);
  EXPECT_TRUE(AllMergeHeightsDistinct(*r));
  // Six merges at 2.5 * j / 6: strictly increasing, the last at exactly H.
  const std::vector<Merge> merges = r->ToMerges();
  ASSERT_EQ(merges.size(), 6u);
  for (int j = 1; j <= 6; ++j) {
    EXPECT_DOUBLE_EQ(merges[j - 1].height, 2.5 * j / 6) << j;
    EXPECT_GT(merges[j - 1].height, 0.0);
  }
  EXPECT_EQ(merges.back().height, 2.5);
  EXPECT_EQ(r->height(r->root()), 2.5);
  // Positions doubling: each step adds the next point to the growing group.
  EXPECT_EQ(merges[0].a, 0);
  EXPECT_EQ(merges[0].b, 1);
  for (int j = 1; j < 6; ++j) {
    EXPECT_EQ(merges[j].a, 7 + j - 1);
    EXPECT_EQ(merges[j].b, j + 1);
  }
  EXPECT_THAT(r->metadata().at("refined"), HasSubstr("average linkage"));
}

TEST(RefineTest, LeafNamesAndPointsAreCarried) {
  Hierarchy star = Star(4, 1.0);
  ASSERT_TRUE(star.SetLeafNames({"a", "b", "c", "d"}).ok());
  ASSERT_TRUE(star.SetPointLeaf({3, 0, 2}).ok());
  auto r = RefineToBinary(star, OnLine({0, 1, 5, 6}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->leaf_names(), star.leaf_names());
  EXPECT_EQ(r->point_leaf(), star.point_leaf());
}

TEST(RefineTest, AgglomerationFollowsTheDistances) {
  // Children at 0, 1, 10, 11: {0, 1} and {10, 11} first, then the two.
  auto r = RefineToBinary(Star(4), OnLine({0, 1, 10, 11}));
  ASSERT_TRUE(r.ok()) << r.status();
  const std::vector<Merge> m = r->ToMerges();
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(std::set<int32_t>({m[0].a, m[0].b}), std::set<int32_t>({0, 1}));
  EXPECT_EQ(std::set<int32_t>({m[1].a, m[1].b}), std::set<int32_t>({2, 3}));
  EXPECT_EQ(std::set<int32_t>({m[2].a, m[2].b}), std::set<int32_t>({4, 5}));
  auto two = r->CutToK(2);
  ASSERT_TRUE(two.ok());
  EXPECT_THAT(*two, ElementsAre(0, 0, 1, 1));
  // Positions permuted: the pairs follow the positions, not the ids.
  auto p = RefineToBinary(Star(4), OnLine({0, 10, 1, 11}));
  ASSERT_TRUE(p.ok());
  auto two_p = p->CutToK(2);
  ASSERT_TRUE(two_p.ok());
  EXPECT_THAT(*two_p, ElementsAre(0, 1, 0, 1));
}

TEST(RefineTest, TiesGoToTheSmallestIds) {
  // All distances equal: (0, 1), then ({0, 1}, 2), then (..., 3) ...
  auto r = RefineToBinary(Star(5), [](int32_t, int32_t) { return 1.0; });
  ASSERT_TRUE(r.ok());
  const std::vector<Merge> m = r->ToMerges();
  EXPECT_EQ(m[0].a, 0);
  EXPECT_EQ(m[0].b, 1);
  for (int j = 1; j < 4; ++j) {
    EXPECT_EQ(m[j].a, 5 + j - 1);
    EXPECT_EQ(m[j].b, j + 1);
  }
  // Two equally close pairs: (2, 3) and (0, 4) at distance 1, the rest 5.
  auto d = [](int32_t a, int32_t b) {
    const std::set<int32_t> s = {a, b};
    return s == std::set<int32_t>({2, 3}) || s == std::set<int32_t>({0, 4}) ? 1.0 : 5.0;
  };
  auto t = RefineToBinary(Star(5), d);
  ASSERT_TRUE(t.ok());
  const std::vector<Merge> n = t->ToMerges();
  EXPECT_EQ(std::set<int32_t>({n[0].a, n[0].b}), std::set<int32_t>({0, 4}));
  EXPECT_EQ(std::set<int32_t>({n[1].a, n[1].b}), std::set<int32_t>({2, 3}));
}

TEST(RefineTest, Deterministic) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> pos(40);
  for (double& x : pos) x = u(rng);
  auto a = RefineToBinary(Star(40), OnLine(pos));
  auto b = RefineToBinary(Star(40), OnLine(pos));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(ToJson(*a), ToJson(*b));
  ExpectEveryCut(*a);
}

TEST(RefineTest, BinaryTreeIsReturnedUnchanged) {
  std::mt19937 rng(3);
  // Random binary merge sequence with strictly increasing heights.
  const int32_t n = 30;
  std::vector<int32_t> active = Iota(0, n - 1);
  std::vector<Merge> merges;
  double h = 0;
  for (int32_t t = 0; t + 1 < n; ++t) {
    std::swap(active[rng() % active.size()], active.back());
    const int32_t x = active.back();
    active.pop_back();
    std::swap(active[rng() % active.size()], active.back());
    const int32_t y = active.back();
    active.back() = n + t;
    h += 0.1 + (rng() % 10) * 0.01;
    merges.push_back({x, y, h});
  }
  auto tree = Hierarchy::FromMerges(n, merges);
  ASSERT_TRUE(tree.ok());
  ASSERT_TRUE(tree->SetPointLeaf({3, 1, 4, 1, 5}).ok());
  tree->mutable_metadata()["method"] = "test";
  int calls = 0;
  std::vector<int32_t> node_map;
  auto r = RefineToBinary(
      *tree,
      [&](int32_t, int32_t) {
        ++calls;
        return 1.0;
      },
      {}, &node_map);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(calls, 0);
  const std::vector<Merge> back = r->ToMerges();
  ASSERT_EQ(back.size(), merges.size());
  for (size_t t = 0; t < merges.size(); ++t) {
    EXPECT_EQ(back[t].a, merges[t].a);
    EXPECT_EQ(back[t].b, merges[t].b);
    EXPECT_EQ(back[t].height, merges[t].height);
  }
  EXPECT_EQ(node_map, Iota(0, 2 * n - 2));
  EXPECT_EQ(r->point_leaf(), tree->point_leaf());
  EXPECT_EQ(r->metadata().at("method"), "test");
  EXPECT_EQ(r->metadata().count("refined"), 1u);
}

// Two levels: super nodes with 4, 3 and 2 children, plus a bare leaf, under
// a root with 4 children. Heights 1.0 (all three supers) and 3.0.
Hierarchy TwoLevels() {
  // Leaves 0..9; node 10 = {0,1,2,3}, 11 = {4,5,6}, 12 = {7,8}; root 13 =
  // {10, 11, 12, 9}.
  std::vector<int32_t> parent = {10, 10, 10, 10, 11, 11, 11, 12, 12, 13, 13, 13, 13, -1};
  std::vector<double> height(14, 0.0);
  height[10] = height[11] = height[12] = 1.0;
  height[13] = 3.0;
  auto t = Hierarchy::FromParents(10, parent, height);
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

TEST(RefineTest, NestedNodesKeepTheirClustersAndHeights) {
  const Hierarchy t = TwoLevels();
  std::vector<double> pos = {0, 1, 5, 6, 20, 21, 23, 40, 41, 100, 3, 21, 40.5, 0};
  RefineOptions no_sep;
  no_sep.separate_tied_heights = false;
  std::vector<int32_t> map;
  auto r = RefineToBinary(t, OnLine(pos), no_sep, &map);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectEveryCut(*r);
  ASSERT_EQ(map.size(), static_cast<size_t>(t.num_nodes()));
  for (int32_t v = 0; v < t.num_nodes(); ++v) {
    EXPECT_EQ(LeafSet(*r, map[v]), LeafSet(t, v)) << v;
    EXPECT_EQ(r->height(map[v]), t.height(v)) << v;
  }
  // Inside node 10 (h0 = 0, H = 1): 1/3, 2/3, 1; inside the root (h0 = 1,
  // H = 3): 5/3, 7/3, 3; node 11: 1/2, 1.
  std::multiset<double> heights;
  for (const Merge& m : r->ToMerges()) heights.insert(m.height);
  EXPECT_EQ(heights, std::multiset<double>({1.0 / 3, 2.0 / 3, 1.0, 0.5, 1.0, 1.0, 1.0 + 2.0 / 3,
                                            1.0 + 4.0 / 3, 3.0}));
  // Node 10's children at 0, 1, 5, 6: {0, 1} and {2, 3} first.
  EXPECT_EQ(LeafSet(*r, r->parent(0)), std::vector<int32_t>({0, 1}));
  EXPECT_EQ(LeafSet(*r, r->parent(2)), std::vector<int32_t>({2, 3}));
  // Without separation the three supers tie at 1 (SciPy could not split
  // them); with it every height differs and CutToK is unchanged.
  EXPECT_FALSE(AllMergeHeightsDistinct(*r));
  auto s = RefineToBinary(t, OnLine(pos), {}, &map);
  ASSERT_TRUE(s.ok());
  ExpectEveryCut(*s);
  EXPECT_TRUE(AllMergeHeightsDistinct(*s));
  for (int32_t k = 1; k <= 10; ++k) EXPECT_EQ(*s->CutToK(k), *r->CutToK(k)) << k;
  for (int32_t v = 0; v < t.num_nodes(); ++v) {
    EXPECT_EQ(LeafSet(*s, map[v]), LeafSet(t, v)) << v;
    if (s->parent(v) >= 0) {
      EXPECT_LE(s->height(v), s->height(s->parent(v)));
    }
  }
  // New merges stay strictly inside their node's (h0, H).
  for (int32_t v = 10; v < s->num_nodes(); ++v) {
    const int32_t p = s->parent(v);
    if (p >= 0) {
      EXPECT_LT(s->height(v), s->height(p));
    }
  }
  EXPECT_EQ(s->height(s->root()), 3.0);
}

TEST(RefineTest, NodeAtItsChildsHeightStaysBinaryAndCuttable) {
  // Node 5 = {0, 1, 2} at height 2; root 6 = {5, 3, 4} also at height 2.
  std::vector<int32_t> parent = {5, 5, 5, 6, 6, 6, -1};
  std::vector<double> height = {0, 0, 0, 0, 0, 2.0, 2.0};
  auto t = Hierarchy::FromParents(5, parent, height);
  ASSERT_TRUE(t.ok()) << t.status();
  RefineOptions no_sep;
  no_sep.separate_tied_heights = false;
  std::vector<double> pos = {0, 1, 2, 10, 11, 1, 0};
  auto r = RefineToBinary(*t, OnLine(pos), no_sep);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectEveryCut(*r);
  // The root's two steps sit at H = h0 = 2.
  std::multiset<double> heights;
  for (const Merge& m : r->ToMerges()) heights.insert(m.height);
  EXPECT_EQ(heights, std::multiset<double>({1.0, 2.0, 2.0, 2.0}));
  auto s = RefineToBinary(*t, OnLine(pos));
  ASSERT_TRUE(s.ok());
  ExpectEveryCut(*s);
  EXPECT_TRUE(AllMergeHeightsDistinct(*s));
  EXPECT_EQ(s->height(s->root()), 2.0);
  for (int32_t k = 1; k <= 5; ++k) EXPECT_EQ(*s->CutToK(k), *r->CutToK(k)) << k;
}

TEST(RefineTest, SeparateTiedHeightsKeepsEveryCut) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    const int32_t n = 2 + static_cast<int32_t>(rng() % 40);
    std::vector<int32_t> active = Iota(0, n - 1);
    std::vector<Merge> merges;
    double h = 0;
    for (int32_t t = 0; t + 1 < n; ++t) {
      std::swap(active[rng() % active.size()], active.back());
      const int32_t x = active.back();
      active.pop_back();
      std::swap(active[rng() % active.size()], active.back());
      const int32_t y = active.back();
      active.back() = n + t;
      if (rng() % 3 == 0) h += 1.0;  // many ties, including at height 0
      merges.push_back({x, y, h});
    }
    auto tree = Hierarchy::FromMerges(n, merges);
    ASSERT_TRUE(tree.ok());
    auto s = SeparateTiedHeights(*tree);
    ASSERT_TRUE(s.ok()) << s.status();
    for (int32_t k = 1; k <= n; ++k) EXPECT_EQ(*s->CutToK(k), *tree->CutToK(k));
    for (int32_t v = 0; v < n * 2 - 1; ++v) {
      if (s->parent(v) >= 0) {
        EXPECT_LE(s->height(v), s->height(s->parent(v)));
      }
    }
    EXPECT_EQ(s->height(s->root()), tree->height(tree->root()));
    // Only a run tied at height 0 with nothing below can stay tied.
    std::vector<double> heights;
    for (const Merge& m : s->ToMerges()) {
      if (m.height > 0) heights.push_back(m.height);
    }
    std::sort(heights.begin(), heights.end());
    EXPECT_EQ(std::adjacent_find(heights.begin(), heights.end()), heights.end());
  }
  EXPECT_FALSE(SeparateTiedHeights(Star(3)).ok());
}

// Brute force: the same Lance-Williams arithmetic, the globally smallest
// (distance, a, b) found by scanning every pair at every step.
std::vector<std::pair<int32_t, int32_t>> BruteAverageLinkage(std::vector<std::vector<double>> d) {
  const int32_t m = static_cast<int32_t>(d.size());
  std::vector<int64_t> size(m, 1);
  std::vector<char> active(m, 1);
  std::vector<std::pair<int32_t, int32_t>> steps;
  for (int32_t step = 0; step + 1 < m; ++step) {
    int32_t ba = -1, bb = -1;
    for (int32_t a = 0; a < m; ++a) {
      for (int32_t b = a + 1; b < m; ++b) {
        if (!active[a] || !active[b]) continue;
        if (ba < 0 || d[a][b] < d[ba][bb]) {
          ba = a;
          bb = b;
        }
      }
    }
    steps.emplace_back(ba, bb);
    for (int32_t x = 0; x < m; ++x) {
      if (!active[x] || x == ba || x == bb) continue;
      const double da = d[ba][x], db = d[bb][x];
      const double avg = (size[ba] * da + size[bb] * db) / static_cast<double>(size[ba] + size[bb]);
      d[ba][x] = d[x][ba] = std::clamp(avg, std::min(da, db), std::max(da, db));
    }
    size[ba] += size[bb];
    active[bb] = 0;
  }
  return steps;
}

TEST(RefineTest, MatchesBruteForceAgglomerationWithManyTies) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 60; ++trial) {
    const int32_t m = 3 + static_cast<int32_t>(rng() % 30);
    std::vector<std::vector<double>> d(m, std::vector<double>(m, 0.0));
    const int levels = trial % 2 == 0 ? 3 : 1000;  // few levels: many ties
    for (int32_t a = 0; a < m; ++a) {
      for (int32_t b = a + 1; b < m; ++b) d[a][b] = d[b][a] = static_cast<double>(rng() % levels);
    }
    auto r = RefineToBinary(Star(m), [&](int32_t a, int32_t b) { return d[a][b]; }, {});
    ASSERT_TRUE(r.ok()) << r.status();
    ExpectEveryCut(*r);
    // Replay the brute-force steps on node ids and compare the merges.
    const auto steps = BruteAverageLinkage(d);
    std::vector<int32_t> node = Iota(0, m - 1);
    const std::vector<Merge> got = r->ToMerges();
    ASSERT_EQ(got.size(), steps.size());
    for (size_t t = 0; t < steps.size(); ++t) {
      EXPECT_EQ(got[t].a, node[steps[t].first]) << "trial " << trial << " step " << t;
      EXPECT_EQ(got[t].b, node[steps[t].second]) << "trial " << trial << " step " << t;
      node[steps[t].first] = m + static_cast<int32_t>(t);
    }
  }
}

TEST(RefineTest, FeatureRowsMatchTheCallback) {
  std::mt19937 rng(9);
  std::normal_distribution<double> g(0, 1);
  const Hierarchy t = TwoLevels();
  const int64_t dim = 5;
  std::vector<double> f(t.num_nodes() * dim);
  for (double& v : f) v = g(rng);
  auto sq = [&](int32_t a, int32_t b) {
    double s = 0;
    for (int64_t c = 0; c < dim; ++c) {
      const double e = f[a * dim + c] - f[b * dim + c];
      s += e * e;
    }
    return s;
  };
  auto by_rows = RefineToBinary(t, f, dim, RefineMetric::kSquaredEuclidean);
  auto by_call = RefineToBinary(t, sq);
  ASSERT_TRUE(by_rows.ok() && by_call.ok()) << by_rows.status() << by_call.status();
  const auto a = by_rows->ToMerges(), b = by_call->ToMerges();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].a, b[i].a);
    EXPECT_EQ(a[i].b, b[i].b);
    EXPECT_EQ(a[i].height, b[i].height);
  }
  auto eu = RefineToBinary(t, f, dim, RefineMetric::kEuclidean);
  ASSERT_TRUE(eu.ok());
  ExpectEveryCut(*eu);
}

TEST(RefineTest, RejectsBadDistancesAndShapes) {
  auto nan = RefineToBinary(Star(3), [](int32_t, int32_t) { return std::nan(""); });
  EXPECT_EQ(nan.status().code(), absl::StatusCode::kInvalidArgument);
  auto neg = RefineToBinary(Star(3), [](int32_t, int32_t) { return -1.0; });
  EXPECT_THAT(neg.status().message(), HasSubstr("finite and >= 0"));
  std::vector<double> f(3);
  EXPECT_FALSE(RefineToBinary(Star(3), f, 1, RefineMetric::kEuclidean).ok());
  std::vector<double> inf = {0, 1, INFINITY, 0};
  EXPECT_FALSE(RefineToBinary(Star(3), inf, 1, RefineMetric::kEuclidean).ok());
  // A single leaf or a pair: nothing to do.
  auto one = Hierarchy::FromMerges(1, {});
  ASSERT_TRUE(one.ok());
  auto r = RefineToBinary(*one, [](int32_t, int32_t) { return 0.0; });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->num_nodes(), 1);
}

}  // namespace
}  // namespace dendro
