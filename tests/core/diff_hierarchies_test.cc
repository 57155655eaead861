// DiffHierarchies and the tanglegram: Robinson–Foulds, cophenetic
// correlation and ARI at every k against SciPy/scikit-learn goldens
// (tests/golden/diff/gen_diff_goldens.py), and the properties every diff
// must have: a tree against itself, symmetry, the cluster events of a
// hand-made pair, crossing reduction that never adds crossings, and leaf
// matching by names or ids.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/diff/diff.h"
#include "core/hierarchy/export.h"
#include "core/diff/tanglegram.h"
#include "core/io/atomic_file.h"
#include "core/io/npy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/source_path.h"

namespace dendro {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

const std::string kGoldenDir = "tests/golden/diff/";

Hierarchy LoadLinkage(const std::string& file) {
  absl::StatusOr<NpyArrayF64> z = ReadNpyFloat64(SourcePath(kGoldenDir + file));
  EXPECT_TRUE(z.ok()) << z.status();
  absl::StatusOr<Hierarchy> h = FromLinkage(static_cast<int32_t>(z->shape[0] + 1), z->data);
  EXPECT_TRUE(h.ok()) << h.status();
  return *std::move(h);
}

nlohmann::json Goldens() {
  std::string text;
  EXPECT_TRUE(ReadFileToString(SourcePath(kGoldenDir + "diff_goldens.json"), &text).ok());
  return nlohmann::json::parse(text);
}

// The same tree with every merge's operands swapped: the same clusters, the
// mirror-image leaf order.
Hierarchy Mirrored(const Hierarchy& h) {
  std::vector<Merge> merges = h.ToMerges();
  for (Merge& m : merges) std::swap(m.a, m.b);
  Hierarchy out = *Hierarchy::FromMerges(h.num_leaves(), merges);
  if (!h.leaf_names().empty()) {
    EXPECT_TRUE(out.SetLeafNames(h.leaf_names()).ok());
  }
  return out;
}

// A random binary tree: two random current roots merge at each step.
Hierarchy RandomTree(int32_t n, std::mt19937* rng) {
  std::vector<int32_t> roots(n);
  for (int32_t i = 0; i < n; ++i) roots[i] = i;
  std::vector<Merge> merges;
  for (int32_t t = 0; t + 1 < n; ++t) {
    const size_t i = (*rng)() % roots.size();
    std::swap(roots[i], roots.back());
    const int32_t a = roots.back();
    roots.pop_back();
    const size_t j = (*rng)() % roots.size();
    const int32_t b = roots[j];
    roots[j] = n + t;
    merges.push_back(Merge{a, b, static_cast<double>(t + 1)});
  }
  return *Hierarchy::FromMerges(n, merges);
}

int Count(const DiffReport& r, ClusterEvent::Type t) { return r.event_counts[static_cast<int>(t)]; }

TEST(DiffGoldenTest, MatchesScipyAndDirectRobinsonFoulds) {
  const nlohmann::json goldens = Goldens();
  ASSERT_FALSE(goldens["cases"].empty());
  for (const auto& c : goldens["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const Hierarchy a = LoadLinkage(c["a"]);
    const Hierarchy b = LoadLinkage(c["b"]);
    absl::StatusOr<DiffReport> r = DiffHierarchies(a, b);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->matching.by, LeafMatching::By::kId);
    EXPECT_EQ(r->shared_leaves, c["shared_leaves"].get<int>());
    EXPECT_EQ(r->a_clusters, c["a_clusters"].get<int>());
    EXPECT_EQ(r->b_clusters, c["b_clusters"].get<int>());
    EXPECT_EQ(r->shared_clusters, c["shared_clusters"].get<int>());
    EXPECT_EQ(r->rf, c["rf"].get<int>());
    EXPECT_NEAR(r->rf_normalized, c["rf_normalized"].get<double>(), 1e-9);
    EXPECT_NEAR(r->cophenetic_correlation, c["cophenetic_correlation"].get<double>(), 1e-6);
    EXPECT_FALSE(r->cophenetic_sampled);
    const int n = r->shared_leaves;
    EXPECT_EQ(r->cophenetic_pairs, int64_t{n} * (n - 1) / 2);
    const auto& want = c["ari"];
    ASSERT_EQ(r->ari_leaves.levels.size(), want.size());
    double sum = 0, min = 2;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(r->ari_leaves.levels[i].k, want[i]["k"].get<int>());
      EXPECT_NEAR(r->ari_leaves.levels[i].ari, want[i]["ari"].get<double>(), 1e-9)
          << "k = " << want[i]["k"];
      sum += want[i]["ari"].get<double>();
      min = std::min(min, want[i]["ari"].get<double>());
    }
    EXPECT_NEAR(r->ari_leaves.mean, sum / want.size(), 1e-9);
    EXPECT_NEAR(r->ari_leaves.min, min, 1e-9);
    EXPECT_STREQ(r->ari_basis, "leaves");
    EXPECT_EQ(r->rf, Count(*r, ClusterEvent::Type::kSplit) + Count(*r, ClusterEvent::Type::kGone) +
                         Count(*r, ClusterEvent::Type::kMerged) +
                         Count(*r, ClusterEvent::Type::kNew));
  }
}

