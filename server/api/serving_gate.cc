#include "server/api/serving_gate.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/common/status_macros.h"

namespace dendro::server {

ServingGate::ServingGate(Options options) : options_(options) {}

ServingGate::Slot::~Slot() {
  if (gate_ != nullptr) gate_->Leave();
}

void ServingGate::Leave() {
  {
    MutexLock lock(&mu_);
    --computing_;
  }
  freed_.Signal();
}

absl::StatusOr<ServingGate::Slot> ServingGate::Enter(const char* what, absl::Time deadline) {
  MutexLock lock(&mu_);
  if (computing_ < options_.concurrency && waiting_ == 0 && absl::Now() < deadline) {
    ++computing_;
    return Slot(this);
  }
  if (waiting_ >= options_.max_waiting) {
    ++refused_;
    return absl::ResourceExhaustedError(absl::StrCat(
        what, ": the server is at its limit: ", computing_, " calls computing and ", waiting_,
        " waiting, the most that may wait (--serving_queue); retry with backoff"));
  }
  ++waiting_;
  for (;;) {
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      --waiting_;
      ++expired_;
      // Another waiter may take the slot this one was woken for.
      freed_.Signal();
      return absl::DeadlineExceededError(absl::StrCat(
          what, ": the call's deadline passed while it waited for a computing slot (",
          computing_, " computing, ", waiting_, " waiting); it was not computed"));
    }
    if (computing_ < options_.concurrency) {
      --waiting_;
      ++computing_;
      return Slot(this);
    }
    // A bounded wait: absl::InfiniteFuture() is no deadline.
    const absl::Duration left = std::min(deadline - now, absl::Hours(1));
    freed_.WaitUntil(&mu_, std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(left));
  }
}

absl::StatusOr<std::optional<ServingGate::Slot>> ServingGate::TryEnter(const char* what,
                                                                       absl::Time deadline) {
  if (absl::Now() >= deadline) {
    DENDRO_ASSIGN_OR_RETURN(Slot slot, Enter(what, deadline));  // refused without waiting
    return std::optional<Slot>(std::move(slot));
  }
  MutexLock lock(&mu_);
  if (computing_ >= options_.concurrency || waiting_ > 0) return std::optional<Slot>();
  ++computing_;
  return std::optional<Slot>(Slot(this));
}

ServingGate::Stats ServingGate::stats() const {
  ReaderMutexLock lock(&mu_);
  return Stats{computing_, waiting_, refused_, expired_};
}

}  // namespace dendro::server
