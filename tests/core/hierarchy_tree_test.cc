// Hierarchy construction, validation, cuts, ancestors and LCA, checked
// against brute-force reimplementations on random trees.
#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "core/hierarchy/hierarchy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dendro {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// Random binary merge sequence. Heights strictly increase in merge order
// unless `ties`, in which case consecutive merges often share a height.
std::vector<Merge> RandomMerges(int32_t num_leaves, std::mt19937& rng, bool ties = false) {
  std::vector<int32_t> active(num_leaves);
  std::iota(active.begin(), active.end(), 0);
  std::vector<Merge> merges;
  double h = 0.0;
  std::uniform_real_distribution<double> step(0.01, 1.0);
  for (int32_t t = 0; t + 1 < num_leaves; ++t) {
    std::uniform_int_distribution<size_t> pick(0, active.size() - 1);
    size_t i = pick(rng);
    size_t j = pick(rng);
    while (j == i) j = pick(rng);
    Merge m{active[i], active[j], 0.0};
    if (!ties || rng() % 3 == 0) h += step(rng);
    m.height = h;
    merges.push_back(m);
    active[std::min(i, j)] = num_leaves + t;
    active.erase(active.begin() + std::max(i, j));
  }
  return merges;
}

struct UnionFind {
  explicit UnionFind(int32_t n) : p(n) { std::iota(p.begin(), p.end(), 0); }
  int32_t Find(int32_t x) { return p[x] == x ? x : p[x] = Find(p[x]); }
  void Union(int32_t a, int32_t b) { p[Find(a)] = Find(b); }
  std::vector<int32_t> p;
};

// Renames arbitrary cluster ids to 0, 1, ... in order of first appearance.
std::vector<int32_t> Canonical(const std::vector<int32_t>& ids) {
  std::map<int32_t, int32_t> rename;
  std::vector<int32_t> out;
  for (int32_t id : ids) {
    auto it = rename.emplace(id, static_cast<int32_t>(rename.size())).first;
    out.push_back(it->second);
  }
  return out;
}

// Partition after replaying the first `count` merges with union-find.
std::vector<int32_t> ReplayMerges(int32_t num_leaves, const std::vector<Merge>& merges,
                                  int32_t count) {
  UnionFind uf(2 * num_leaves);
  for (int32_t t = 0; t < count; ++t) {
    uf.Union(merges[t].a, num_leaves + t);
    uf.Union(merges[t].b, num_leaves + t);
  }
  std::vector<int32_t> ids(num_leaves);
  for (int32_t l = 0; l < num_leaves; ++l) ids[l] = uf.Find(l);
  return Canonical(ids);
}

// Set of leaves under each node, from children() alone.
std::vector<std::set<int32_t>> LeafSets(const Hierarchy& h) {
  std::vector<std::set<int32_t>> sets(h.num_nodes());
  for (int32_t v = 0; v < h.num_nodes(); ++v) {
    if (h.is_leaf(v)) sets[v].insert(v);
    for (int32_t c : h.children(v)) sets[v].insert(sets[c].begin(), sets[c].end());
  }
  return sets;
}

TEST(HierarchyTest, SingleLeaf) {
  auto h = Hierarchy::FromMerges(1, {});
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->num_nodes(), 1);
  EXPECT_EQ(h->root(), 0);
  EXPECT_TRUE(h->is_binary());
  EXPECT_THAT(*h->CutToK(1), ElementsAre(0));
  EXPECT_THAT(h->ReachableLevels(), ElementsAre(1));
  EXPECT_TRUE(h->ToMerges().empty());
  EXPECT_EQ(h->Lca(0, 0), 0);
  EXPECT_TRUE(h->Ancestors(0)->empty());
}