TEST(DiffPropertyTest, TreeAgainstItself) {
  const nlohmann::json goldens = Goldens();
  for (const auto& c : goldens["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const Hierarchy a = LoadLinkage(c["a"]);
    for (const Hierarchy& b : {a, Mirrored(a)}) {
      absl::StatusOr<DiffReport> r = DiffHierarchies(a, b);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->rf, 0);
      EXPECT_EQ(r->rf_normalized, 0.0);
      EXPECT_NEAR(r->cophenetic_correlation, 1.0, 1e-12);
      ASSERT_EQ(r->ari_leaves.levels.size(), static_cast<size_t>(a.num_leaves() - 2));
      for (const AriLevel& l : r->ari_leaves.levels) EXPECT_NEAR(l.ari, 1.0, 1e-12) << l.k;
      EXPECT_EQ(Count(*r, ClusterEvent::Type::kStayed), a.num_leaves() - 2);
      EXPECT_EQ(r->events.size(), static_cast<size_t>(a.num_leaves() - 2));
      EXPECT_EQ(r->crossings_after, 0);
    }
    // The mirror image starts with crossings; the reduction removes them all.
    absl::StatusOr<DiffReport> mirrored = DiffHierarchies(a, Mirrored(a));
    ASSERT_TRUE(mirrored.ok());
    EXPECT_GT(mirrored->crossings_before, 0);
    EXPECT_EQ(mirrored->crossings_after, 0);
  }
}

