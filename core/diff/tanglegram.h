// Tanglegrams: two dendrograms facing each other, shared leaves joined.
//
// Layout. Tree A is drawn on the left with its root at the left edge and
// its leaves in a column facing right; tree B is its mirror image on the
// right. Heights run horizontally (each tree scaled to its own root
// height). Every shared leaf (see LeafMatching in diff.h) is joined to its
// partner by a straight line; leaves of one tree only are drawn in grey
// with no line.
//
// Crossing reduction. Two lines cross when their leaves come in opposite
// orders in the two columns, so the number of crossings is the number of
// inversions between the two leaf orders (counted in O(n log n)). Starting
// from both trees' own depth-first orders, each sweep visits B's internal
// nodes bottom-up, then A's, and at each node reorders its children if that
// strictly lowers the crossings. Reordering children only changes the
// relative order of leaves inside the node's subtree, so the change is
// computed from those leaves alone: for a binary node the two orders are
// compared, for an n-ary node the children are sorted by the mean position
// of their partners, then improved by adjacent swaps. Sweeps stop after
// `sweeps` or at the first sweep that changes nothing. Invariants: the
// crossings never increase (after <= before), and two trees with the same
// clusters end with zero crossings.
//
// The SVG has a viewBox and no width or height, so it scales to its
// container; names are escaped and truncated (shorter for large trees); the
// output is a pure function of its inputs.
#ifndef DENDRO_CORE_DIFF_TANGLEGRAM_H_
#define DENDRO_CORE_DIFF_TANGLEGRAM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/diff/diff.h"
#include "core/hierarchy/hierarchy.h"

namespace dendro {

inline constexpr int32_t kDefaultTanglegramSweeps = 8;

struct TanglegramLayout {
  // Leaf ids of each tree, top to bottom, after crossing reduction.
  std::vector<int32_t> order_a, order_b;
  int64_t crossings_before = 0, crossings_after = 0;
  int32_t sweeps = 0;  // sweeps run (the last one changed nothing, unless capped)
};

// Inversions between two orders of the same n items: the pairs (i, j) with
// pos_a[i] < pos_a[j] and pos_b[i] > pos_b[j]. `pos_a` and `pos_b` must be
// permutations of distinct values (their ranks are what counts). O(n log n).
int64_t CountCrossings(absl::Span<const int64_t> pos_a, absl::Span<const int64_t> pos_b);

// InvalidArgument if `matching` names leaves outside the trees.
absl::StatusOr<TanglegramLayout> LayoutTanglegram(const Hierarchy& a, const Hierarchy& b,
                                                  const LeafMatching& matching,
                                                  int32_t sweeps = kDefaultTanglegramSweeps);

struct TanglegramOptions {
  std::string title;                         // drawn at the top when not empty
  std::string a_label = "A", b_label = "B";  // above each tree
};
// InvalidArgument if the layout's orders are not permutations of each
// tree's leaves.
absl::StatusOr<std::string> TanglegramSvg(const Hierarchy& a, const Hierarchy& b,
                                          const LeafMatching& matching,
                                          const TanglegramLayout& layout,
                                          const TanglegramOptions& options = {});

// The tanglegram of a comparison: `report` is DiffHierarchies(a, b), whose
// matching and reduced leaf orders are drawn.
absl::StatusOr<std::string> DiffTanglegramSvg(const Hierarchy& a, const Hierarchy& b,
                                              const DiffReport& report,
                                              const TanglegramOptions& options = {});

}  // namespace dendro

#endif  // DENDRO_CORE_DIFF_TANGLEGRAM_H_
