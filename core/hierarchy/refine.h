// Refinement: making every cut of an n-ary Hierarchy reachable.
//
// An internal node with m > 2 children merges them all at once, so
// Hierarchy::CutToK cannot stop between 1 and m - 1 of those merges, and a
// SciPy linkage (ToLinkage) turns the node into m - 1 merges at one height,
// which fcluster(Z, k, 'maxclust') cannot separate either. RefineToBinary
// replaces every such node by a binary subtree built from the distances
// between its children.
//
// The rule, for each internal node v of the input with children c_1 .. c_m
// (m > 2), H = height(v), h0 = the largest height among the c_i:
//   * Agglomeration: average-linkage (UPGMA) clustering of the m children,
//     each child one item, with the caller's distance between children
//     (their "representatives"). The distance between two groups is the mean
//     of the distances over all pairs of children across them. Each step
//     merges the two groups at the smallest distance; ties go to the pair
//     (a, b), a < b, that is lexicographically smallest, where a group is
//     named by the smallest node id among its children. The last step joins
//     everything into the node that stands for v.
//   * Heights: the j-th step (j = 1 .. m - 1) gets h0 + (H - h0) * j / (m - 1),
//     so the m - 2 new merges lie strictly inside (h0, H), are strictly
//     increasing, and the node for v keeps exactly H. (Up to floating-point
//     resolution: a gap with fewer than m representable numbers yields equal
//     heights, never decreasing ones.) When H == h0 every step is at H: the
//     subtree is still binary and CutToK still reaches every k through its
//     (height, id) merge order, but those merges are tied in height (see
//     separate_tied_heights).
//   * Nodes with two children and leaves are kept as they are.
//
// Invariants of R = RefineToBinary(T, ...):
//   * R.is_binary(); R.ReachableLevels() is 1 .. L.
//   * R.num_leaves() == T.num_leaves(), leaf ids are T's, so any assignment
//     of points to leaves (point_leaf, assign paths) is unchanged; R carries
//     T's point_leaf and metadata plus metadata["refined"] describing the rule.
//   * Every cluster of T (the leaf set below a node) is the leaf set below
//     some node of R (`node_map`), at the same height unless the tie
//     separation below moved it.
//   * Deterministic: a function of T and the distances only.
//   * Node ids of R: merges are emitted in T's node id order (a resolved node
//     as its m - 1 steps in agglomeration order), so R's node for T's node v
//     is R.num_leaves() + (number of merges emitted up to and including v's
//     last one) - 1.
//
// Tie separation (RefineOptions::separate_tied_heights, on by default).
// fcluster's maxclust can produce every k only if all merge heights differ,
// but distinct nodes of T often share a height (hPPCA puts every super-class
// at 1; gHHC nodes clipped to one radius share theirs), and equal heights
// survive the rule above. So after resolving, the internal nodes of R are
// walked in (height, id) order -- CutToK's merge order -- and each maximal
// run of r > 1 equal heights h is spread out without reordering anything:
// with h' the next larger height, the i-th node of the run (i = 0 .. r - 1)
// gets h + (h' - h) * i / r; the topmost run (no h' above, e.g. a root tied
// with its children) is spread below h instead, over (p, h] with p the
// largest height already assigned below it (0 at the leaves), the root
// keeping h. A run at height 0 with nothing below stays tied. Because the
// (height, id) order is unchanged, every CutToK(k) partition of R is the same
// with or without separation; only heights move, each by less than the gap
// to the next distinct height.
#ifndef DENDRO_CORE_HIERARCHY_REFINE_H_
#define DENDRO_CORE_HIERARCHY_REFINE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/hierarchy/hierarchy.h"

namespace dendro {

struct RefineOptions {
  // Spread runs of equal merge heights apart (see above).
  bool separate_tied_heights = true;
  // Names the distance in metadata["refined"], e.g. "Poincare distance
  // between node embeddings".
  std::string distance_name = "caller-supplied distance";
};

// Distance between two nodes of the input tree (called only for two
// children of one node with > 2 children). Must be symmetric in effect (it
// is called with a < b only), finite and >= 0; anything else is
// InvalidArgument.
using NodeDistance = std::function<double(int32_t a, int32_t b)>;

// Resolves every n-ary node of `tree` as described above. `node_map`
// (optional) receives, for each node v of `tree`, the node of the result
// with the same leaf set. Memory: O(m^2) doubles for the largest m.
absl::StatusOr<Hierarchy> RefineToBinary(const Hierarchy& tree, const NodeDistance& distance,
                                         const RefineOptions& options = {},
                                         std::vector<int32_t>* node_map = nullptr);

enum class RefineMetric {
  kSquaredEuclidean,  // ||x - y||^2
  kEuclidean,         // ||x - y||
};

// The same with one representative vector per node: `features` is
// tree.num_nodes() x dim, row-major (rows of nodes that are no child of an
// n-ary node are not read and may hold anything, e.g. zeros). Distances are
// evaluated in blocks through Gram matrices, which is much faster than a
// per-pair callback for nodes with thousands of children. Non-finite values
// in a row that is read are InvalidArgument.
absl::StatusOr<Hierarchy> RefineToBinary(const Hierarchy& tree, absl::Span<const double> features,
                                         int64_t dim, RefineMetric metric,
                                         const RefineOptions& options = {},
                                         std::vector<int32_t>* node_map = nullptr);

// The tie separation step alone, on a binary tree (InvalidArgument
// otherwise). Exposed for tests; RefineToBinary applies it when asked.
absl::StatusOr<Hierarchy> SeparateTiedHeights(const Hierarchy& tree);

}  // namespace dendro

#endif  // DENDRO_CORE_HIERARCHY_REFINE_H_
