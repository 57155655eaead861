// gHHC initialisation (section 4.2): average-linkage agglomerative
// clustering over a sample of the points, internal nodes at the mean
// direction of their descendants with a norm that decreases logarithmically
// with the merge order. Internal to core/ghhc; exposed for tests.
#ifndef DENDRO_CORE_GHHC_INIT_H_
#define DENDRO_CORE_GHHC_INIT_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "core/ghhc/objective.h"

namespace dendro::ghhc {

// One agglomeration in SciPy's linkage convention: clusters a < b (ids below
// s are points, s + t is the cluster made by merge t) join at `height`
// (the average pairwise Euclidean distance) into a cluster of `size` points.
struct LinkageStep {
  int32_t a = 0;
  int32_t b = 0;
  double height = 0.0;
  int32_t size = 0;
};

// Average linkage (UPGMA) over the rows of `points` (s >= 1 rows) with the
// nearest-neighbour-chain algorithm: O(s^2) time, s (s - 1) / 2 doubles of
// memory. Returns s - 1 merges sorted by height (stable), relabelled as
// scipy.cluster.hierarchy.linkage(method="average") does; on inputs without
// distance ties the result equals SciPy's. If `cancelled` is set and returns
// true (it is polled every few milliseconds), returns an empty vector.
std::vector<LinkageStep> AverageLinkage(const RowMat<double>& points,
                                        const std::function<bool()>& cancelled = nullptr);

// The M initial internal nodes from `sample` (s rows, the preprocessed
// points of a random sample), following section 4.2: "leaf" internal nodes,
// then HAC over them. Here the leaf nodes are the c = min(ceil(M / 2), s)
// clusters of the cut of AverageLinkage(sample) into c clusters, each at
// max_node_norm * mean / ||mean|| (mean of its sample points; the zero vector
// if the mean is 0). The c - 1 merges above the cut -- average-linkage HAC
// over the leaf nodes' point sets -- follow. Counting the leaf nodes as
// round 0, the j-th of the N = c - 1 merge rounds (j = 1 .. N, in merge
// order) sits at
//   max_node_norm * log(N + 1 - j) / log(N + 1) * mean / ||mean||,
// the paper's log-decreasing factor log(N' - j) / log(N') over N' = N + 1
// rounds, scaled into the nodes' ball: leaf nodes get the full radius, the
// first merge slightly less, the root (j = N) lands at the origin. (The
// paper's 1-based "j-th of N rounds" would give the root log(0); the authors'
// code uses the same N + 1 shift.)
// Rows: leaf nodes first (in the order the top merges reference them), then
// the merges in order. Any remaining rows (M even: one; or s < ceil(M / 2))
// are sample points chosen with `seed`, scaled to norm max_node_norm.
// Returns a matrix with 0 rows if `cancelled` fires (see AverageLinkage).
RowMat<double> InitialNodes(const RowMat<double>& sample, int32_t num_nodes, double max_node_norm,
                            uint64_t seed, const std::function<bool()>& cancelled = nullptr);

}  // namespace dendro::ghhc

#endif  // DENDRO_CORE_GHHC_INIT_H_
