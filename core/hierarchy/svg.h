// ToSvg: a picture of a Hierarchy as a standalone SVG document.
//
// Two layouts, chosen by SvgOptions::layout (kAuto: rectangular up to 200
// leaves, radial above, as tree viewers such as iTOL draw large trees):
//   * rectangular: leaves left to right in the tree's depth-first order,
//     height upwards with the root at the top, a height axis with ticks on
//     the left, each leaf's name (or id) written below it, rotated;
//   * radial: the root at the centre, leaves on the outer circle in the same
//     order, radius = how far below the root's height a node is, names
//     around the outside.
// Each internal node is drawn as an "elbow": a bar across its children at
// its height (an arc in the radial layout) and one line per child from the
// child's height up to it. With `color_level` = k, the subtrees of the k
// clusters of CutToK(k) are drawn in k distinct colours and the merges above
// the cut in grey; every leaf label carries its cluster number in a `class`.
//
// Both layouts draw what scipy.cluster.hierarchy.dendrogram draws (with its
// defaults) for the same linkage: the same leaf order (a merge's first
// operand first) and the same legs at the same heights, up to scale.
// tests/core/hierarchy_svg_golden_test.cc checks this against goldens
// recorded from SciPy (tests/golden/svg/make_svg_golden.py).
//
// Invariants: the output is well-formed XML (names are escaped), has exactly
// one <path> per node that has a parent (class "edge") and one <text> per
// leaf (class "leaf"), and is a pure function of the tree and the options
// (numbers printed with fixed precision), so it can be compared byte for
// byte.
#ifndef DENDRO_CORE_HIERARCHY_SVG_H_
#define DENDRO_CORE_HIERARCHY_SVG_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/hierarchy/hierarchy.h"

namespace dendro {

struct SvgOptions {
  enum class Layout { kAuto, kRectangular, kRadial };
  Layout layout = Layout::kAuto;
  // Colour the clusters of the cut into this many clusters; 0: one colour.
  int32_t color_level = 0;
  // Drawn at the top when not empty.
  std::string title;
};

// InvalidArgument if color_level is outside [0, num_leaves] or not a
// reachable level of the tree.
absl::StatusOr<std::string> ToSvg(const Hierarchy& tree, const SvgOptions& options = {});

// Pieces shared by Dendro's SVG writers (this one and tanglegram.h), so the
// pictures look alike and escape text the same way.
// `text` with &, <, >, " and ' replaced by their XML entities.
std::string SvgEscape(std::string_view text);
// A coordinate with two decimals (fixed precision keeps output byte-stable).
std::string SvgNumber(double v);
// Colour `i` (any i >= 0) of the categorical palette used for clusters.
const char* SvgPaletteColour(int64_t i);

}  // namespace dendro

#endif  // DENDRO_CORE_HIERARCHY_SVG_H_
