// Ward's minimum-variance agglomeration over weighted groups of points.
//
// Leaf i is a group of sizes[i] > 0 points whose mean is the i-th row of
// `means` (row-major, `dim` values per leaf). Merging groups a and b raises
// the within-group sum of squares by
//     delta(a, b) = n_a n_b / (n_a + n_b) * ||mu_a - mu_b||^2,
// and the merged group has n_a + n_b points at the size-weighted mean. Every
// step merges the pair with the smallest delta (Ward, 1963), at height
// sqrt(2 delta): SciPy's "ward" distance, so with every size 1 the tree and
// its heights are those of scipy.cluster.hierarchy.linkage(X, "ward") (up to
// the order of tied merges).
//
// Computed by the nearest-neighbour chain (delta is reducible): O(L^2 dim)
// time and O(L dim) memory for L leaves; no L x L matrix.
//
// Invariants of the result: binary, L leaves numbered as the groups,
// heights >= 0 and non-decreasing towards the root (a rounding inversion is
// lifted to the child's height), deterministic: a function of the inputs
// alone (ties between equal deltas go to the lower group index).
// InvalidArgument when L < 1, dim < 1, means has not L * dim values, a size
// is not positive and finite, or a mean is not finite.
#ifndef DENDRO_CORE_HIERARCHY_WARD_H_
#define DENDRO_CORE_HIERARCHY_WARD_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/hierarchy/hierarchy.h"

namespace dendro {

absl::StatusOr<Hierarchy> WardTree(absl::Span<const double> sizes, absl::Span<const double> means,
                                   int64_t dim);

}  // namespace dendro

#endif  // DENDRO_CORE_HIERARCHY_WARD_H_