TEST(DiffPropertyTest, SymmetricInAAndB) {
  const nlohmann::json goldens = Goldens();
  for (const auto& c : goldens["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const Hierarchy a = LoadLinkage(c["a"]);
    const Hierarchy b = LoadLinkage(c["b"]);
    absl::StatusOr<DiffReport> ab = DiffHierarchies(a, b);
    absl::StatusOr<DiffReport> ba = DiffHierarchies(b, a);
    ASSERT_TRUE(ab.ok() && ba.ok());
    EXPECT_EQ(ab->rf, ba->rf);
    EXPECT_EQ(ab->rf_normalized, ba->rf_normalized);
    EXPECT_NEAR(ab->cophenetic_correlation, ba->cophenetic_correlation, 1e-12);
    ASSERT_EQ(ab->ari_leaves.levels.size(), ba->ari_leaves.levels.size());
    for (size_t i = 0; i < ab->ari_leaves.levels.size(); ++i) {
      EXPECT_NEAR(ab->ari_leaves.levels[i].ari, ba->ari_leaves.levels[i].ari, 1e-12);
    }
    // Events mirror: A's splits are B->A's merges, gone is new.
    using T = ClusterEvent::Type;
    EXPECT_EQ(Count(*ab, T::kSplit), Count(*ba, T::kMerged));
    EXPECT_EQ(Count(*ab, T::kMerged), Count(*ba, T::kSplit));
    EXPECT_EQ(Count(*ab, T::kGone), Count(*ba, T::kNew));
    EXPECT_EQ(Count(*ab, T::kNew), Count(*ba, T::kGone));
    EXPECT_EQ(Count(*ab, T::kStayed), Count(*ba, T::kStayed));
    EXPECT_EQ(Count(*ab, T::kMoved), Count(*ba, T::kMoved));
  }
}

// A pair of trees over leaves 0..13 built to show each kind of event once:
//   A: root(X = (0 1 2 3), P = (Z = (4 5), 6), 7, C1 = (8 9), C2 = (10 11),
//           S = (12 13))
//   B: root(U = (0 1), V = (2 3), P' = (Z = (4 5), 7), 6,
//           Y = (8 9 10 11), S = (12 13))
// X is split into U and V (both new), Z moved from P to P' (P gone, P'
// new), C1 and C2 merged into Y (both gone), S stayed.
struct EventTrees {
  Hierarchy a, b;
  // Node ids after FromParents' renumbering.
  int32_t x, z_a, p, c1, c2, s_a;
  int32_t u, v, z_b, p2, y, s_b;
};

EventTrees MakeEventTrees() {
  // A: nodes 14 X, 15 Z, 16 P, 17 C1, 18 C2, 19 S, 20 root.
  std::vector<int32_t> pa = {14, 14, 14, 14, 15, 15, 16, 20, 17, 17, 18,
                             18, 19, 19, 20, 16, 20, 20, 20, 20, -1};
  std::vector<double> ha = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 2, 1, 1, 1, 3};
  // B: nodes 14 U, 15 V, 16 Z, 17 P', 18 Y, 19 S, 20 root.
  std::vector<int32_t> pb = {14, 14, 15, 15, 16, 16, 20, 17, 18, 18, 18,
                             18, 19, 19, 20, 20, 17, 20, 20, 20, -1};
  std::vector<double> hb = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 1, 3};
  std::vector<int32_t> ma, mb;
  Hierarchy a = *Hierarchy::FromParents(14, pa, ha, &ma);
  Hierarchy b = *Hierarchy::FromParents(14, pb, hb, &mb);
  return EventTrees{a,      b,      ma[14], ma[15], ma[16], ma[17], ma[18],
                    ma[19], mb[14], mb[15], mb[16], mb[17], mb[18], mb[19]};
}

const ClusterEvent* Find(const DiffReport& r, ClusterEvent::Type t, int32_t a_node,
                         int32_t b_node) {
  for (const ClusterEvent& e : r.events) {
    if (e.type == t && e.a_node == a_node && e.b_node == b_node) return &e;
  }
  return nullptr;
}

