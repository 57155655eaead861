// k nearest neighbours from an HNSW graph (hnswlib), built and queried on
// options.num_threads threads. Internal to core/ghhc (knn.cc chooses it).
#ifndef DENDRO_CORE_GHHC_HNSW_KNN_H_
#define DENDRO_CORE_GHHC_HNSW_KNN_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/common/run_context.h"
#include "core/ghhc/knn.h"
#include "core/ghhc/objective.h"

namespace dendro::ghhc {

// Fills the row-major n x k table `out` (1 <= k < n) as NearestNeighborTable
// describes: nearest first, rows of points outside a non-empty `query_mask`
// are -1. With more than one thread the graph, hence the table, depends on
// thread timing.
absl::Status HnswTable(const RowMat<float>& x, const KnnOptions& options, int32_t k,
                       RunContext& ctx, const std::function<void(double)>& progress,
                       absl::Span<const uint8_t> query_mask, int32_t* out);

}  // namespace dendro::ghhc

#endif  // DENDRO_CORE_GHHC_HNSW_KNN_H_