TEST(HierarchyTest, SmallTreeAccessors) {
  // ((0,1)@1, (2,(3,4)@0.5)@2)@3
  std::vector<Merge> merges = {{3, 4, 0.5}, {0, 1, 1.0}, {2, 5, 2.0}, {6, 7, 3.0}};
  auto h = Hierarchy::FromMerges(5, merges);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->num_nodes(), 9);
  EXPECT_EQ(h->num_internal(), 4);
  EXPECT_EQ(h->root(), 8);
  EXPECT_THAT(h->children(7), ElementsAre(2, 5));
  EXPECT_EQ(h->leaf_count(7), 3);
  EXPECT_EQ(h->leaf_count(8), 5);
  EXPECT_EQ(h->depth(3), 3);
  EXPECT_EQ(h->depth(0), 2);
  EXPECT_EQ(h->depth(8), 0);
  EXPECT_EQ(h->parent(8), -1);
  EXPECT_DOUBLE_EQ(h->height(6), 1.0);
  EXPECT_THAT(*h->Ancestors(3), ElementsAre(5, 7, 8));
  EXPECT_EQ(h->Lca(3, 2), 7);
  EXPECT_EQ(h->Lca(0, 4), 8);
  EXPECT_EQ(h->Lca(5, 3), 5);
  EXPECT_EQ(h->Lca(0, 99), -1);
  EXPECT_FALSE(h->Ancestors(9).ok());
  EXPECT_FALSE(h->Ancestors(-1).ok());
  // Cuts by hand: k=2 splits {0,1} | {2,3,4}; k=3 splits off 2.
  EXPECT_THAT(*h->CutToK(2), ElementsAre(0, 0, 1, 1, 1));
  EXPECT_THAT(*h->CutToK(3), ElementsAre(0, 0, 1, 2, 2));
  EXPECT_THAT(*h->CutToK(4), ElementsAre(0, 1, 2, 3, 3));
  EXPECT_THAT(h->CutAtHeight(1.0), ElementsAre(0, 0, 1, 2, 2));
  EXPECT_THAT(h->CutAtHeight(0.4), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_THAT(h->CutAtHeight(3.0), ElementsAre(0, 0, 0, 0, 0));
  EXPECT_EQ(*h->ClusterAtLevel(4, 3), 2);
  EXPECT_FALSE(h->CutToK(0).ok());
  EXPECT_FALSE(h->CutToK(6).ok());
  EXPECT_FALSE(h->ClusterAtLevel(5, 2).ok());
  EXPECT_TRUE(h->is_binary());
  // FromMerges keeps the merges exactly, including operand order.
  std::vector<Merge> back = h->ToMerges();
  ASSERT_EQ(back.size(), merges.size());
  for (size_t t = 0; t < merges.size(); ++t) {
    EXPECT_EQ(back[t].a, merges[t].a);
    EXPECT_EQ(back[t].b, merges[t].b);
    EXPECT_EQ(back[t].height, merges[t].height);
  }
}

TEST(HierarchyTest, FromMergesRejectsBadInput) {
  auto expect_error = [](int32_t L, std::vector<Merge> m, const char* needle) {
    auto h = Hierarchy::FromMerges(L, m);
    ASSERT_FALSE(h.ok()) << needle;
    EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(h.status().message()), HasSubstr(needle));
  };
  expect_error(0, {}, "num_leaves must be >= 1");
  expect_error(3, {{0, 1, 1.0}}, "needs exactly 2 merges, got 1");                  // missing
  expect_error(2, {{0, 1, 1.0}, {2, 0, 2.0}}, "needs exactly 1 merges, got 2");      // extra
  expect_error(3, {{0, 1, 1.0}, {0, 3, 2.0}}, "node 0 is merged twice (merges 0 and 1)");
  expect_error(3, {{0, 1, 1.0}, {3, 2, 0.5}}, "below the height 1 of its child 3");
  expect_error(3, {{0, 1, -1.0}, {3, 2, 0.5}}, "below the height 0 of its child 0");
  expect_error(3, {{0, 4, 1.0}, {3, 2, 2.0}}, "merge 0 refers to node 4");          // future id
  expect_error(3, {{0, -1, 1.0}, {3, 2, 2.0}}, "refers to node -1");
  expect_error(3, {{0, 1, 1.0}, {3, 3, 2.0}}, "merges node 3 with itself");
  expect_error(3, {{0, 1, std::nan("")}, {3, 2, 2.0}}, "non-finite height");
}

