#include "server/api/batcher.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace dendro::server {
namespace {

// `deadline` on the clock CondVar waits on (bounded: InfiniteFuture is none).
std::chrono::steady_clock::time_point Steady(absl::Time deadline) {
  const absl::Duration left =
      std::clamp(deadline - absl::Now(), absl::ZeroDuration(), absl::Hours(1));
  return std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(left);
}

absl::Status Expired(const char* what) {
  return absl::DeadlineExceededError(absl::StrCat(
      what,
      ": the call's deadline passed while it waited to be computed with other calls; it "
      "was not computed"));
}

}  // namespace

// A call in a batch: lives on its caller's stack until `done`.
struct Batcher::Member {
  const MatrixView* rows;
  absl::Time deadline;
  void* out;
  bool done = false;  // `status` is final (and `out` filled if it is OK)
  absl::Status status;
};

// Every field is guarded by the batcher's mu_.
struct Batcher::Batch {
  Key key;
  absl::Time opened;
  std::vector<Member*> members;  // joining order
  int64_t rows = 0;
  bool led = false;     // a member is leading it (waiting for company, the gate or computing)
  bool closed = false;  // no member joins or leaves any more
  CondVar changed;      // members, rows, led or done changed
};

Batcher::Batcher(Options options, ServingGate* gate) : options_(options), gate_(gate) {}

absl::Status Batcher::Alone(const char* what, const MatrixView& rows, absl::Time deadline,
                            void* out, Compute compute) {
  std::optional<ServingGate::Slot> slot;
  if (gate_ != nullptr) {
    absl::StatusOr<ServingGate::Slot> s = gate_->Enter(what, deadline);
    if (!s.ok()) return s.status();
    slot.emplace(std::move(*s));
  }
  const Share share{0, rows.rows(), out};
  return compute(rows, absl::MakeConstSpan(&share, 1));
}

absl::Status Batcher::Run(const char* what, const Key& key, const MatrixView& rows,
                          absl::Time deadline, void* out, Compute compute) {
  if (options_.max_rows <= 1 || rows.rows() >= options_.max_rows) {
    return Alone(what, rows, deadline, out, compute);
  }
  Member self{&rows, deadline, out, false, absl::OkStatus()};
  std::shared_ptr<Batch> batch;
  {
    MutexLock lock(&mu_);
    auto it = open_.find(key);
    if (it != open_.end() && it->second->rows + rows.rows() <= options_.max_rows) {
      batch = it->second;
    } else {
      // A full batch stays with its members; the key's open batch is a new one.
      batch = std::make_shared<Batch>();
      batch->key = key;
      batch->opened = absl::Now();
      open_[key] = batch;
    }
    batch->members.push_back(&self);
    batch->rows += rows.rows();
    ++waiting_;
    if (batch->rows >= options_.max_rows) batch->changed.SignalAll();  // its leader stops waiting
    for (;;) {
      if (self.done) return self.status;
      if (!batch->led) {
        batch->led = true;
        break;
      }
      if (batch->closed) {  // being computed: the answer comes, whatever the deadline
        batch->changed.Wait(&mu_);
        continue;
      }
      if (absl::Now() >= deadline) {
        ++expired_;
        LeaveLocked(batch, &self);
        return Expired(what);
      }
      batch->changed.WaitUntil(&mu_, Steady(deadline));
    }
  }
  return Lead(what, batch, &self, compute);
}

absl::Status Batcher::Lead(const char* what, const std::shared_ptr<Batch>& batch, Member* self,
                           Compute compute) {
  if (options_.max_delay > absl::ZeroDuration()) {
    MutexLock lock(&mu_);
    const absl::Time until = std::min(batch->opened + options_.max_delay, self->deadline);
    while (batch->rows < options_.max_rows && absl::Now() < until) {
      batch->changed.WaitUntil(&mu_, Steady(until));
    }
  }
  std::optional<ServingGate::Slot> slot;
  if (gate_ != nullptr) {
    absl::StatusOr<ServingGate::Slot> s = gate_->Enter(what, self->deadline);
    if (!s.ok()) {
      // Refused or expired at the gate: the next member leads (and asks the
      // gate with its own deadline).
      MutexLock lock(&mu_);
      batch->led = false;
      LeaveLocked(batch, self);
      batch->changed.SignalAll();
      return s.status();
    }
    slot.emplace(std::move(*s));
  }
  std::vector<Member*> members;
  {
    MutexLock lock(&mu_);
    CloseLocked(batch);
    waiting_ -= static_cast<int64_t>(batch->members.size());
    const absl::Time now = absl::Now();
    for (Member* m : batch->members) {
      if (m != self && now >= m->deadline) {
        m->status = Expired(what);
        m->done = true;
        ++expired_;
      } else {
        members.push_back(m);
      }
    }
    if (members.size() > 1) {
      ++batches_;
      batched_calls_ += static_cast<int64_t>(members.size());
    }
    batch->changed.SignalAll();
  }
  absl::Status status;
  if (members.size() == 1) {
    const Share share{0, self->rows->rows(), self->out};
    status = compute(*self->rows, absl::MakeConstSpan(&share, 1));
  } else {
    std::vector<Share> shares;
    shares.reserve(members.size());
    int64_t total = 0;
    for (const Member* m : members) {
      shares.push_back(Share{total, m->rows->rows(), m->out});
      total += m->rows->rows();
    }
    RowMatrixF stacked(total, self->rows->cols());
    for (size_t i = 0; i < members.size(); ++i) {
      stacked.middleRows(shares[i].offset, shares[i].rows) = *members[i]->rows;
    }
    status = compute(MatrixView(stacked.data(), stacked.rows(), stacked.cols()), shares);
  }
  slot.reset();
  MutexLock lock(&mu_);
  for (Member* m : members) {
    m->status = status;
    m->done = true;
  }
  batch->changed.SignalAll();
  return status;
}

void Batcher::LeaveLocked(const std::shared_ptr<Batch>& batch, Member* m) {
  auto& members = batch->members;
  members.erase(std::find(members.begin(), members.end(), m));
  batch->rows -= m->rows->rows();
  --waiting_;
  if (members.empty()) CloseLocked(batch);
}

void Batcher::CloseLocked(const std::shared_ptr<Batch>& batch) {
  batch->closed = true;
  auto it = open_.find(batch->key);
  if (it != open_.end() && it->second == batch) open_.erase(it);
}

Batcher::Stats Batcher::stats() const {
  ReaderMutexLock lock(&mu_);
  return Stats{batches_, batched_calls_, expired_, waiting_};
}

}  // namespace dendro::server
