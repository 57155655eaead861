// Stable cluster ids (core/diff/stable_ids.h): ids kept by the same
// clusters, new ids never reused, one-to-one matches above the Jaccard
// threshold, and the cut in ids.
#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/diff/stable_ids.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dendro {
namespace {

using ::testing::HasSubstr;

Hierarchy Tree(int32_t leaves, const std::vector<Merge>& merges,
               std::vector<std::string> names = {}) {
  auto t = Hierarchy::FromMerges(leaves, merges);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!names.empty()) {
    EXPECT_TRUE(t->SetLeafNames(std::move(names)).ok());
  }
  return *std::move(t);
}

// A random binary tree over `leaves` leaves (random pairs merged).
Hierarchy RandomTree(int32_t leaves, std::mt19937* rng, std::vector<std::string> names = {}) {
  std::vector<int32_t> open(leaves);
  std::iota(open.begin(), open.end(), 0);
  std::vector<Merge> merges;
  for (int32_t t = 0; t + 1 < leaves; ++t) {
    std::shuffle(open.begin(), open.end(), *rng);
    const int32_t a = open.back();
    open.pop_back();
    const int32_t b = open.back();
    open.back() = leaves + t;
    merges.push_back({a, b, static_cast<double>(t + 1)});
  }
  return Tree(leaves, merges, std::move(names));
}

// The leaves below each node, as names (or ids).
std::vector<std::set<std::string>> LeafSets(const Hierarchy& t) {
  std::vector<std::set<std::string>> sets(t.num_nodes());
  for (int32_t l = 0; l < t.num_leaves(); ++l) {
    const std::string name = t.leaf_names().empty() ? std::to_string(l) : t.leaf_names()[l];
    for (int32_t v = l; v >= 0; v = t.parent(v)) sets[v].insert(name);
  }
  return sets;
}

TEST(StableIds, FirstTreeNumbersItsNodes) {
  const Hierarchy t = Tree(3, {{0, 1, 1.0}, {3, 2, 2.0}});
  const StableIds ids = FirstStableIds(t);
  EXPECT_EQ(ids.node, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(ids.next, 5);
  EXPECT_TRUE(CheckStableIds(ids, t).ok());
}

TEST(StableIds, CheckRefusesRepeatsRangeAndCount) {
  const Hierarchy t = Tree(2, {{0, 1, 1.0}});
  EXPECT_THAT(CheckStableIds({{0, 0, 1}, 3}, t).message(), HasSubstr("given to two nodes"));
  EXPECT_THAT(CheckStableIds({{0, 1, 3}, 3}, t).message(), HasSubstr("outside [0, 3)"));
  EXPECT_THAT(CheckStableIds({{0, 1}, 3}, t).message(), HasSubstr("2 stable ids"));
}

TEST(StableIds, SameTreeKeepsEveryId) {
  std::mt19937 rng(3);
  const Hierarchy t = RandomTree(40, &rng);
  StableIds prev = FirstStableIds(t);
  std::reverse(prev.node.begin(), prev.node.end());  // any ids
  auto overlap = OverlapByLeaves(t, t);
  ASSERT_TRUE(overlap.ok()) << overlap.status();
  auto m = CarryStableIds(t, prev, t, *overlap);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->ids.node, prev.node);
  EXPECT_EQ(m->ids.next, prev.next);
  EXPECT_EQ(m->kept, t.num_nodes());
  EXPECT_EQ(m->fresh, 0);
}

TEST(StableIds, RenumberedLeavesKeepTheirNamesIds) {
  // The same tree with its classes stored in another order: ids follow the
  // names, not the leaf numbers.
  const Hierarchy a =
      Tree(4, {{0, 1, 1.0}, {2, 3, 2.0}, {4, 5, 3.0}}, {"cat", "dog", "car", "bus"});
  const Hierarchy b =
      Tree(4, {{3, 2, 1.0}, {0, 1, 2.0}, {4, 5, 3.0}}, {"bus", "car", "dog", "cat"});
  const StableIds prev = FirstStableIds(a);
  auto overlap = OverlapByLeaves(a, b);
  ASSERT_TRUE(overlap.ok());
  auto m = CarryStableIds(a, prev, b, *overlap);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->ids.node[3], 0);  // cat
  EXPECT_EQ(m->ids.node[2], 1);  // dog
  EXPECT_EQ(m->ids.node[1], 2);  // car
  EXPECT_EQ(m->ids.node[0], 3);  // bus
  EXPECT_EQ(m->ids.node[4], 4);  // {cat, dog} was a's node 4
  EXPECT_EQ(m->ids.node[5], 5);  // {car, bus}
  EXPECT_EQ(m->ids.node[6], 6);
  EXPECT_EQ(m->fresh, 0);
}

