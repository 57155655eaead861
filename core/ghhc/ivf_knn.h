// Inverted-file k-nearest-neighbour search with blocked matrix products:
// k-means cells on a sample, every point in the cell of its nearest
// centre, and each query compared exactly with the members of its `probes`
// nearest cells. Internal to core/ghhc (knn.cc chooses it); see
// docs/methods.md, gHHC neighbour graph.
#ifndef DENDRO_CORE_GHHC_IVF_KNN_H_
#define DENDRO_CORE_GHHC_IVF_KNN_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/common/run_context.h"
#include "core/ghhc/objective.h"

namespace dendro::ghhc {

struct IvfOptions {
  int32_t k = 5;             // neighbours per point, 1 <= k < n
  int64_t list_size = 1024;  // mean points per cell: n / list_size cells (at least 1)
  int32_t probes = 8;        // cells searched per query (clamped to the cell count)
  int32_t kmeans_iterations = 10;
  int64_t sample_per_list = 64;  // k-means runs on min(n, 64 x cells) points
  uint64_t seed = 0;
  int num_threads = 1;
};

// Fills the row-major n x k table `out`: for every point with a non-zero
// `query_mask` entry (every point if the mask is empty), the k nearest other
// points among the members of its probed cells, nearest first; rows of
// unmasked points are -1. The result depends only on x, the options' search
// settings and the seed, not on the number of threads. Fewer than k
// candidates (tiny cells) repeat the last one found.
absl::Status IvfTable(const RowMat<float>& x, const IvfOptions& options, RunContext& ctx,
                      const std::function<void(double)>& progress,
                      absl::Span<const uint8_t> query_mask, int32_t* out);

}  // namespace dendro::ghhc

#endif  // DENDRO_CORE_GHHC_IVF_KNN_H_
