// SubRangeContext: lets one phase of a multi-phase algorithm report its own
// progress in [0, 1] while the caller sees it as [lo, hi] of the whole run.
// Thread-safe: reports from several threads are serialised and the
// forwarded fraction never decreases. Cancellation is forwarded unchanged.
#ifndef DENDRO_CORE_COMMON_SUB_RANGE_CONTEXT_H_
#define DENDRO_CORE_COMMON_SUB_RANGE_CONTEXT_H_

#include <algorithm>
#include <mutex>
#include <string_view>

#include "core/common/run_context.h"

namespace dendro {

class SubRangeContext final : public RunContext {
 public:
  // Requires 0 <= lo <= hi <= 1.
  SubRangeContext(RunContext& parent, double lo, double hi)
      : parent_(parent), lo_(lo), hi_(hi), last_(lo) {}

  bool Cancelled() const override { return parent_.Cancelled(); }

  void Report(double fraction, std::string_view stage) override {
    const double f = lo_ + (hi_ - lo_) * std::clamp(fraction, 0.0, 1.0);
    std::lock_guard<std::mutex> lock(mu_);
    last_ = std::max(last_, f);
    parent_.Report(last_, stage);
  }

 private:
  RunContext& parent_;
  const double lo_;
  const double hi_;
  std::mutex mu_;
  double last_;
};

}  // namespace dendro

#endif  // DENDRO_CORE_COMMON_SUB_RANGE_CONTEXT_H_