TEST(StableIds, AddedClassGetsNewIdsAndOldOnesStay) {
  // a: ((x, y), z). b adds w next to x: (((x, w), y), z). {x, w} is half x:
  // not the same cluster; {x, w, y} is 2/3 of {x, y}: the same, grown.
  const Hierarchy a = Tree(3, {{0, 1, 1.0}, {3, 2, 2.0}}, {"x", "y", "z"});
  const Hierarchy b = Tree(4, {{0, 3, 0.5}, {4, 1, 1.0}, {5, 2, 2.0}}, {"x", "y", "z", "w"});
  const StableIds prev = FirstStableIds(a);  // x0 y1 z2 {x,y}3 root4, next 5
  auto overlap = OverlapByLeaves(a, b);
  ASSERT_TRUE(overlap.ok());
  auto m = CarryStableIds(a, prev, b, *overlap);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->ids.node[0], 0);  // x
  EXPECT_EQ(m->ids.node[1], 1);  // y
  EXPECT_EQ(m->ids.node[2], 2);  // z
  EXPECT_GE(m->ids.node[3], 5);  // w: new, above every id used before
  EXPECT_GE(m->ids.node[4], 5);  // {x, w}: new
  EXPECT_EQ(m->ids.node[5], 3);  // {x, w, y} ~ {x, y}
  EXPECT_EQ(m->ids.node[6], 4);  // root
  EXPECT_NEAR(m->jaccard[5], 2.0 / 3.0, 1e-12);
  EXPECT_EQ(m->previous_node[4], -1);
  EXPECT_EQ(m->kept, 5);
  EXPECT_EQ(m->fresh, 2);
  EXPECT_EQ(m->ids.next, 7);
  EXPECT_TRUE(CheckStableIds(m->ids, b).ok());
}

TEST(StableIds, GoneIdsAreNeverGivenAgain) {
  // v1 has {x, y}; v2 splits it up; v3 brings it back: a new id, since the
  // cluster of v2 it would match is not there.
  const std::vector<std::string> names = {"x", "y", "z", "w"};
  const Hierarchy v1 = Tree(4, {{0, 1, 1.0}, {2, 3, 1.5}, {4, 5, 2.0}}, names);
  const Hierarchy v2 = Tree(4, {{0, 2, 1.0}, {1, 3, 1.5}, {4, 5, 2.0}}, names);
  const StableIds ids1 = FirstStableIds(v1);
  auto o12 = OverlapByLeaves(v1, v2);
  ASSERT_TRUE(o12.ok());
  auto m2 = CarryStableIds(v1, ids1, v2, *o12);
  ASSERT_TRUE(m2.ok());
  auto o23 = OverlapByLeaves(v2, v1);
  ASSERT_TRUE(o23.ok());
  auto m3 = CarryStableIds(v2, m2->ids, v1, *o23);
  ASSERT_TRUE(m3.ok());
  // {x, y} (node 4 of v1) had id 4 in v1; in v3 it is new again.
  EXPECT_NE(m3->ids.node[4], ids1.node[4]);
  EXPECT_GE(m3->ids.node[4], m2->ids.next);
  for (int32_t l = 0; l < 4; ++l) EXPECT_EQ(m3->ids.node[l], ids1.node[l]);
}