TEST(DiffEventsTest, HandMadeSplitMergeMove) {
  EventTrees t = MakeEventTrees();
  std::vector<int32_t> points;  // two points per leaf
  for (int32_t l = 0; l < 14; ++l) points.insert(points.end(), {l, l});
  ASSERT_TRUE(t.a.SetPointLeaf(points).ok());
  absl::StatusOr<DiffReport> r = DiffHierarchies(t.a, t.b);
  ASSERT_TRUE(r.ok()) << r.status();
  using T = ClusterEvent::Type;
  EXPECT_EQ(Count(*r, T::kStayed), 1);
  EXPECT_EQ(Count(*r, T::kMoved), 1);
  EXPECT_EQ(Count(*r, T::kSplit), 1);
  EXPECT_EQ(Count(*r, T::kMerged), 1);
  EXPECT_EQ(Count(*r, T::kNew), 3);
  EXPECT_EQ(Count(*r, T::kGone), 3);
  EXPECT_EQ(r->events.size(), 10u);
  EXPECT_EQ(r->a_clusters, 6);
  EXPECT_EQ(r->b_clusters, 6);
  EXPECT_EQ(r->rf, 8);

  const ClusterEvent* split = Find(*r, T::kSplit, t.x, -1);
  ASSERT_NE(split, nullptr);
  EXPECT_EQ(split->leaves, 4);
  EXPECT_EQ(split->a_points, 8);
  EXPECT_EQ(split->b_points, -1);
  ASSERT_EQ(split->parts.size(), 2u);
  EXPECT_THAT((std::vector<int32_t>{split->parts[0].node, split->parts[1].node}),
              UnorderedElementsAre(t.u, t.v));
  EXPECT_EQ(split->parts[0].leaves, 2);
  EXPECT_DOUBLE_EQ(split->best_jaccard, 0.5);
  EXPECT_THAT(split->example_leaves, ElementsAre("0", "1", "2", "3"));

  const ClusterEvent* merged = Find(*r, T::kMerged, -1, t.y);
  ASSERT_NE(merged, nullptr);
  EXPECT_EQ(merged->leaves, 4);
  ASSERT_EQ(merged->parts.size(), 2u);
  EXPECT_THAT((std::vector<int32_t>{merged->parts[0].node, merged->parts[1].node}),
              UnorderedElementsAre(t.c1, t.c2));

  const ClusterEvent* moved = Find(*r, T::kMoved, t.z_a, t.z_b);
  ASSERT_NE(moved, nullptr);
  EXPECT_EQ(moved->leaves, 2);
  EXPECT_EQ(moved->a_points, 4);
  EXPECT_EQ(moved->best_jaccard, 1.0);

  EXPECT_NE(Find(*r, T::kStayed, t.s_a, t.s_b), nullptr);
  EXPECT_NE(Find(*r, T::kGone, t.p, -1), nullptr);
  EXPECT_NE(Find(*r, T::kGone, t.c1, -1), nullptr);
  EXPECT_NE(Find(*r, T::kGone, t.c2, -1), nullptr);
  EXPECT_NE(Find(*r, T::kNew, -1, t.u), nullptr);
  EXPECT_NE(Find(*r, T::kNew, -1, t.v), nullptr);
  EXPECT_NE(Find(*r, T::kNew, -1, t.p2), nullptr);

  // The other way round, splits and merges trade places.
  absl::StatusOr<DiffReport> back = DiffHierarchies(t.b, t.a);
  ASSERT_TRUE(back.ok());
  EXPECT_NE(Find(*back, T::kMerged, -1, t.x), nullptr);
  EXPECT_NE(Find(*back, T::kSplit, t.y, -1), nullptr);
  EXPECT_NE(Find(*back, T::kMoved, t.z_b, t.z_a), nullptr);

  // Presentation order: changes before "stayed", larger first.
  const std::vector<size_t> order = EventsBySize(*r);
  ASSERT_EQ(order.size(), r->events.size());
  EXPECT_EQ(r->events[order.back()].type, T::kStayed);
  EXPECT_EQ(r->events[order.front()].leaves, 4);
}

TEST(DiffEventsTest, NaryTreesSkipUnreachableLevels) {
  EventTrees t = MakeEventTrees();
  absl::StatusOr<DiffReport> r = DiffHierarchies(t.a, t.b);
  ASSERT_TRUE(r.ok());
  std::vector<int32_t> ka = t.a.ReachableLevels(), kb = t.b.ReachableLevels();
  for (const AriLevel& l : r->ari_leaves.levels) {
    EXPECT_TRUE(std::binary_search(ka.begin(), ka.end(), l.k)) << l.k;
    EXPECT_TRUE(std::binary_search(kb.begin(), kb.end(), l.k)) << l.k;
    EXPECT_GE(l.k, 2);
    EXPECT_LE(l.k, 13);
  }
  EXPECT_EQ(r->ari_leaves.levels_total, static_cast<int32_t>(r->ari_leaves.levels.size()));
}

