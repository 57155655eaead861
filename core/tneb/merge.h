// From pairwise path similarities to the t-NEB merge tree.
//
// The graph: nodes are the surviving components; an edge {i, j} exists
// when j is among the k nearest components of i by Euclidean distance of
// their means, or vice versa (each unordered pair once), weighted by the
// pair's path similarity (min log-density along the optimised path).
//
// The tree: Kruskal's maximum spanning tree. Its edges, in decreasing
// similarity, are the merges, i.e. single linkage on the bottleneck
// density: two components are in one cluster at threshold tau exactly when
// some chain of graph edges with similarity >= tau connects them (the
// "water level" picture of the paper, and the same clusters as the
// authors' min-density-on-MST-path matrix thresholded at tau).
//
// Heights: Hierarchy heights must be >= 0 and grow towards the root, while
// similarities fall, so height = height_offset - similarity. t-NEB uses
// height_offset = the largest log-density at a component mean (a path's
// minimum never exceeds the density at its end points, so every height is
// >= 0): a merge's height is how far the water must fall below the highest
// peak for it to happen.
//
// A disconnected graph (possible when groups of more than k components lie
// far apart) is first bridged: for every two connected components of the
// graph, the pair of means (one in each) closest in Euclidean distance gets
// a path as well (BridgingPairs), so the tree always spans all components.
#ifndef DENDRO_CORE_TNEB_MERGE_H_
#define DENDRO_CORE_TNEB_MERGE_H_

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/hierarchy/hierarchy.h"
#include "core/matrix/matrix.h"

namespace dendro {

using ComponentPair = std::pair<int32_t, int32_t>;

// Unordered pairs (a < b) such that b is among the k nearest means of a or
// a among the k nearest of b (ties by lower index). Sorted, no duplicates.
// k is clamped to [0, m - 1]. O(m^2 log m): `cancelled`, if set, is polled
// once per component; once it returns true the search stops and the result
// is incomplete (the caller must discard it).
std::vector<ComponentPair> NearestComponentPairs(const RowMatrixD& means, int32_t k,
                                                 const std::function<bool()>& cancelled = nullptr);

// Pairs that connect the connected components of the graph (nodes 0..m-1,
// edges `pairs`): for every two graph components, their closest pair of
// means (ties by lower indices). Empty when the graph is connected. Up to
// O(m^3) when the graph falls apart into many pieces: `cancelled`, as above,
// is polled once per pair of graph components.
std::vector<ComponentPair> BridgingPairs(const RowMatrixD& means,
                                         absl::Span<const ComponentPair> pairs,
                                         const std::function<bool()>& cancelled = nullptr);

struct SimilarityEdge {
  int32_t a = 0;
  int32_t b = 0;
  double similarity = 0.0;
};

struct MergeTree {
  // L - 1 merges; merge t creates node L + t. Children: the current
  // clusters of the edge's end points, lower-id node first.
  std::vector<Merge> merges;
  std::vector<double> similarity;          // per merge, non-increasing
  std::vector<SimilarityEdge> tree_edges;  // the spanning tree, merge order
};

// Kruskal on edges sorted by decreasing similarity (ties by (a, b)).
// InvalidArgument for out-of-range / self / non-finite edges, or if
// height_offset < max similarity; FailedPrecondition if the edges do not
// connect all `num_nodes` nodes.
absl::StatusOr<MergeTree> MaximumSpanningMerges(int32_t num_nodes,
                                                absl::Span<const SimilarityEdge> edges,
                                                double height_offset);

// The threshold picture of a merge tree. merge_similarity[t] is the
// similarity s_t of merge t (non-increasing), L = merge_similarity.size() + 1
// leaves; after merge t there are L - 1 - t clusters.
//   * Threshold for k clusters (k in [1, L-1]): s_{L-1-k}, the merge that
//     reaches k clusters; cutting at any tau with s_{L-k} < tau <= s_{L-1-k}
//     (s_{L-1} = -infinity) leaves exactly k clusters. See ThresholdsByK.
//   * Jump(k) for k in [2, L-1]: s_{L-1-k} - s_{L-k}, how far the water level
//     falls between reaching k clusters and the next merge. A large jump
//     marks a meaningful k ("large jumps indicate meaningful clusterings",
//     paper section 3).
struct AutoK {
  int32_t k = 0;             // argmax of Jump(k); ties go to the smaller k
  double jump = 0.0;         // Jump(k)
  double second_jump = 0.0;  // the largest jump at any other k (0 if none)
  // jumps[k] = Jump(k) for k in [2, L-1]; entries 0 and 1 are unused (0).
  std::vector<double> jumps;
};

// Persistence merging (an addition to the paper; TnebOptions::merge):
// the same spanning tree, merged in a different order. Going down in
// similarity (the water level), every tree edge joins two clusters whose
// peaks (the largest peak[] of their nodes) are known; the edge's
// persistence is min(peak of one side, peak of the other) - similarity, how
// far the lower of the two density bumps rises above the saddle that joins
// them (0-dimensional persistence of the super-level sets restricted to the
// tree; the "elder rule"). A component whose mean is not a mode of the
// density (its path to its neighbour falls monotonically away from it) has
// persistence 0, a shallow bump in a broad cluster's outskirts a small one,
// and they merge first; two real clusters joined by a saddle far
// below both peaks merge last, even when that saddle lies above the
// outskirts of a broad cluster. Merges are the tree edges in increasing
// persistence (ties by their order in `tree`); MergeTree::similarity is
// -persistence (non-increasing) and height = persistence (height offset 0).
// Cutting to k removes the k - 1 most persistent edges. `tree` must be a
// spanning tree of `peak.size()` nodes in decreasing similarity (as
// MaximumSpanningMerges returns it); InvalidArgument otherwise.
absl::StatusOr<MergeTree> PersistenceMerges(absl::Span<const SimilarityEdge> tree,
                                            absl::Span<const double> peak);

// The tree t-NEB builds from its component graph: MaximumSpanningMerges with
// the height offset max(peak, edge similarities) (the paper's order), or,
// with `persistence`, PersistenceMerges of that spanning tree (offset 0).
// `peak` holds each node's log-density at its mean; `*height_offset`
// receives the offset the heights were taken from.
absl::StatusOr<MergeTree> ComponentMerges(int32_t num_nodes,
                                          absl::Span<const SimilarityEdge> edges,
                                          absl::Span<const double> peak, bool persistence,
                                          double* height_offset);

// FailedPrecondition when L < 3 (no jump to compare).
absl::StatusOr<AutoK> ChooseK(absl::Span<const double> merge_similarity);

// Size L + 1: out[k] = threshold for k clusters for k in [1, L-1],
// out[L] = +infinity (no merge at all), out[0] = NaN (unused).
std::vector<double> ThresholdsByK(absl::Span<const double> merge_similarity);

// Merge similarities of a tree built by MaximumSpanningMerges (or loaded):
// height_offset - height for each internal node, in merge order.
std::vector<double> MergeSimilarities(const Hierarchy& h, double height_offset);

}  // namespace dendro

#endif  // DENDRO_CORE_TNEB_MERGE_H_