TEST(StableIds, PointsOfAnAppendedDatasetKeepTheirClustersIds) {
  // Three clusters of 100 points; the refit numbers its leaves otherwise,
  // sees 30 more points and moves 3 old ones.
  std::vector<int32_t> pa, pb;
  const int32_t relabel[3] = {2, 0, 1};
  for (int32_t i = 0; i < 300; ++i) {
    pa.push_back(i / 100);
    pb.push_back(relabel[i / 100]);
  }
  pb[0] = relabel[1];
  pb[1] = relabel[2];
  pb[150] = relabel[2];
  for (int32_t i = 0; i < 30; ++i) pb.push_back(relabel[i % 3]);
  Hierarchy a = Tree(3, {{0, 1, 1.0}, {3, 2, 2.0}});  // (0, 1), 2
  Hierarchy b = Tree(3, {{2, 0, 1.0}, {3, 1, 2.0}});  // the same clusters
  ASSERT_TRUE(a.SetPointLeaf(pa).ok());
  ASSERT_TRUE(b.SetPointLeaf(pb).ok());
  auto overlap = OverlapByPoints(a, b);
  ASSERT_TRUE(overlap.ok()) << overlap.status();
  EXPECT_STREQ(overlap->basis, "points");
  const StableIds prev = FirstStableIds(a);
  auto m = CarryStableIds(a, prev, b, *overlap);
  ASSERT_TRUE(m.ok()) << m.status();
  for (int32_t c = 0; c < 3; ++c) EXPECT_EQ(m->ids.node[relabel[c]], c) << c;
  EXPECT_EQ(m->ids.node[3], 3);
  EXPECT_EQ(m->ids.node[4], 4);
  EXPECT_GT(m->jaccard[relabel[0]], 0.85);
  EXPECT_LT(m->jaccard[relabel[0]], 1.0);  // the appended points count in the union
  EXPECT_EQ(m->fresh, 0);
}

TEST(StableIds, PointsNeedAssignments) {
  const Hierarchy a = Tree(2, {{0, 1, 1.0}});
  EXPECT_EQ(OverlapByPoints(a, a).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(StableIds, RandomTreesGiveDistinctIdsAndOnlyGoodMatches) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 30; ++trial) {
    const int32_t n = 5 + trial * 3;
    std::vector<std::string> names_a, names_b;
    for (int32_t i = 0; i < n; ++i) names_a.push_back("c" + std::to_string(i));
    // b drops a few classes, adds a few, and stores them shuffled.
    for (int32_t i = trial % 3; i < n + 2; ++i) names_b.push_back("c" + std::to_string(i));
    std::shuffle(names_b.begin(), names_b.end(), rng);
    const Hierarchy a = RandomTree(n, &rng, names_a);
    const Hierarchy b = RandomTree(static_cast<int32_t>(names_b.size()), &rng, names_b);
    StableIds prev = FirstStableIds(a);
    for (int64_t& id : prev.node) id = id * 7 + 100;
    prev.next = 7 * a.num_nodes() + 100;
    auto overlap = OverlapByLeaves(a, b);
    ASSERT_TRUE(overlap.ok());
    auto m = CarryStableIds(a, prev, b, *overlap);
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_TRUE(CheckStableIds(m->ids, b).ok()) << trial;
    EXPECT_EQ(m->kept + m->fresh, b.num_nodes());
    const auto sa = LeafSets(a), sb = LeafSets(b);
    std::set<int32_t> used;
    for (int32_t y = 0; y < b.num_nodes(); ++y) {
      const int32_t x = m->previous_node[y];
      if (x < 0) {
        EXPECT_GE(m->ids.node[y], prev.next);
        continue;
      }
      EXPECT_TRUE(used.insert(x).second) << "previous node " << x << " matched twice";
      EXPECT_EQ(m->ids.node[y], prev.node[x]);
      std::vector<std::string> inter;
      std::set_intersection(sa[x].begin(), sa[x].end(), sb[y].begin(), sb[y].end(),
                            std::back_inserter(inter));
      const double j = static_cast<double>(inter.size()) /
                       static_cast<double>(sa[x].size() + sb[y].size() - inter.size());
      EXPECT_NEAR(m->jaccard[y], j, 1e-12);
      EXPECT_GT(j, 0.5);
    }
    // A cluster found in both trees is matched (when one of the two is not
    // taken by an equally good match of a cluster with the same leaves).
    std::map<std::set<std::string>, int32_t> in_a;
    for (int32_t x = 0; x < a.num_nodes(); ++x) in_a[sa[x]] = x;
    for (int32_t y = 0; y < b.num_nodes(); ++y) {
      auto it = in_a.find(sb[y]);
      if (it != in_a.end()) EXPECT_EQ(m->previous_node[y], it->second) << trial;
    }
  }
}

