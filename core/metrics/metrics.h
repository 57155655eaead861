// Clustering quality against ground-truth labels.
//
// Flat metrics compare two labelings of the same N points (any int64 label
// values). Hierarchical metrics take a Hierarchy whose point_leaf() gives
// each point's leaf cluster, plus the true labels.
//
// Definitions follow Palumbo et al. appendix B.3:
//  * NMI: mutual information / arithmetic mean of the entropies
//    (scikit-learn's default); 1 when both labelings are constant.
//  * ARI: Hubert & Arabie adjusted Rand index.
//  * ACC: best one-to-one matching of predicted to true labels (Hungarian
//    algorithm), fraction of points matched.
//  * Leaf purity: sum over leaves of the majority-class count / N.
//  * Dendrogram purity (Kobren et al. 2017): over all pairs of distinct
//    points with the same true label, the mean purity of the leaves under
//    their LCA. Points in the same leaf cluster have that leaf as LCA.
//    Computed exactly from per-node class counts, never by enumerating pairs.
//  * LHD: over pairs of same-label points in different leaves, the mean of
//    (log2 td(l_i, l_j) - 1) / (log2 L - 1), td = edges between the leaves,
//    L = number of leaf clusters. Defined as 0 when no such pair exists or
//    L <= 2. (The paper normalises by the number of true classes K; Dendro
//    uses L, which equals K for L2H trees built on a K-cluster model.)
//
// Conventions: label vectors must have equal, non-zero length (else
// InvalidArgument). NMI and ARI reproduce scikit-learn 1.2
// (normalized_mutual_info_score with average_method="arithmetic",
// adjusted_rand_score) including their special cases: NMI is 1 when both
// labelings have a single cluster and 0 when the mutual information is 0;
// ARI is 1 when the two partitions agree on every pair. ACC matches
// predicted clusters to true classes one-to-one with maximal total overlap
// (as scipy's linear_sum_assignment on the contingency table; rectangular
// tables are fine, unmatched points count as errors). Dendrogram purity is
// 1 when no two points share a label (no pairs). For the hierarchical
// metrics an empty `point_leaf` means h.point_leaf().
#ifndef DENDRO_CORE_METRICS_METRICS_H_
#define DENDRO_CORE_METRICS_METRICS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/hierarchy/hierarchy.h"

namespace dendro {

absl::StatusOr<double> NormalizedMutualInfo(absl::Span<const int64_t> truth,
                                            absl::Span<const int64_t> pred);
absl::StatusOr<double> AdjustedRandIndex(absl::Span<const int64_t> truth,
                                         absl::Span<const int64_t> pred);
absl::StatusOr<double> ClusteringAccuracy(absl::Span<const int64_t> truth,
                                          absl::Span<const int64_t> pred);
absl::StatusOr<double> LeafPurity(absl::Span<const int64_t> truth,
                                  absl::Span<const int64_t> pred);

// `point_leaf[i]` in [0, h.num_leaves()).
absl::StatusOr<double> DendrogramPurity(const Hierarchy& h,
                                        absl::Span<const int32_t> point_leaf,
                                        absl::Span<const int64_t> truth);
// How DendrogramPurity keeps per-node class counts: a dense nodes x classes
// table (kAuto uses it when it has at most kDenseCountLimit entries) or
// per-node hash maps merged small-into-large, O(P log L) for P non-empty
// (leaf, class) cells. Both give the same value; exposed for testing.
enum class CountStorage { kAuto, kDense, kSparse };
inline constexpr int64_t kDenseCountLimit = int64_t{1} << 23;  // 64 MB of int64
absl::StatusOr<double> DendrogramPurity(const Hierarchy& h,
                                        absl::Span<const int32_t> point_leaf,
                                        absl::Span<const int64_t> truth,
                                        CountStorage storage);
// Exact. Per class, leaf-depth histograms are merged small-into-large up
// the tree and cross pairs are counted at their LCA; the cost is bounded by
// the number of same-class leaf pairs and, per (node, class), by the
// product of the two histograms' distinct-depth counts.
absl::StatusOr<double> LeastHierarchicalDistance(
    const Hierarchy& h, absl::Span<const int32_t> point_leaf,
    absl::Span<const int64_t> truth);

// Minimum-cost assignment on a dense n x m cost matrix (row-major, finite
// entries), O(min(n,m)^2 max(n,m)). Returns, for each row, its column; each
// column is used at most once. If n > m, n - m rows get -1. Returns an empty
// vector if cost.size() != n * m or an entry is not finite. Exposed for
// testing.
std::vector<int32_t> SolveAssignment(const std::vector<double>& cost, int n, int m);

struct MetricsReport {
  double nmi = 0, ari = 0, acc = 0, leaf_purity = 0;
  double dendrogram_purity = 0, lhd = 0;
  int32_t level = 0;  // clusters used for the flat metrics
};
// Flat metrics at the cut with `level` clusters (0: the number of distinct
// true labels, or the leaf level if the tree has fewer leaves), plus DP and
// LHD over the whole tree. If the tree cannot be cut into exactly `level`
// clusters (n-ary nodes), the nearest reachable level below is used (the
// report says which). `level` outside [0, L] is InvalidArgument.
absl::StatusOr<MetricsReport> EvaluateHierarchy(const Hierarchy& h,
                                                absl::Span<const int32_t> point_leaf,
                                                absl::Span<const int64_t> truth,
                                                int32_t level = 0);

}  // namespace dendro

#endif  // DENDRO_CORE_METRICS_METRICS_H_
