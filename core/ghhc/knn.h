// k nearest neighbours of every data point, for gHHC's triple sampling
// (section 4.2). Exact (blocked matrix products) for small inputs, otherwise
// an inverted-file search with blocked products (ivf_knn.h, the default) or
// an HNSW graph (hnswlib, hnsw_knn.h). Internal to core/ghhc; exposed for
// tests. docs/methods.md (gHHC neighbour graph) has the comparison.
#ifndef DENDRO_CORE_GHHC_KNN_H_
#define DENDRO_CORE_GHHC_KNN_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/common/run_context.h"
#include "core/ghhc/objective.h"

namespace dendro::ghhc {

enum class KnnMethod { kIvf, kHnsw };

struct KnnOptions {
  int32_t k = 5;                      // neighbours per point (clamped to n - 1)
  int64_t exact_max_points = 5000;    // n at or below this: exact search
  KnnMethod method = KnnMethod::kIvf;  // above exact_max_points
  int64_t ivf_list_size = 1024;       // IVF: mean points per k-means cell
  int32_t ivf_probes = 8;             // IVF: cells searched per query
  int32_t hnsw_m = 12;                // HNSW graph degree
  int32_t hnsw_ef_construction = 40;  // HNSW build beam
  int32_t hnsw_ef_search = 0;         // query beam; 0: max(2 k, 32)
  uint64_t seed = 0;
  int num_threads = 1;  // team size of the parallel loops
};

// Row-major n x k' table (k' = min(k, n - 1)): for point i, the indices of
// its k' nearest other points (Euclidean), nearest first; ties in the exact
// search go to the lower index. The IVF and HNSW searches are approximate.
// The exact and IVF tables depend only on x, the options and the seed, not
// on num_threads; a multi-threaded HNSW graph (hence its table) depends on
// thread timing.
// `progress(f)` is called from the calling thread with f in [0, 1]
// non-decreasing; cancellation is polled between blocks and, by the worker
// threads, within them (every 16 rows of the exact search, every point of
// the HNSW build and search).
// With a non-empty `query_mask` (one entry per point), the IVF and HNSW
// searches only answer the points with a non-zero entry; the rows of the
// others are -1.
// (The exact search always answers every point.)
absl::StatusOr<std::vector<int32_t>> NearestNeighborTable(
    const RowMat<float>& x, const KnnOptions& options, RunContext& ctx,
    const std::function<void(double)>& progress, absl::Span<const uint8_t> query_mask = {});

}  // namespace dendro::ghhc

#endif  // DENDRO_CORE_GHHC_KNN_H_
