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
//    L <= 2.
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
absl::StatusOr<double> LeastHierarchicalDistance(
    const Hierarchy& h, absl::Span<const int32_t> point_leaf,
    absl::Span<const int64_t> truth);

// Minimum-cost perfect assignment on a dense n x m cost matrix (row-major),
// n <= m. Returns, for each row, its column. Exposed for testing.
std::vector<int32_t> SolveAssignment(const std::vector<double>& cost, int n, int m);

struct MetricsReport {
  double nmi = 0, ari = 0, acc = 0, leaf_purity = 0;
  double dendrogram_purity = 0, lhd = 0;
  int32_t level = 0;  // clusters used for the flat metrics
};
// Flat metrics at the cut with `level` clusters (0: the number of distinct
// true labels, or the leaf level if the tree has fewer leaves), plus DP and
// LHD over the whole tree.
absl::StatusOr<MetricsReport> EvaluateHierarchy(const Hierarchy& h,
                                                absl::Span<const int32_t> point_leaf,
                                                absl::Span<const int64_t> truth,
                                                int32_t level = 0);

}  // namespace dendro

#endif  // DENDRO_CORE_METRICS_METRICS_H_
