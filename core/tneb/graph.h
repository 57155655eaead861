// The graph merge of t-NEB (TnebMerge::kGraph, beyond the paper): component
// similarities from a nearest-neighbour graph of the training rows instead
// of density paths.
//
// In 16 to 64 dimensions the minimum density along a path between two
// component means is dominated by the components' tails and their
// determinants, and a component that holds a few far rows looks like a
// separate peak: the density merges put it at the top of the tree
// (docs/methods.md, "t-NEB in 16 to 64 dimensions"). The graph asks the
// rows instead: rows of two components that belong to one cluster are each
// other's neighbours, rows of two clusters are not.
//
//   * Graph: each of at most kGraphMaxRows training rows (all of them when
//     n <= kGraphMaxRows, else every ceil(n / kGraphMaxRows)-th row, a
//     deterministic subsample) gets directed edges to its kGraphNeighbors
//     nearest other sampled rows (squared Euclidean distance, after the
//     fit's standardisation; ties to the lower row).
//   * Similarity of components a != b (hard assignment of rows to their
//     most likely surviving component): cut(a, b) / min(vol(a), vol(b)),
//     where cut counts the edges with one end in a and the other in b and
//     vol(c) the edges that start in c; in [0, 1]. Pairs with no edge get
//     -dist(mean_a, mean_b) / (1 + largest mean distance), in (-1, 0), so
//     the closer pair of unconnected components still merges first.
//   * Tree: every pair is an edge; the maximum spanning tree and its merges
//     come from ComponentMerges (merge.h) in the density order, with height
//     offset 1 (height = 1 - similarity >= 0).
#ifndef DENDRO_CORE_TNEB_GRAPH_H_
#define DENDRO_CORE_TNEB_GRAPH_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/matrix/matrix.h"
#include "core/tneb/merge.h"
#include "core/tneb/mixture.h"

namespace dendro {

inline constexpr int32_t kGraphNeighbors = 10;
inline constexpr int64_t kGraphMaxRows = 20000;

// The rows the graph is built on: 0..n-1, or every ceil(n / max_rows)-th.
std::vector<int64_t> GraphSampleRows(int64_t n, int64_t max_rows = kGraphMaxRows);

// Bytes the graph stage holds at its peak for n rows of d columns (sampled
// rows as double, the neighbour lists and one block of distances).
int64_t GraphPeakBytes(int64_t n, int64_t d);

// kNN lists (row-major, rows.size() x k, indices into `rows`) of the listed
// rows of x after t. k is clamped to rows.size() - 1. CancelledError when
// `cancelled` returns true (polled per block of rows).
absl::StatusOr<std::vector<int32_t>> NearestNeighborGraph(
    const MatrixView& x, const FeatureTransform& t, absl::Span<const int64_t> rows, int32_t k,
    int num_threads, const std::function<bool()>& cancelled = nullptr);

// Every pair (a < b) of the `num_leaves` components with its graph
// similarity (see the top). leaf_of_row[r] is the component of sampled row
// r; neighbors as NearestNeighborGraph returns them (k per row); means one
// row per component.
std::vector<SimilarityEdge> GraphSimilarities(int32_t num_leaves,
                                              absl::Span<const int32_t> leaf_of_row,
                                              absl::Span<const int32_t> neighbors, int32_t k,
                                              const RowMatrixD& means);

}  // namespace dendro

#endif  // DENDRO_CORE_TNEB_GRAPH_H_