TEST(DiffMatchingTest, NamesThenIds) {
  // ((p, q), (r, (s, t))) in A; B is the same tree with its leaves numbered
  // differently, so only names show that they agree.
  Hierarchy a = *Hierarchy::FromMerges(5, {{3, 4, 1}, {0, 1, 2}, {2, 5, 3}, {6, 7, 4}});
  ASSERT_TRUE(a.SetLeafNames({"p", "q", "r", "s", "t"}).ok());
  // B's leaf i is named names_b[i]: t s r q p.
  Hierarchy b = *Hierarchy::FromMerges(5, {{1, 0, 1}, {4, 3, 2}, {2, 5, 3}, {6, 7, 4}});
  ASSERT_TRUE(b.SetLeafNames({"t", "s", "r", "q", "p"}).ok());
  absl::StatusOr<DiffReport> by_name = DiffHierarchies(a, b);
  ASSERT_TRUE(by_name.ok()) << by_name.status();
  EXPECT_EQ(by_name->matching.by, LeafMatching::By::kName);
  EXPECT_THAT(by_name->matching.b_leaf, ElementsAre(4, 3, 2, 1, 0));
  EXPECT_EQ(by_name->rf, 0);
  EXPECT_NEAR(by_name->cophenetic_correlation, 1.0, 1e-12);

  Hierarchy b_ids = b;
  ASSERT_TRUE(b_ids.SetLeafNames({}).ok());
  absl::StatusOr<DiffReport> by_id = DiffHierarchies(a, b_ids);
  ASSERT_TRUE(by_id.ok());
  EXPECT_EQ(by_id->matching.by, LeafMatching::By::kId);
  EXPECT_GT(by_id->rf, 0);
  EXPECT_THAT(DiffReportJson(*by_id), HasSubstr("\"matching\":\"ids\""));
  EXPECT_THAT(DiffReportJson(*by_name), HasSubstr("\"matching\":\"names\""));

  // Partly overlapping names: the shared ones only.
  Hierarchy c = *Hierarchy::FromMerges(4, {{0, 1, 1}, {2, 3, 2}, {4, 5, 3}});
  ASSERT_TRUE(c.SetLeafNames({"q", "p", "x", "s"}).ok());
  absl::StatusOr<DiffReport> partial = DiffHierarchies(a, c);
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(partial->shared_leaves, 3);
  EXPECT_EQ(partial->matching.only_in_a, 2);
  EXPECT_EQ(partial->matching.only_in_b, 1);
  EXPECT_THAT(partial->matching.a_leaf, ElementsAre(0, 1, 3));
  EXPECT_THAT(partial->matching.b_leaf, ElementsAre(1, 0, 3));

  // Ambiguous or too few shared names are refused.
  Hierarchy dup = c;
  ASSERT_TRUE(dup.SetLeafNames({"q", "q", "x", "s"}).ok());
  EXPECT_THAT(DiffHierarchies(a, dup).status().message(), HasSubstr("names two leaves 'q'"));
  Hierarchy other = c;
  ASSERT_TRUE(other.SetLeafNames({"w", "x", "y", "z"}).ok());
  EXPECT_EQ(DiffHierarchies(a, other).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DiffRestrictTest, ContractsNodesLeftWithOneChild) {
  // ((0, 1), (2, 3)) at heights 1, 2, 3, keeping 0, 2, 3: (0, (2, 3)).
  Hierarchy h = *Hierarchy::FromMerges(4, {{0, 1, 1}, {2, 3, 2}, {4, 5, 3}});
  absl::StatusOr<RestrictedTree> r = RestrictToLeaves(h, {0, 2, 3});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tree.num_leaves(), 3);
  EXPECT_EQ(r->tree.num_nodes(), 5);
  EXPECT_EQ(r->tree.height(r->tree.root()), 3);
  EXPECT_EQ(r->tree.Lca(1, 2), 3);
  EXPECT_EQ(r->tree.height(3), 2);
  EXPECT_THAT(r->original, ElementsAre(0, 2, 3, 5, 6));
  EXPECT_FALSE(RestrictToLeaves(h, {0, 0}).ok());
  EXPECT_FALSE(RestrictToLeaves(h, {4}).ok());
}

TEST(DiffPointsTest, PointBasisWhenBothTreesHaveTheSamePoints) {
  const Hierarchy base = LoadLinkage("groups_30_a.npy");
  Hierarchy a = base, b = LoadLinkage("groups_30_b.npy");
  std::vector<int32_t> points;
  for (int32_t i = 0; i < 90; ++i) points.push_back(i % 30);
  ASSERT_TRUE(a.SetPointLeaf(points).ok());
  ASSERT_TRUE(b.SetPointLeaf(points).ok());
  absl::StatusOr<DiffReport> r = DiffHierarchies(a, b);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->has_point_ari);
  EXPECT_STREQ(r->ari_basis, "points");
  EXPECT_EQ(r->points, 90);
  EXPECT_EQ(r->ari_mean, r->ari_points.mean);
  // k runs to L for points (the leaf level is informative there).
  EXPECT_EQ(r->ari_points.levels.back().k, 30);
  EXPECT_EQ(r->ari_points.levels.size(), 29u);

  absl::StatusOr<DiffReport> self = DiffHierarchies(a, a);
  ASSERT_TRUE(self.ok());
  for (const AriLevel& l : self->ari_points.levels) EXPECT_NEAR(l.ari, 1.0, 1e-12);

  // Different point counts: leaves only.
  ASSERT_TRUE(b.SetPointLeaf(std::vector<int32_t>(points.begin(), points.end() - 1)).ok());
  absl::StatusOr<DiffReport> mismatch = DiffHierarchies(a, b);
  ASSERT_TRUE(mismatch.ok());
  EXPECT_FALSE(mismatch->has_point_ari);
  EXPECT_STREQ(mismatch->ari_basis, "leaves");
}