TEST(HierarchyTest, FromParentsRejectsBadInput) {
  auto expect_error = [](int32_t L, std::vector<int32_t> p, std::vector<double> hts,
                         const char* needle) {
    auto h = Hierarchy::FromParents(L, p, hts);
    ASSERT_FALSE(h.ok()) << needle;
    EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(h.status().message()), HasSubstr(needle));
  };
  // A cycle 5 <-> 6 in which every internal node still has >= 2 children.
  expect_error(5, {5, 5, 6, 7, 7, 6, 5, -1}, {0, 0, 0, 0, 0, 1, 1, 2}, "cycle");
  // Every node has a parent: no root at all.
  expect_error(3, {3, 3, 4, 4, 3}, {0, 0, 0, 1, 1}, "no node has parent -1");
  expect_error(3, {3, 3, 2, -1}, {0, 0, 0, 1}, "node 2 is its own parent");
  expect_error(3, {3, 3, 4, -1, -1}, {0, 0, 0, 1, 2}, "both have parent -1");
  expect_error(3, {3, 3, 4, 4, 4, 4, -1}, {0, 0, 0, 1, 2, 2, 3}, "between 3 and 5 nodes");
  expect_error(0, {}, {}, "num_leaves must be >= 1");
  expect_error(3, {3, 3, 4, 4, -1}, {0, 0, 0, 3, 2}, "heights must be non-decreasing");
  expect_error(3, {3, 0, 4, 4, -1}, {0, 0, 0, 1, 2}, "which is a leaf");
  expect_error(3, {3, 3, 9, 4, -1}, {0, 0, 0, 1, 2}, "parent 9, outside [0, 5)");
  expect_error(3, {3, 3, 4, 4, -1}, {0, 0.5, 0, 1, 2}, "leaf 1 has height");
  expect_error(3, {3, 4, 4, 4, -1}, {0, 0, 0, 1, 2}, "internal node 3 has 1 child");
  expect_error(3, {3, 3, 3, -1}, {0, 0, 0}, "parent has 4 entries but height has 3");
}

TEST(HierarchyTest, FromParentsAcceptsStarTree) {
  auto h = Hierarchy::FromParents(3, std::vector<int32_t>{3, 3, 3, -1},
                                  std::vector<double>{0, 0, 0, 1});
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_FALSE(h->is_binary());
  EXPECT_THAT(h->ReachableLevels(), ElementsAre(1, 3));
}

TEST(HierarchyTest, FromParentsRenumbersByHeightThenId) {
  // Leaves 0..5; internal nodes with scrambled ids (old id: height {children}):
  //   9: 1 {0,1};  10: 1 {3,4};  7: 2 {10,2};  6: 3 {9,7};  8: 3 {6,5} (root).
  const int32_t L = 6;
  std::vector<int32_t> parent = {9, 9, 7, 10, 10, 8, 8, 6, -1, 6, 7};
  std::vector<double> height = {0, 0, 0, 0, 0, 0, 3, 2, 3, 1, 1};
  std::vector<int32_t> old_to_new;
  auto h = Hierarchy::FromParents(L, parent, height, &old_to_new);
  ASSERT_TRUE(h.ok()) << h.status();
  // Order by (height, old id): 9(1), 10(1), 7(2), 6(3), 8(3): 6 is 8's child
  // and comes first anyway.
  EXPECT_THAT(old_to_new, ElementsAre(0, 1, 2, 3, 4, 5, 9, 8, 10, 6, 7));
  EXPECT_THAT(h->children(6), ElementsAre(0, 1));
  EXPECT_THAT(h->children(7), ElementsAre(3, 4));
  EXPECT_THAT(h->children(8), ElementsAre(2, 7));
  EXPECT_THAT(h->children(9), ElementsAre(6, 8));
  EXPECT_THAT(h->children(10), ElementsAre(5, 9));
  EXPECT_EQ(h->root(), 10);
  for (int32_t v = 0; v < static_cast<int32_t>(parent.size()); ++v) {
    EXPECT_EQ(h->height(old_to_new[v]), height[v]);
    if (parent[v] >= 0) {
      EXPECT_EQ(h->parent(old_to_new[v]), old_to_new[parent[v]]);
    }
  }
}

