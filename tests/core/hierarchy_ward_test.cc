// WardTree against a direct implementation of Ward's rule: the O(L^3)
// greedy loop that recomputes every pair's delta from the groups' sizes and
// means before each merge. The nearest-neighbour chain must give the same
// clusters at every cut and the same merge heights.
#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "core/hierarchy/ward.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dendro {
namespace {

using ::testing::HasSubstr;

struct Reference {
  std::vector<double> heights;                    // merge order
  std::vector<std::set<std::set<int32_t>>> cuts;  // cuts[k] for k = 1 .. L
};

Reference GreedyWard(std::vector<double> size, std::vector<double> mean, int64_t dim) {
  const int32_t n = static_cast<int32_t>(size.size());
  std::vector<std::set<int32_t>> members(n);
  for (int32_t i = 0; i < n; ++i) members[i] = {i};
  std::vector<char> open(n, 1);
  Reference ref;
  ref.cuts.resize(n + 1);
  auto record = [&](int32_t k) {
    for (int32_t i = 0; i < n; ++i) {
      if (open[i]) ref.cuts[k].insert(members[i]);
    }
  };
  record(n);
  for (int32_t k = n; k > 1; --k) {
    double best = INFINITY;
    int32_t ba = -1, bb = -1;
    for (int32_t a = 0; a < n; ++a) {
      for (int32_t b = a + 1; b < n; ++b) {
        if (!open[a] || !open[b]) continue;
        double sq = 0;
        for (int64_t c = 0; c < dim; ++c) {
          const double d = mean[a * dim + c] - mean[b * dim + c];
          sq += d * d;
        }
        const double delta = size[a] * size[b] / (size[a] + size[b]) * sq;
        if (delta < best) {
          best = delta;
          ba = a;
          bb = b;
        }
      }
    }
    for (int64_t c = 0; c < dim; ++c) {
      mean[ba * dim + c] =
          (size[ba] * mean[ba * dim + c] + size[bb] * mean[bb * dim + c]) / (size[ba] + size[bb]);
    }
    size[ba] += size[bb];
    members[ba].insert(members[bb].begin(), members[bb].end());
    open[bb] = 0;
    ref.heights.push_back(std::sqrt(2 * best));
    record(k - 1);
  }
  return ref;
}

std::set<std::set<int32_t>> CutSets(const Hierarchy& tree, int32_t k) {
  auto labels = tree.CutToK(k);
  EXPECT_TRUE(labels.ok()) << labels.status();
  std::vector<std::set<int32_t>> by_label(tree.num_leaves());
  for (int32_t leaf = 0; leaf < tree.num_leaves(); ++leaf) by_label[(*labels)[leaf]].insert(leaf);
  std::set<std::set<int32_t>> out;
  for (auto& s : by_label) {
    if (!s.empty()) out.insert(s);
  }
  return out;
}

TEST(WardTree, MatchesTheGreedyRuleOnRandomGroups) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> count(1, 9);
    std::normal_distribution<double> normal(0.0, 1.0);
    const int32_t n = 2 + static_cast<int32_t>(seed % 37);
    const int64_t dim = 1 + seed % 5;
    std::vector<double> size(n), mean(n * dim);
    for (auto& s : size) s = count(rng);
    for (auto& m : mean) m = normal(rng);
    const Reference want = GreedyWard(size, mean, dim);
    auto tree = WardTree(size, mean, dim);
    ASSERT_TRUE(tree.ok()) << tree.status();
    ASSERT_EQ(tree->num_leaves(), n);
    EXPECT_TRUE(tree->is_binary());
    std::vector<double> heights;
    for (const Merge& m : tree->ToMerges()) heights.push_back(m.height);
    ASSERT_EQ(heights.size(), want.heights.size());
    for (size_t t = 0; t < heights.size(); ++t) {
      EXPECT_NEAR(heights[t], want.heights[t], 1e-9 * (1 + want.heights[t]))
          << "seed " << seed << " merge " << t;
    }
    for (int32_t k = 1; k <= n; ++k) {
      EXPECT_EQ(CutSets(*tree, k), want.cuts[k]) << "seed " << seed << " k " << k;
    }
  }
}

// Single points: the first merge is the closest pair at their Euclidean
// distance (SciPy's ward height for two singletons), and two far-apart
// tight pairs join last.
TEST(WardTree, SingletonsAreSciPysWard) {
  const std::vector<double> mean = {0, 0, 0.3, 0, 10, 0, 10.5, 0};
  auto tree = WardTree({1, 1, 1, 1}, mean, 2);
  ASSERT_TRUE(tree.ok()) << tree.status();
  const std::vector<Merge> merges = tree->ToMerges();
  EXPECT_EQ(std::set<int32_t>({merges[0].a, merges[0].b}), std::set<int32_t>({0, 1}));
  EXPECT_NEAR(merges[0].height, 0.3, 1e-12);
  EXPECT_NEAR(merges[1].height, 0.5, 1e-12);
  // Two groups of 2 with means 0.15 and 10.25 apart by 10.1: delta = 2*2/4 * 10.1^2.
  EXPECT_NEAR(merges[2].height, std::sqrt(2 * 1.0 * 10.1 * 10.1), 1e-9);
}

// Sizes weigh: a heavy group pulls the merge it takes part in later.
TEST(WardTree, LargerGroupsMergeLater) {
  // Leaf 0 at 0, leaf 1 at 1 (size 100), leaf 2 at -1.2 (size 1).
  auto tree = WardTree({1, 100, 1}, {0, 1, -1.2}, 1);
  ASSERT_TRUE(tree.ok());
  const std::vector<Merge> merges = tree->ToMerges();
  EXPECT_EQ(std::set<int32_t>({merges[0].a, merges[0].b}), std::set<int32_t>({0, 2}));
}

TEST(WardTree, OneGroupIsALeaf) {
  auto tree = WardTree({3}, {1, 2}, 2);
  ASSERT_TRUE(tree.ok());
  EXPECT_EQ(tree->num_nodes(), 1);
}

TEST(WardTree, RefusesBadInput) {
  EXPECT_THAT(WardTree({}, {}, 2).status().message(), HasSubstr("at least one group"));
  EXPECT_THAT(WardTree({1, 1}, {0, 1, 2}, 2).status().message(), HasSubstr("expected 2 x 2"));
  EXPECT_THAT(WardTree({1, 0}, {0, 1}, 1).status().message(), HasSubstr("group 1 has size 0"));
  EXPECT_THAT(WardTree({1, 1}, {0, NAN}, 1).status().message(), HasSubstr("non-finite"));
}

}  // namespace
}  // namespace dendro