TEST(DiffCopheneticTest, SamplesPairsAboveTheBound) {
  std::mt19937 rng(5);
  const Hierarchy a = RandomTree(kMaxExactCopheneticLeaves + 100, &rng);
  absl::StatusOr<DiffReport> r = DiffHierarchies(a, a);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->cophenetic_sampled);
  EXPECT_EQ(r->cophenetic_pairs, kCopheneticSamplePairs);
  EXPECT_NEAR(r->cophenetic_correlation, 1.0, 1e-12);
  EXPECT_LE(r->ari_leaves.levels.size(), static_cast<size_t>(kMaxAriLevels));
  EXPECT_EQ(r->ari_leaves.levels_total, kMaxExactCopheneticLeaves + 100 - 2);
  EXPECT_EQ(r->ari_leaves.levels.front().k, 2);
  EXPECT_EQ(r->ari_leaves.levels.back().k, kMaxExactCopheneticLeaves + 99);
  // The sample is fixed: the same value twice.
  const Hierarchy b = RandomTree(kMaxExactCopheneticLeaves + 100, &rng);
  absl::StatusOr<DiffReport> r1 = DiffHierarchies(a, b);
  absl::StatusOr<DiffReport> r2 = DiffHierarchies(a, b);
  ASSERT_TRUE(r1.ok() && r2.ok());
  EXPECT_EQ(r1->cophenetic_correlation, r2->cophenetic_correlation);
}

TEST(DiffCopheneticTest, UndefinedForTwoLeaves) {
  Hierarchy h = *Hierarchy::FromMerges(2, {{0, 1, 1}});
  absl::StatusOr<DiffReport> r = DiffHierarchies(h, h);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(std::isnan(r->cophenetic_correlation));
  EXPECT_TRUE(r->ari_leaves.levels.empty());
  EXPECT_TRUE(std::isnan(r->ari_mean));
  const nlohmann::json j = nlohmann::json::parse(DiffReportJson(*r));
  EXPECT_TRUE(j["cophenetic_correlation"]["value"].is_null());
  EXPECT_TRUE(j["ari"]["mean"].is_null());
  EXPECT_EQ(j["robinson_foulds"]["distance"], 0);
}

TEST(TanglegramTest, CountCrossingsIsInversionCount) {
  std::mt19937 rng(11);
  for (int n : {0, 1, 2, 7, 50, 300}) {
    std::vector<int64_t> pa(n), pb(n);
    for (int i = 0; i < n; ++i) pa[i] = pb[i] = i;
    std::shuffle(pa.begin(), pa.end(), rng);
    std::shuffle(pb.begin(), pb.end(), rng);
    int64_t brute = 0;
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) brute += pa[i] < pa[j] && pb[i] > pb[j];
    }
    EXPECT_EQ(CountCrossings(pa, pb), brute) << n;
  }
}

TEST(TanglegramTest, ReductionNeverAddsCrossings) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    const int32_t na = 3 + static_cast<int32_t>(rng() % 60);
    const int32_t nb = 3 + static_cast<int32_t>(rng() % 60);
    const Hierarchy a = RandomTree(na, &rng), b = RandomTree(nb, &rng);
    absl::StatusOr<LeafMatching> m = MatchLeaves(a, b);
    ASSERT_TRUE(m.ok());
    for (int32_t sweeps : {0, 1, kDefaultTanglegramSweeps}) {
      absl::StatusOr<TanglegramLayout> l = LayoutTanglegram(a, b, *m, sweeps);
      ASSERT_TRUE(l.ok());
      EXPECT_LE(l->crossings_after, l->crossings_before) << trial;
      EXPECT_LE(l->sweeps, sweeps);
      if (sweeps == 0) {
        EXPECT_EQ(l->crossings_after, l->crossings_before);
      }
      // The reported count is that of the returned orders.
      std::vector<int64_t> pos_a(na), pos_b(nb), pa, pb;
      for (size_t i = 0; i < l->order_a.size(); ++i) pos_a[l->order_a[i]] = i;
      for (size_t i = 0; i < l->order_b.size(); ++i) pos_b[l->order_b[i]] = i;
      for (size_t i = 0; i < m->a_leaf.size(); ++i) {
        pa.push_back(pos_a[m->a_leaf[i]]);
        pb.push_back(pos_b[m->b_leaf[i]]);
      }
      EXPECT_EQ(CountCrossings(pa, pb), l->crossings_after);
    }
  }
}