TEST(HierarchyTest, FromParentsPutsEqualHeightChildBeforeParent) {
  // Old node 4 (h=1) is the child of old node 3 (h=1): despite the smaller
  // id, 3 must come after 4.
  std::vector<int32_t> parent = {4, 4, 3, -1, 3};
  std::vector<double> height = {0, 0, 0, 1, 1};
  std::vector<int32_t> old_to_new;
  auto h = Hierarchy::FromParents(3, parent, height, &old_to_new);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_THAT(old_to_new, ElementsAre(0, 1, 2, 4, 3));
  EXPECT_THAT(h->children(4), ElementsAre(2, 3));
}

TEST(HierarchyTest, NaryCutsAndUnreachableLevels) {
  // Leaves 0..4; A = {0,1,2} at 1; root = {A,3,4} at 2.
  std::vector<int32_t> parent = {5, 5, 5, 6, 6, 6, -1};
  std::vector<double> height = {0, 0, 0, 0, 0, 1, 2};
  auto h = Hierarchy::FromParents(5, parent, height);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_FALSE(h->is_binary());
  EXPECT_THAT(h->ReachableLevels(), ElementsAre(1, 3, 5));
  EXPECT_THAT(*h->CutToK(1), ElementsAre(0, 0, 0, 0, 0));
  EXPECT_THAT(*h->CutToK(3), ElementsAre(0, 0, 0, 1, 2));
  EXPECT_THAT(*h->CutToK(5), ElementsAre(0, 1, 2, 3, 4));
  auto two = h->CutToK(2);
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(two.status().message()), HasSubstr("nearest reachable counts are 1 and 3"));
  auto four = h->CutToK(4);
  ASSERT_FALSE(four.ok());
  EXPECT_THAT(std::string(four.status().message()), HasSubstr("are 3 and 5"));
  EXPECT_FALSE(h->ClusterAtLevel(0, 2).ok());
  // Binarised, children ascending and left-folded: A = {0,1,2} -> (0,1)=5,
  // (5,2)=6; root = {3,4,A} -> (3,4)=7, (7,6)=8.
  std::vector<Merge> m = h->ToMerges();
  ASSERT_EQ(m.size(), 4u);
  const int32_t expect[4][2] = {{0, 1}, {5, 2}, {3, 4}, {7, 6}};
  const double expect_h[4] = {1, 1, 2, 2};
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(m[t].a, expect[t][0]) << t;
    EXPECT_EQ(m[t].b, expect[t][1]) << t;
    EXPECT_EQ(m[t].height, expect_h[t]) << t;
  }
  // The binarised tree cuts like the n-ary one at every reachable level.
  auto bin = Hierarchy::FromMerges(5, m);
  ASSERT_TRUE(bin.ok()) << bin.status();
  for (int32_t k : h->ReachableLevels()) EXPECT_EQ(*bin->CutToK(k), *h->CutToK(k)) << k;
}

TEST(HierarchyTest, RandomBinaryCutsMatchUnionFindReplay) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const int32_t L = 2 + static_cast<int32_t>(rng() % 40);
    const bool ties = trial % 2 == 1;
    std::vector<Merge> merges = RandomMerges(L, rng, ties);
    auto h = Hierarchy::FromMerges(L, merges);
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_TRUE(h->is_binary());
    std::vector<int32_t> levels(L);
    std::iota(levels.begin(), levels.end(), 1);
    EXPECT_EQ(h->ReachableLevels(), levels);
    for (int32_t k = 1; k <= L; ++k) {
      auto cut = h->CutToK(k);
      ASSERT_TRUE(cut.ok()) << cut.status();
      EXPECT_EQ(*cut, ReplayMerges(L, merges, L - k)) << "L=" << L << " k=" << k;
      for (int32_t leaf = 0; leaf < L; leaf += 7) {
        EXPECT_EQ(*h->ClusterAtLevel(leaf, k), (*cut)[leaf]);
      }
    }
    // CutAtHeight: replay every merge with height <= threshold.
    for (const Merge& m : merges) {
      for (double delta : {-1e-9, 0.0, 1e-9}) {
        const double thr = m.height + delta;
        int32_t count = 0;
        while (count < L - 1 && merges[count].height <= thr) ++count;
        EXPECT_EQ(h->CutAtHeight(thr), ReplayMerges(L, merges, count));
      }
    }
  }
}

