// Checks shared by the refinement tests (hierarchy, gHHC, hierarchical PPCA).
#ifndef DENDRO_TESTS_CORE_REFINE_TEST_UTIL_H_
#define DENDRO_TESTS_CORE_REFINE_TEST_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "core/hierarchy/hierarchy.h"
#include "gtest/gtest.h"

namespace dendro::refine_test {

// from, from + 1, ..., to.
inline std::vector<int32_t> Iota(int32_t from, int32_t to) {
  std::vector<int32_t> v(to - from + 1);
  std::iota(v.begin(), v.end(), from);
  return v;
}

// The leaves below node v (v itself for a leaf), ascending.
inline std::vector<int32_t> LeafSet(const Hierarchy& h, int32_t v) {
  std::vector<int32_t> out;
  std::vector<int32_t> stack = {v};
  while (!stack.empty()) {
    const int32_t u = stack.back();
    stack.pop_back();
    if (h.is_leaf(u)) {
      out.push_back(u);
    } else {
      for (int32_t c : h.children(u)) stack.push_back(c);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// SciPy's fcluster(Z, k, 'maxclust') separates the merges of a linkage only
// where their heights differ.
inline bool AllMergeHeightsDistinct(const Hierarchy& h) {
  std::vector<double> heights;
  for (const Merge& m : h.ToMerges()) heights.push_back(m.height);
  std::sort(heights.begin(), heights.end());
  return std::adjacent_find(heights.begin(), heights.end()) == heights.end();
}

// Binary, and CutToK(k) gives exactly k clusters for every k in [1, L].
inline void ExpectEveryCut(const Hierarchy& h) {
  EXPECT_TRUE(h.is_binary());
  EXPECT_EQ(h.ReachableLevels(), Iota(1, h.num_leaves()));
  for (int32_t k = 1; k <= h.num_leaves(); ++k) {
    auto cut = h.CutToK(k);
    ASSERT_TRUE(cut.ok()) << "k = " << k << ": " << cut.status();
    EXPECT_EQ(*std::max_element(cut->begin(), cut->end()), k - 1);
  }
}

}  // namespace dendro::refine_test

#endif  // DENDRO_TESTS_CORE_REFINE_TEST_UTIL_H_