TEST(TanglegramTest, SvgScalesEscapesAndTruncates) {
  EventTrees t = MakeEventTrees();
  std::vector<std::string> names;
  for (int i = 0; i < 14; ++i) names.push_back(absl::StrCat("leaf<", i, ">&"));
  names[0] = std::string(80, 'x');
  ASSERT_TRUE(t.a.SetLeafNames(names).ok());
  ASSERT_TRUE(t.b.SetLeafNames(names).ok());
  absl::StatusOr<LeafMatching> m = MatchLeaves(t.a, t.b);
  ASSERT_TRUE(m.ok());
  absl::StatusOr<TanglegramLayout> l = LayoutTanglegram(t.a, t.b, *m);
  ASSERT_TRUE(l.ok());
  TanglegramOptions options;
  options.title = "v1 <-> v2";
  absl::StatusOr<std::string> svg = TanglegramSvg(t.a, t.b, *m, *l, options);
  ASSERT_TRUE(svg.ok()) << svg.status();
  EXPECT_THAT(*svg, HasSubstr("viewBox=\"0 0 "));
  const size_t open = svg->find("<svg");
  const std::string open_tag = svg->substr(open, svg->find('>', open) - open);
  EXPECT_THAT(open_tag, Not(HasSubstr(" width=")));
  EXPECT_THAT(open_tag, Not(HasSubstr(" height=")));
  EXPECT_THAT(*svg, HasSubstr("leaf&lt;3&gt;&amp;"));
  EXPECT_THAT(*svg, HasSubstr("v1 &lt;-&gt; v2"));
  EXPECT_THAT(*svg, Not(HasSubstr(std::string(80, 'x'))));
  EXPECT_THAT(*svg, HasSubstr(std::string(24, 'x') + "\u2026"));
  // One link per shared leaf.
  int links = 0;
  for (size_t at = svg->find("<line "); at != std::string::npos; at = svg->find("<line ", at + 1)) {
    ++links;
  }
  EXPECT_EQ(links, 14);
  // Deterministic.
  EXPECT_EQ(*svg, *TanglegramSvg(t.a, t.b, *m, *l, options));
  // A layout of other trees is refused.
  TanglegramLayout bad = *l;
  bad.order_a.pop_back();
  EXPECT_FALSE(TanglegramSvg(t.a, t.b, *m, bad).ok());
}

TEST(DiffJsonTest, ReportFields) {
  EventTrees t = MakeEventTrees();
  absl::StatusOr<DiffReport> r = DiffHierarchies(t.a, t.b);
  ASSERT_TRUE(r.ok());
  const nlohmann::json j = nlohmann::json::parse(DiffReportJson(*r));
  EXPECT_EQ(j["format"], "dendro.diff");
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["shared_leaves"], 14);
  EXPECT_EQ(j["robinson_foulds"]["distance"], 8);
  EXPECT_EQ(j["events"]["counts"]["split"], 1);
  EXPECT_EQ(j["events"]["counts"]["new"], 3);
  EXPECT_EQ(j["events"]["list"].size(), 10u);
  EXPECT_EQ(j["events"]["list"].back()["type"], "stayed");
  EXPECT_EQ(j["ari"]["basis"], "leaves");
  EXPECT_TRUE(j["ari"]["leaves"]["levels"].is_array());
  EXPECT_FALSE(j["ari"].contains("points"));
  EXPECT_LE(j["tanglegram"]["crossings_after"], j["tanglegram"]["crossings_before"]);
}

}  // namespace
}  // namespace dendro
