// RunContext: how a long-running algorithm reports progress and learns that
// it has been cancelled. Algorithms take a `RunContext&` and must
//   * call Cancelled() often enough that a cancel is seen within ~1 second,
//     and return absl::CancelledError() when it is true;
//   * report fractions in [0, 1] that never decrease within one stage
//     sequence (the context itself clamps, see ProgressClamp).
// The server implements this on top of its job table; tests and the CLI use
// NullRunContext.
#ifndef DENDRO_CORE_COMMON_RUN_CONTEXT_H_
#define DENDRO_CORE_COMMON_RUN_CONTEXT_H_

#include <atomic>
#include <string_view>

#include "absl/status/status.h"

namespace dendro {

class RunContext {
 public:
  virtual ~RunContext() = default;
  // True once the caller asked the computation to stop.
  virtual bool Cancelled() const = 0;
  // `fraction` in [0, 1] of the whole computation; `stage` is a short
  // human-readable phase name ("softmax", "merging").
  virtual void Report(double fraction, std::string_view stage) = 0;

  // Convenience: CancelledError if Cancelled(), OK otherwise.
  absl::Status CheckCancelled() const {
    return Cancelled() ? absl::CancelledError("job cancelled") : absl::OkStatus();
  }
};

// A cancel seen by any thread of a parallel pass. Poll() asks the context
// (from whichever thread calls it) and remembers a positive answer, so the
// other threads stop at their next check and the caller can tell after the
// pass without asking again. The context must be safe to ask from several
// threads.
class SharedCancel {
 public:
  explicit SharedCancel(const RunContext& ctx) : ctx_(ctx) {}
  SharedCancel(const SharedCancel&) = delete;
  SharedCancel& operator=(const SharedCancel&) = delete;
  bool Poll() {
    if (seen_.load(std::memory_order_relaxed)) return true;
    if (!ctx_.Cancelled()) return false;
    seen_.store(true, std::memory_order_relaxed);
    return true;
  }
  bool seen() const { return seen_.load(std::memory_order_relaxed); }

 private:
  const RunContext& ctx_;
  std::atomic<bool> seen_{false};
};

// Never cancelled; ignores progress.
class NullRunContext final : public RunContext {
 public:
  bool Cancelled() const override { return false; }
  void Report(double, std::string_view) override {}
};

}  // namespace dendro

#endif  // DENDRO_CORE_COMMON_RUN_CONTEXT_H_