TEST(HierarchyTest, RandomLcaAndAncestorsMatchBruteForce) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    const int32_t L = 2 + static_cast<int32_t>(rng() % 30);
    auto h = Hierarchy::FromMerges(L, RandomMerges(L, rng));
    ASSERT_TRUE(h.ok());
    auto sets = LeafSets(*h);
    for (int32_t leaf = 0; leaf < L; ++leaf) {
      // Ancestors: exactly the internal nodes whose leaf set holds `leaf`,
      // nearest (smallest) first.
      std::vector<int32_t> expect;
      for (int32_t v = L; v < h->num_nodes(); ++v) {
        if (sets[v].count(leaf)) expect.push_back(v);
      }
      EXPECT_THAT(*h->Ancestors(leaf), ElementsAreArray(expect));
      EXPECT_EQ(h->depth(leaf), static_cast<int32_t>(expect.size()));
    }
    for (int32_t u = 0; u < h->num_nodes(); ++u) {
      for (int32_t v = 0; v < h->num_nodes(); ++v) {
        // Brute force: the smallest node whose leaf set covers both.
        int32_t expect = -1;
        for (int32_t w = 0; w < h->num_nodes() && expect < 0; ++w) {
          if (std::includes(sets[w].begin(), sets[w].end(), sets[u].begin(), sets[u].end()) &&
              std::includes(sets[w].begin(), sets[w].end(), sets[v].begin(), sets[v].end())) {
            expect = w;
          }
        }
        ASSERT_EQ(h->Lca(u, v), expect) << u << " " << v;
      }
    }
  }
}

// Random n-ary tree: contract random internal edges of a binary tree whose
// heights have ties, then check cuts against a replay that merges whole
// nodes in (height, id) order.
TEST(HierarchyTest, RandomNaryCutsMatchReplay) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    const int32_t L = 3 + static_cast<int32_t>(rng() % 30);
    auto bin = Hierarchy::FromMerges(L, RandomMerges(L, rng, /*ties=*/true));
    ASSERT_TRUE(bin.ok());
    // Contract internal nodes into their parent when heights are equal.
    const int32_t n = bin->num_nodes();
    std::vector<int32_t> up(n);
    for (int32_t v = n - 1; v >= 0; --v) {
      const int32_t p = bin->parent(v);
      up[v] = (v >= L && p >= 0 && bin->height(p) == bin->height(v) && rng() % 2) ? up[p] : v;
    }
    std::vector<int32_t> parent(n, -1);
    std::vector<double> height(n);
    for (int32_t v = 0; v < n; ++v) {
      height[v] = bin->height(v);
      const int32_t p = bin->parent(v);
      parent[v] = p < 0 ? -1 : up[p];
    }
    // Drop contracted nodes: compact the surviving ids, shuffled.
    std::vector<int32_t> keep;
    for (int32_t v = L; v < n; ++v) {
      if (up[v] == v) keep.push_back(v);
    }
    std::shuffle(keep.begin(), keep.end(), rng);
    std::vector<int32_t> id(n, -1);
    for (int32_t v = 0; v < L; ++v) id[v] = v;
    for (size_t i = 0; i < keep.size(); ++i) id[keep[i]] = L + static_cast<int32_t>(i);
    const int32_t m = L + static_cast<int32_t>(keep.size());
    std::vector<int32_t> p2(m);
    std::vector<double> h2(m);
    for (int32_t v = 0; v < n; ++v) {
      if (id[v] < 0) continue;
      p2[id[v]] = parent[v] < 0 ? -1 : id[parent[v]];
      h2[id[v]] = height[v];
    }
    auto h = Hierarchy::FromParents(L, p2, h2);
    ASSERT_TRUE(h.ok()) << h.status();
    // Invariants.
    for (int32_t v = L; v < h->num_nodes(); ++v) {
      EXPECT_GE(h->children(v).size(), 2u);
      for (int32_t c : h->children(v)) {
        EXPECT_LT(c, v);
        EXPECT_LE(h->height(c), h->height(v));
      }
      if (v > L) {
        EXPECT_LE(h->height(v - 1), h->height(v));
      }
    }
    // Replay: union whole nodes in id order (= (height, id) order here).
    const int32_t I = h->num_internal();
    for (int32_t r = 0; r <= I; ++r) {
      UnionFind uf(h->num_nodes());
      for (int32_t v = L; v < L + I - r; ++v) {
        for (int32_t c : h->children(v)) uf.Union(c, v);
      }
      std::vector<int32_t> ids(L);
      for (int32_t l = 0; l < L; ++l) ids[l] = uf.Find(l);
      std::vector<int32_t> expect = Canonical(ids);
      const int32_t k = *std::max_element(expect.begin(), expect.end()) + 1;
      auto cut = h->CutToK(k);
      ASSERT_TRUE(cut.ok()) << cut.status();
      EXPECT_EQ(*cut, expect);
    }
    // Reachable levels are exactly the counts hit above; others fail.
    const std::vector<int32_t> levels = h->ReachableLevels();
    std::set<int32_t> reachable(levels.begin(), levels.end());
    EXPECT_EQ(static_cast<int32_t>(reachable.size()), I + 1);
    for (int32_t k = 1; k <= L; ++k) EXPECT_EQ(h->CutToK(k).ok(), reachable.count(k) > 0) << k;
    // ToMerges yields a valid binary tree with the same reachable cuts.
    auto b2 = Hierarchy::FromMerges(L, h->ToMerges());
    ASSERT_TRUE(b2.ok()) << b2.status();
    for (int32_t k : reachable) EXPECT_EQ(*b2->CutToK(k), *h->CutToK(k));
  }
}

