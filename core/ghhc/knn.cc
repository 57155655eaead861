#include "core/ghhc/knn.h"

#include <omp.h>

#include <algorithm>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "core/ghhc/hnsw_knn.h"
#include "core/ghhc/ivf_knn.h"

namespace dendro::ghhc {
namespace {

// Exact search: distances of a block of rows to all rows by one product.
absl::Status ExactTable(const RowMat<float>& x, int32_t k, int threads, RunContext& ctx,
                        const std::function<void(double)>& progress, int32_t* out) {
  const int64_t n = x.rows();
  const Eigen::ArrayXf sq = x.rowwise().squaredNorm().array();
  constexpr int64_t kBlock = 128;
  const int64_t num_blocks = (n + kBlock - 1) / kBlock;
  constexpr int64_t kBlocksPerPoll = 16;
  // Every row costs O(n (d + log k)); with exact_max_points raised far above
  // its default one block of rows can take seconds, so the workers also poll
  // before each block and every 16 rows (a cancel skips the rest).
  SharedCancel cancel(ctx);
  for (int64_t b0 = 0; b0 < num_blocks; b0 += kBlocksPerPoll) {
    if (cancel.Poll()) return absl::CancelledError("job cancelled");
    const int64_t b1 = std::min(num_blocks, b0 + kBlocksPerPoll);
#pragma omp parallel num_threads(threads)
    {
      RowMat<float> s;
      std::vector<int32_t> idx(n);
      std::vector<float> dist(n);
#pragma omp for schedule(dynamic, 1)
      for (int64_t blk = b0; blk < b1; ++blk) {
        if (cancel.Poll()) continue;
        const int64_t r0 = blk * kBlock;
        const int64_t rn = std::min(kBlock, n - r0);
        s.noalias() = x.middleRows(r0, rn) * x.transpose();
        for (int64_t i = 0; i < rn; ++i) {
          if (i % 16 == 15 && cancel.Poll()) break;
          const int64_t row = r0 + i;
          for (int64_t j = 0; j < n; ++j) {
            dist[j] = std::max(sq[row] + sq[j] - 2.0f * s(i, j), 0.0f);
          }
          dist[row] = std::numeric_limits<float>::infinity();
          std::iota(idx.begin(), idx.end(), 0);
          std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
            return dist[a] < dist[b] || (dist[a] == dist[b] && a < b);
          });
          std::copy(idx.begin(), idx.begin() + k, out + row * k);
        }
      }
    }
    if (cancel.seen()) return absl::CancelledError("job cancelled");
    progress(static_cast<double>(b1) / num_blocks);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> NearestNeighborTable(
    const RowMat<float>& x, const KnnOptions& options, RunContext& ctx,
    const std::function<void(double)>& progress, absl::Span<const uint8_t> query_mask) {
  const int64_t n = x.rows();
  if (!query_mask.empty() && static_cast<int64_t>(query_mask.size()) != n) {
    return absl::InvalidArgumentError("query_mask must have one entry per point");
  }
  if (n < 2) return absl::InvalidArgumentError("nearest neighbours need at least 2 points");
  if (options.k < 1) {
    return absl::InvalidArgumentError(absl::StrCat("neighbors must be >= 1, got ", options.k));
  }
  const int32_t k = static_cast<int32_t>(std::min<int64_t>(options.k, n - 1));
  std::vector<int32_t> table(static_cast<size_t>(n) * k);
  if (n <= options.exact_max_points) {
    absl::Status s = ExactTable(x, k, options.num_threads, ctx, progress, table.data());
    if (!s.ok()) return s;
  } else if (options.method == KnnMethod::kHnsw) {
    absl::Status s = HnswTable(x, options, k, ctx, progress, query_mask, table.data());
    if (!s.ok()) return s;
  } else {
    IvfOptions ivf;
    ivf.k = k;
    ivf.list_size = options.ivf_list_size;
    ivf.probes = options.ivf_probes;
    ivf.seed = options.seed;
    ivf.num_threads = options.num_threads;
    absl::Status s = IvfTable(x, ivf, ctx, progress, query_mask, table.data());
    if (!s.ok()) return s;
  }
  return table;
}

}  // namespace dendro::ghhc
