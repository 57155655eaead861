// Hierarchy <-> the formats people already use.
//
//  * SciPy linkage matrix: (L-1) x 4 float64 rows [a, b, height, leaf count],
//    leaves 0..L-1, row t creates node L+t. Rows are in non-decreasing
//    height (ties in node order), as scipy.cluster.hierarchy.linkage emits
//    them and fcluster/dendrogram expect; row t's node is therefore the
//    tree's node L+t whenever its internal nodes are numbered in height
//    order (every tree built by FromParents, and every tree whose merges
//    were given in height order). n-ary nodes are binarised as a chain of
//    merges at the node's height (see Hierarchy::ToMerges). Written as a
//    .npy file by the I/O layer.
//  * Newick: leaves named by their leaf names when the tree has them (quoted
//    with '...' unless only letters, digits, '.' and '-'), else by their
//    leaf-cluster id; n-ary nodes kept, branch length = parent height -
//    child height. Ends with ";". ParseNewick reads it back (and Newick
//    from other tools).
//  * JSON: the full tree, metadata and (if present) point assignments:
//      {"format": "dendro.hierarchy", "version": 1,
//       "num_leaves": L, "metadata": {...},
//       "nodes": [{"id": v, "parent": p, "height": h, "children": [...]}, ...],
//       "merges": [[a, b, height, count], ...],   // the linkage rows
//       "leaf_names": ["cat", ...],                // optional
//       "stable_ids": [...],                       // optional, one per node
//       "point_leaf": [...]}                       // optional
//    ParseJson accepts exactly what ToJson writes (and rebuilds from
//    "nodes"; "merges" is informational).
#ifndef DENDRO_CORE_HIERARCHY_EXPORT_H_
#define DENDRO_CORE_HIERARCHY_EXPORT_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/hierarchy/hierarchy.h"

namespace dendro {

// Row-major (L-1) x 4 linkage matrix.
std::vector<double> ToLinkage(const Hierarchy& h);
absl::StatusOr<Hierarchy> FromLinkage(int32_t num_leaves,
                                      const std::vector<double>& rows);

std::string ToNewick(const Hierarchy& h);
// A tree in Newick, as ToNewick or other tools write it: quoted or bare
// labels, [comments], optional branch lengths (absent: 1), internal labels
// (ignored). Leaves are numbered in the order they appear, unless their
// labels are exactly the ids 0..L-1 (ToNewick's form without names), which
// they then keep; other labels become leaf names. A node's height is its
// longest branch-length path down to a leaf, so an ultrametric tree keeps
// its heights. Every internal node needs two or more children.
// InvalidArgument names the first problem and its character position.
absl::StatusOr<Hierarchy> ParseNewick(std::string_view text);

// `include_points`: whether to embed point_leaf (can be large).
std::string ToJson(const Hierarchy& h, bool include_points = true);

// The same text as ToJson, handed to `sink` in consecutive pieces of exactly
// `chunk_bytes` (at least 64) except the last, which is shorter or equal and
// never empty. Memory stays at the tree's head (nodes, merges, names) plus
// one chunk however many points there are. Stops at, and returns, the first
// error `sink` returns.
// `stable_ids`, when not empty, are written as "stable_ids" (one per node,
// in node order: a registry's cluster ids, core/diff/stable_ids.h);
// InvalidArgument unless there is one per node. ParseJson ignores them.
absl::Status WriteJson(const Hierarchy& h, bool include_points, size_t chunk_bytes,
                       absl::FunctionRef<absl::Status(std::string_view)> sink,
                       absl::Span<const int64_t> stable_ids = {});
absl::StatusOr<Hierarchy> ParseJson(std::string_view json);

}  // namespace dendro

#endif  // DENDRO_CORE_HIERARCHY_EXPORT_H_
