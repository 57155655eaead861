// GCC 12.2 reports false (maybe-)uninitialized warnings inside its own
// AVX-512 intrinsics headers when Eigen is built with -march=native (GCC bug
// 105593, fixed in 12.3/13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "core/ghhc/knn.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

// hnswlib 0.6.2 prefetches one entry past the end of a link list (upstream
// nmslib/hnswlib#107, still open): harmless on hardware, a heap overflow
// under AddressSanitizer. Address-sanitized builds take its plain path,
// which has no prefetches and no hand-written SIMD distances.
#if defined(__SANITIZE_ADDRESS__)
#define NO_MANUAL_VECTORIZATION
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NO_MANUAL_VECTORIZATION
#endif
#endif
#include "hnswlib/hnswlib.h"

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

absl::Status HnswTable(const RowMat<float>& x, const KnnOptions& options, int32_t k,
                       RunContext& ctx, const std::function<void(double)>& progress,
                       absl::Span<const uint8_t> query_mask, int32_t* out) {
  const int64_t n = x.rows();
  const int64_t d = x.cols();
  const int32_t ef = options.hnsw_ef_search > 0 ? std::max(options.hnsw_ef_search, k + 1)
                                                : std::max(2 * k + 2, 32);
  std::atomic<bool> failed{false};
  // Seen by every thread once one sees a cancel; one insertion or query
  // costs about ef x M distance evaluations, so every point polls.
  SharedCancel cancel(ctx);
  std::string error;
  auto record_error = [&](const char* what) {
#pragma omp critical(ghhc_knn_error)
    {
      if (!failed.exchange(true)) error = what;
    }
  };
  try {
    hnswlib::L2Space space(static_cast<size_t>(d));
    auto index = std::make_unique<hnswlib::HierarchicalNSW<float>>(
        &space, static_cast<size_t>(n), static_cast<size_t>(options.hnsw_m),
        static_cast<size_t>(options.hnsw_ef_construction),
        static_cast<size_t>(options.seed % 1000000007u + 100));
    index->addPoint(x.row(0).data(), 0);
    // Building costs about as much as querying; weight them equally.
    constexpr int64_t kSuper = 8192;
    for (int64_t s0 = 1; s0 < n; s0 += kSuper) {
      if (cancel.Poll()) return absl::CancelledError("job cancelled");
      const int64_t s1 = std::min(n, s0 + kSuper);
#pragma omp parallel for num_threads(options.num_threads) schedule(dynamic, 64)
      for (int64_t i = s0; i < s1; ++i) {
        if (failed.load(std::memory_order_relaxed) || cancel.Poll()) continue;
        try {
          index->addPoint(x.row(i).data(), static_cast<hnswlib::labeltype>(i));
        } catch (const std::exception& e) {
          record_error(e.what());
        }
      }
      if (failed) break;
      if (cancel.seen()) return absl::CancelledError("job cancelled");
      progress(0.5 * static_cast<double>(s1) / n);
    }
    if (failed) return absl::InternalError(absl::StrCat("HNSW index build failed: ", error));
    index->setEf(static_cast<size_t>(ef));
    for (int64_t s0 = 0; s0 < n; s0 += kSuper) {
      if (cancel.Poll()) return absl::CancelledError("job cancelled");
      const int64_t s1 = std::min(n, s0 + kSuper);
#pragma omp parallel for num_threads(options.num_threads) schedule(dynamic, 64)
      for (int64_t i = s0; i < s1; ++i) {
        if (failed.load(std::memory_order_relaxed) || cancel.Poll()) continue;
        if (!query_mask.empty() && query_mask[i] == 0) {
          std::fill(out + i * k, out + (i + 1) * k, -1);
          continue;
        }
        try {
          auto result = index->searchKnn(x.row(i).data(), static_cast<size_t>(k + 1));
          // The queue yields the farthest first.
          std::vector<std::pair<float, int32_t>> found;
          found.reserve(result.size());
          while (!result.empty()) {
            const auto& top = result.top();
            if (static_cast<int64_t>(top.second) != i) {
              found.emplace_back(top.first, static_cast<int32_t>(top.second));
            }
            result.pop();
          }
          std::sort(found.begin(), found.end());
          int32_t* row = out + i * k;
          for (int32_t t = 0; t < k; ++t) {
            if (!found.empty()) {
              row[t] = found[std::min<size_t>(t, found.size() - 1)].second;
            } else {
              row[t] = static_cast<int32_t>((i + 1 + t) % n);  // degenerate graph
            }
          }
        } catch (const std::exception& e) {
          record_error(e.what());
        }
      }
      if (failed) break;
      if (cancel.seen()) return absl::CancelledError("job cancelled");
      progress(0.5 + 0.5 * static_cast<double>(s1) / n);
    }
    if (failed) return absl::InternalError(absl::StrCat("HNSW search failed: ", error));
  } catch (const std::exception& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("HNSW index for ", n, " points could not be built: ", e.what()));
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
  } else {
    absl::Status s = HnswTable(x, options, k, ctx, progress, query_mask, table.data());
    if (!s.ok()) return s;
  }
  return table;
}

}  // namespace dendro::ghhc