TEST(StableIds, LongPathsAreRefusedPastTheWorkBound) {
  // Caterpillars: every leaf's path is the whole tree.
  std::vector<Merge> merges;
  const int32_t n = 300;
  merges.push_back({0, 1, 1.0});
  for (int32_t i = 2; i < n; ++i) merges.push_back({n + i - 2, i, static_cast<double>(i)});
  const Hierarchy t = Tree(n, merges);
  auto overlap = OverlapByLeaves(t, t);
  ASSERT_TRUE(overlap.ok());
  StableIdOptions o;
  o.max_work = 1000;
  EXPECT_EQ(CarryStableIds(t, FirstStableIds(t), t, *overlap, o).status().code(),
            absl::StatusCode::kResourceExhausted);
  auto m = CarryStableIds(t, FirstStableIds(t), t, *overlap);  // the default bound
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->fresh, 0);
}

TEST(StableIds, RefusesBadOptionsAndOverlaps) {
  const Hierarchy t = Tree(2, {{0, 1, 1.0}});
  auto overlap = OverlapByLeaves(t, t);
  ASSERT_TRUE(overlap.ok());
  StableIdOptions o;
  o.min_jaccard = 0.3;
  EXPECT_THAT(CarryStableIds(t, FirstStableIds(t), t, *overlap, o).status().message(),
              HasSubstr("min_jaccard"));
  ClusterOverlap bad = *overlap;
  bad.pairs.push_back({0, 0, 1});  // leaf 0 would share 2 of its 1 items
  EXPECT_THAT(CarryStableIds(t, FirstStableIds(t), t, bad).status().message(),
              HasSubstr("shares 2 items but holds 1"));
  bad = *overlap;
  bad.pairs[0].b_leaf = 5;
  EXPECT_EQ(CarryStableIds(t, FirstStableIds(t), t, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(StableIds, CutsAnswerTheirClustersIds) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 10; ++trial) {
    const Hierarchy t = RandomTree(12, &rng);
    StableIds ids = FirstStableIds(t);
    for (int64_t& id : ids.node) id += 1000;
    ids.next += 1000;
    for (int32_t k = 1; k <= t.num_leaves(); ++k) {
      auto labels = t.CutToK(k);
      auto roots = t.ClusterRootsAtK(k);
      auto stable = StableIdsAtLevel(t, ids, k);
      ASSERT_TRUE(labels.ok() && roots.ok() && stable.ok());
      // The same partition, labelled by the cluster's node.
      std::map<int32_t, int32_t> label_to_root;
      for (int32_t l = 0; l < t.num_leaves(); ++l) {
        auto [it, fresh] = label_to_root.emplace((*labels)[l], (*roots)[l]);
        EXPECT_EQ(it->second, (*roots)[l]);
        EXPECT_EQ((*stable)[l], ids.node[(*roots)[l]]);
        // The root is above the leaf.
        int32_t v = l;
        while (v != (*roots)[l] && v >= 0) v = t.parent(v);
        EXPECT_EQ(v, (*roots)[l]);
      }
      EXPECT_EQ(static_cast<int32_t>(label_to_root.size()), k);
    }
    auto leaves = StableIdsAtLevel(t, ids, 0);
    ASSERT_TRUE(leaves.ok());
    for (int32_t l = 0; l < t.num_leaves(); ++l) EXPECT_EQ((*leaves)[l], 1000 + l);
  }
}

TEST(StableIds, JsonRoundTripsAndIsChecked) {
  const Hierarchy t = Tree(3, {{0, 1, 1.0}, {3, 2, 2.0}});
  const StableIds ids{{9, 3, 4, 12, 0}, 13};
  auto back = ParseStableIdsJson(StableIdsJson(ids), t);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->node, ids.node);
  EXPECT_EQ(back->next, 13);
  EXPECT_FALSE(ParseStableIdsJson("{\"format\":\"dendro.stable_ids\",\"version\":1,\"next\":5,"
                                  "\"node\":[0,1,1,3,4]}",
                                  t)
                   .ok());
  EXPECT_THAT(ParseStableIdsJson("not json", t).status().message(), HasSubstr("JSON"));
  EXPECT_THAT(ParseStableIdsJson(StableIdsJson({{0, 1, 2}, 3}), t).status().message(),
              HasSubstr("3 stable ids"));
}

}  // namespace
}  // namespace dendro
