#include "server/stream_limiter.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dendro::server {

int64_t StreamLimiter::Slot::NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

StreamLimiter::Slot::~Slot() {
  if (owner_ != nullptr) owner_->Release(this);
}

StreamLimiter::StreamLimiter(int max_streams, absl::Duration idle_timeout)
    : max_streams_(max_streams), idle_timeout_(idle_timeout) {
  reaper_ = std::thread([this] { ReapLoop(); });
}

StreamLimiter::~StreamLimiter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  reaper_.join();
}

absl::StatusOr<std::unique_ptr<StreamLimiter::Slot>> StreamLimiter::Acquire(
    const std::string& rpc, std::function<void()> on_idle) {
  std::unique_ptr<Slot> slot(new Slot(this, std::move(on_idle)));
  std::lock_guard<std::mutex> lock(mu_);
  if (static_cast<int>(slots_.size()) >= max_streams_) {
    slot->owner_ = nullptr;  // never registered: nothing to release
    return absl::ResourceExhaustedError(absl::StrCat(
        rpc, ": the server already has ", max_streams_,
        " open streams (uploads, job watches, prediction streams); retry later"));
  }
  slots_.insert(slot.get());
  return slot;
}

void StreamLimiter::Release(Slot* slot) {
  std::lock_guard<std::mutex> lock(mu_);
  slots_.erase(slot);
}

int StreamLimiter::open_streams() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(slots_.size());
}

void StreamLimiter::ReapLoop() {
  const int64_t timeout_ns = absl::ToInt64Nanoseconds(idle_timeout_);
  const auto period = std::chrono::nanoseconds(
      std::clamp<int64_t>(timeout_ns / 4, 10'000'000, 1'000'000'000));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, period);
    const int64_t now = Slot::NowNs();
    for (Slot* slot : slots_) {
      if (!slot->on_idle_ || slot->timed_out_.load() || slot->working_.load() > 0) continue;
      if (now - slot->last_ns_.load(std::memory_order_relaxed) > timeout_ns) {
        slot->timed_out_ = true;
        slot->on_idle_();  // cheap and non-blocking (TryCancel)
      }
    }
  }
}

}  // namespace dendro::server