TEST(HierarchyTest, UnsortedMergeHeightsCutInHeightOrder) {
  // Merge 0 is higher than merge 1; the merge order is (height, id).
  std::vector<Merge> merges = {{0, 1, 5.0}, {2, 3, 1.0}, {4, 5, 6.0}};
  auto h = Hierarchy::FromMerges(4, merges);
  ASSERT_TRUE(h.ok()) << h.status();
  // k=2 undoes the root; k=3 then undoes the highest remaining node (4).
  EXPECT_THAT(*h->CutToK(2), ElementsAre(0, 0, 1, 1));
  EXPECT_THAT(*h->CutToK(3), ElementsAre(0, 1, 2, 2));
  EXPECT_THAT(h->CutAtHeight(2.0), ElementsAre(0, 1, 2, 2));
}

TEST(HierarchyTest, PointLeafAndMetadata) {
  auto h = Hierarchy::FromMerges(2, std::vector<Merge>{{0, 1, 1.0}});
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h->SetPointLeaf({0, 1, 1}).ok());
  EXPECT_THAT(h->point_leaf(), ElementsAre(0, 1, 1));
  absl::Status bad = h->SetPointLeaf({0, 2});
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("point 1 is assigned to leaf 2"));
  EXPECT_THAT(h->point_leaf(), ElementsAre(0, 1, 1));  // unchanged on error
  h->mutable_metadata()["method"] = "l2h";
  EXPECT_EQ(h->metadata().at("method"), "l2h");
}

TEST(HierarchyTest, LargeCaterpillarIsFast) {
  // A 100k-leaf chain: depth ~1e5, so nothing may recurse or be quadratic.
  const int32_t L = 100000;
  std::vector<Merge> merges;
  merges.push_back({0, 1, 1.0});
  for (int32_t t = 1; t + 1 < L; ++t) merges.push_back({L + t - 1, t + 1, 1.0 + t});
  auto h = Hierarchy::FromMerges(L, merges);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->depth(0), L - 1);
  auto cut = h->CutToK(L / 2);
  ASSERT_TRUE(cut.ok());
  // Leaves 0..L/2 are together; each later leaf is alone.
  EXPECT_EQ((*cut)[L / 2], 0);
  EXPECT_EQ((*cut)[L / 2 + 1], 1);
  EXPECT_EQ((*cut)[L - 1], L / 2 - 1);
  EXPECT_EQ(h->Lca(0, L - 1), h->root());
}

}  // namespace
}  // namespace dendro
