#include <omp.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>

#include "core/common/omp_threads.h"
#include "core/hppca/internal.h"

namespace dendro::hppca_internal {

void Progress::Report(double fraction_of_stage) {
  const double f = lo_ + (hi_ - lo_) * std::clamp(fraction_of_stage, 0.0, 1.0);
  if (f < last_) return;
  last_ = f;
  ctx_.Report(f, stage_);
}

bool PollCancelled(RunContext* ctx) {
  if (ctx == nullptr) return false;
  static std::mutex mu;
  std::unique_lock<std::mutex> lock(mu, std::try_to_lock);
  return lock.owns_lock() && ctx->Cancelled();
}

absl::Status ParallelFor(int64_t n, int threads, RunContext* ctx,
                         const std::function<void(int64_t)>& f,
                         const std::function<void(int64_t)>& on_item) {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> done{0};
  const int t = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, n)));
  // A team of one is not "parallel" to Eigen, so a product in f would start
  // Eigen's own threaded GEMM, nested in the team; keep the items' products
  // on their thread instead (as each thread of a larger team does).
  std::optional<ProductsOnCallingThread> products_here;
  if (t == 1) products_here.emplace();
#pragma omp parallel for schedule(dynamic, 1) num_threads(t)
  for (int64_t i = 0; i < n; ++i) {
    if (stop.load(std::memory_order_relaxed)) continue;
    const bool main_thread = omp_get_thread_num() == 0;
    if (PollCancelled(ctx)) {
      stop.store(true);
      continue;
    }
    f(i);
    const int64_t finished = done.fetch_add(1) + 1;
    if (main_thread && on_item) on_item(finished);
  }
  if (stop.load()) return absl::CancelledError("job cancelled");
  if (ctx != nullptr && ctx->Cancelled()) return absl::CancelledError("job cancelled");
  return absl::OkStatus();
}

}  // namespace dendro::hppca_internal
