#include "server/transport/stream_limiter.h"

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
    : StreamLimiter(Options{max_streams, max_streams, 0}, idle_timeout) {}

StreamLimiter::StreamLimiter(Options options, absl::Duration idle_timeout)
    : max_streams_(std::max(1, options.max_streams)),
      max_per_caller_(options.max_per_caller > 0 ? std::min(options.max_per_caller, max_streams_)
                                                 : std::max(1, max_streams_ / 2)),
      admin_reserved_(std::clamp(options.admin_reserved, 0, max_streams_ / 4)),
      idle_timeout_(idle_timeout),
      min_idle_ns_(absl::ToInt64Nanoseconds(idle_timeout)) {
  reaper_ = std::thread([this] { ReapLoop(); });
}

StreamLimiter::~StreamLimiter() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  reaper_.join();
}

absl::StatusOr<std::unique_ptr<StreamLimiter::Slot>> StreamLimiter::Acquire(
    const std::string& rpc, const std::string& caller, bool admin,
    std::function<void()> on_idle, absl::Duration idle_timeout) {
  const int64_t idle_ns = absl::ToInt64Nanoseconds(
      idle_timeout > absl::ZeroDuration() ? idle_timeout : idle_timeout_);
  std::unique_ptr<Slot> slot(new Slot(this, caller, idle_ns, std::move(on_idle)));
  MutexLock lock(&mu_);
  const int open = static_cast<int>(slots_.size());
  const auto held = per_caller_.find(caller);
  const int mine = held != per_caller_.end() ? held->second : 0;
  std::string refused;
  if (open >= max_streams_) {
    refused = absl::StrCat("the server already has ", open,
                           " open streams (uploads, job watches and waits, prediction and tree "
                           "streams), its limit (--max_streams ", max_streams_, ")");
  } else if (!admin && open >= max_streams_ - admin_reserved_) {
    refused = absl::StrCat("the server already has ", open, " open streams; the last ",
                           admin_reserved_, " of its ", max_streams_,
                           " are kept for admins (--admin_reserved_streams)");
  } else if (mine >= max_per_caller_) {
    refused = absl::StrCat(caller.empty() ? std::string("this caller")
                                          : absl::StrCat("caller '", caller, "'"),
                           " already has ", mine, " open streams, the limit per caller "
                           "(--max_streams_per_caller ", max_per_caller_, ")");
  }
  if (!refused.empty()) {
    slot->owner_ = nullptr;  // never registered: nothing to release
    return absl::ResourceExhaustedError(absl::StrCat(rpc, ": ", refused, "; retry later"));
  }
  slots_.insert(slot.get());
  ++per_caller_[caller];
  if (slot->on_idle_ && idle_ns < min_idle_ns_) {
    min_idle_ns_ = idle_ns;
    cv_.SignalAll();  // the reaper looks more often
  }
  return slot;
}

void StreamLimiter::Release(Slot* slot) {
  MutexLock lock(&mu_);
  slots_.erase(slot);
  if (auto it = per_caller_.find(slot->caller_); it != per_caller_.end() && --it->second <= 0) {
    per_caller_.erase(it);
  }
}

int StreamLimiter::open_streams() {
  MutexLock lock(&mu_);
  return static_cast<int>(slots_.size());
}

void StreamLimiter::ReapLoop() {
  MutexLock lock(&mu_);
  while (!stop_) {
    const auto period = std::chrono::nanoseconds(
        std::clamp<int64_t>(min_idle_ns_ / 4, 10'000'000, 1'000'000'000));
    cv_.WaitUntil(&mu_, std::chrono::steady_clock::now() + period);
    const int64_t now = Slot::NowNs();
    for (Slot* slot : slots_) {
      if (!slot->on_idle_ || slot->timed_out_.load() || slot->working_.load() > 0) continue;
      if (now - slot->last_ns_.load(std::memory_order_relaxed) > slot->idle_ns_) {
        slot->timed_out_ = true;
        slot->on_idle_();  // cheap and non-blocking (a cancel)
      }
    }
  }
}

}  // namespace dendro::server
