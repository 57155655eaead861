#include "core/ghhc/hnsw_knn.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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

}  // namespace dendro::ghhc
