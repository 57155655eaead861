// The harness of the *_cancel_test.cc files: a RunContext whose flag another
// thread flips once the fit reaches a given progress stage, and helpers that
// print (and record as the test property cancel_latency_ms) the time from the
// flip to the fit's return. No time limit is asserted anywhere: a loop that
// never polls makes its test hang until ctest's timeout.
#ifndef DENDRO_TESTS_CORE_CANCEL_HARNESS_H_
#define DENDRO_TESTS_CORE_CANCEL_HARNESS_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "core/common/run_context.h"
#include "gtest/gtest.h"

namespace dendro::cancel_test {

// Cancelled() turns true when another thread flips it. The flipping thread
// waits for a progress report whose stage starts with `stage` (the first
// report of any stage when it is empty; no report at all when it is
// nullopt), then `delay` more, then sets the flag; the time of the flip and
// the last stage reported before it are kept.
class AsyncCancel final : public RunContext {
 public:
  AsyncCancel(std::optional<std::string> stage, std::chrono::milliseconds delay)
      : stage_(std::move(stage)), delay_(delay), reached_(!stage_.has_value()) {}

  bool Cancelled() const override { return flag_.load(std::memory_order_relaxed); }
  void Report(double, std::string_view stage) override {
    std::lock_guard<std::mutex> lock(mu_);
    last_stage_ = std::string(stage);
    if (stage_.has_value() && stage.substr(0, stage_->size()) == *stage_) reached_ = true;
    cv_.notify_all();
  }

  // Runs `fit` with this context while the flipping thread does its work.
  absl::Status Run(const std::function<absl::Status(RunContext&)>& fit) {
    std::thread flipper([this] {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return reached_ || returned_; });
      if (returned_) return;
      cv_.wait_for(lock, delay_, [this] { return returned_; });
      stage_at_flip_ = last_stage_;
      flipped_at_ = Clock::now();
      flipped_ = true;
      flag_.store(true);
    });
    const absl::Status status = fit(*this);
    const Clock::time_point returned_at = Clock::now();
    {
      std::lock_guard<std::mutex> lock(mu_);
      returned_ = true;
      cv_.notify_all();
    }
    flipper.join();
    if (flipped_) latency_ = std::chrono::duration<double>(returned_at - flipped_at_).count();
    return status;
  }

  // Cancels at once, from the calling thread (instead of Run's thread).
  void CancelNow() {
    flipped_ = true;
    flag_.store(true);
  }

  bool flipped() const { return flipped_; }
  double latency_seconds() const { return latency_; }
  const std::string& stage_at_flip() const { return stage_at_flip_; }

 private:
  using Clock = std::chrono::steady_clock;
  const std::optional<std::string> stage_;
  const std::chrono::milliseconds delay_;
  std::atomic<bool> flag_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool reached_;           // guarded by mu_
  bool returned_ = false;  // guarded by mu_
  std::string last_stage_ = "(none)";  // guarded by mu_
  // Written by the flipping thread before it ends, read after the join.
  bool flipped_ = false;
  std::string stage_at_flip_;
  Clock::time_point flipped_at_;
  double latency_ = -1.0;
};

// Runs `fit`, cancelling it `delay` after the first report of `stage`
// (after the start of the call when `stage` is nullopt); prints and records
// the time from the flip to the return. Returns the fit's status code
// (kUnknown if it returned before the flip).
inline absl::StatusCode CancelDuring(const std::string& name, const std::optional<std::string>& stage,
                              const std::function<absl::Status(RunContext&)>& fit,
                              std::chrono::milliseconds delay = std::chrono::milliseconds(200)) {
  AsyncCancel ctx(stage, delay);
  const absl::Status status = ctx.Run(fit);
  if (!ctx.flipped()) {
    std::cout << name << ": returned " << status << " before the cancel" << std::endl;
    return absl::StatusCode::kUnknown;
  }
  const std::string ms = absl::StrFormat("%.1f", 1000.0 * ctx.latency_seconds());
  std::cout << name << ": " << absl::StatusCodeToString(status.code()) << " " << ms
            << " ms after the cancel (last stage reported: \"" << ctx.stage_at_flip() << "\")"
            << std::endl;
  ::testing::Test::RecordProperty("cancel_latency_ms", ms);
  return status.code();
}

// Runs `fit` with a context that is already cancelled; prints and records
// how long the call took.
inline absl::StatusCode CancelledBeforeStart(const std::string& name,
                                      const std::function<absl::Status(RunContext&)>& fit) {
  AsyncCancel ctx("", std::chrono::milliseconds(0));
  ctx.CancelNow();
  const auto start = std::chrono::steady_clock::now();
  const absl::Status status = fit(ctx);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string ms = absl::StrFormat("%.1f", 1000.0 * seconds);
  std::cout << name << " (cancelled before the call): "
            << absl::StatusCodeToString(status.code()) << " after " << ms << " ms" << std::endl;
  ::testing::Test::RecordProperty("cancel_latency_ms", ms);
  return status.code();
}

}  // namespace dendro::cancel_test

#endif  // DENDRO_TESTS_CORE_CANCEL_HARNESS_H_
