// StreamLimiter: caps on concurrent streaming RPCs and an idle timeout for
// the ones that wait on their client.
//
// Each open stream (and each WaitJob call) holds one server thread (and, for
// an upload, an open file) for as long as the client keeps it open.
// Acquire() hands out slots under three caps, each refused with
// RESOURCE_EXHAUSTED naming the flag that sets it:
//   - at most `max_streams` slots in all (--max_streams);
//   - at most `max_streams - admin_reserved` to callers that are not admins,
//     so an admin can always get one of the last few (--admin_reserved_streams);
//   - at most `max_per_caller` to any one caller (a key's principal, or with
//     authentication off a connection's peer; --max_streams_per_caller), so
//     one caller cannot take the whole pool.
// A slot acquired with an idle callback must be Touch()ed whenever its
// client sends (or takes) something; a reaper thread calls the callback once
// when it has been idle longer than the slot's idle timeout. Thread-safe.
#ifndef DENDRO_SERVER_TRANSPORT_STREAM_LIMITER_H_
#define DENDRO_SERVER_TRANSPORT_STREAM_LIMITER_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/common/mutex.h"

namespace dendro::server {

class StreamLimiter {
 public:
  struct Options {
    int max_streams = 64;
    // 0: half of max_streams (at least 1).
    int max_per_caller = 0;
    // Slots only admins may take; at most a quarter of max_streams is kept.
    int admin_reserved = 0;
  };

  class Slot {
   public:
    ~Slot();
    // The client just sent (or, on a download, took) something.
    void Touch() { last_ns_.store(NowNs(), std::memory_order_relaxed); }
    // True once the idle callback has run.
    bool timed_out() const { return timed_out_.load(); }
    // How long the slot may stay idle before its callback runs.
    absl::Duration idle_timeout() const { return absl::Nanoseconds(idle_ns_); }

    // While a Working object lives, the server is the one busy (writing what
    // it received, committing it), not the client: the slot never times out,
    // and its idle clock starts again when the last one ends.
    class Working {
     public:
      explicit Working(Slot* slot) : slot_(slot) { slot_->working_.fetch_add(1); }
      ~Working() {
        slot_->Touch();
        slot_->working_.fetch_sub(1);
      }
      Working(const Working&) = delete;
      Working& operator=(const Working&) = delete;

     private:
      Slot* const slot_;
    };

   private:
    friend class StreamLimiter;
    Slot(StreamLimiter* owner, std::string caller, int64_t idle_ns,
         std::function<void()> on_idle)
        : owner_(owner),
          caller_(std::move(caller)),
          idle_ns_(idle_ns),
          on_idle_(std::move(on_idle)) {
      Touch();
    }
    static int64_t NowNs();

    StreamLimiter* owner_;
    const std::string caller_;
    const int64_t idle_ns_;
    std::function<void()> on_idle_;  // empty: never times out
    std::atomic<int64_t> last_ns_{0};
    std::atomic<int> working_{0};  // live Working objects
    std::atomic<bool> timed_out_{false};
  };

  // One pool of `max_streams`, no per-caller cap nor reserve; `idle_timeout`
  // is the default idle timeout of a slot.
  StreamLimiter(int max_streams, absl::Duration idle_timeout);
  StreamLimiter(Options options, absl::Duration idle_timeout);
  ~StreamLimiter();
  StreamLimiter(const StreamLimiter&) = delete;
  StreamLimiter& operator=(const StreamLimiter&) = delete;

  // A slot for one stream of `rpc` (named in the refusal) opened by `caller`
  // (an admin when `admin`), or RESOURCE_EXHAUSTED naming the cap that is
  // reached. `on_idle` may be empty for streams the server ends by itself;
  // otherwise it runs once (cheap and non-blocking, e.g. a cancel) after
  // `idle_timeout` (the limiter's default when zero) with no Touch().
  absl::StatusOr<std::unique_ptr<Slot>> Acquire(const std::string& rpc, const std::string& caller,
                                                bool admin, std::function<void()> on_idle,
                                                absl::Duration idle_timeout = absl::ZeroDuration())
      ABSL_LOCKS_EXCLUDED(mu_);
  // An anonymous caller's slot with the default idle timeout.
  absl::StatusOr<std::unique_ptr<Slot>> Acquire(const std::string& rpc,
                                                std::function<void()> on_idle) {
    return Acquire(rpc, std::string(), false, std::move(on_idle));
  }
  int open_streams() ABSL_LOCKS_EXCLUDED(mu_);
  absl::Duration idle_timeout() const { return idle_timeout_; }
  // The caps in force (defaults resolved).
  int max_streams() const { return max_streams_; }
  int max_per_caller() const { return max_per_caller_; }
  int admin_reserved() const { return admin_reserved_; }

  // The server is shutting down: streams that wait on the server (job
  // watches, WaitJob) should end. Never undone.
  void Close() { closing_.store(true); }
  bool closing() const { return closing_.load(); }

 private:
  void Release(Slot* slot) ABSL_LOCKS_EXCLUDED(mu_);
  void ReapLoop() ABSL_LOCKS_EXCLUDED(mu_);

  const int max_streams_;
  const int max_per_caller_;
  const int admin_reserved_;
  const absl::Duration idle_timeout_;
  std::atomic<bool> closing_{false};
  Mutex mu_;
  CondVar cv_;
  std::set<Slot*> slots_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> per_caller_ ABSL_GUARDED_BY(mu_);
  int64_t min_idle_ns_ ABSL_GUARDED_BY(mu_);  // sets the reaper's period
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread reaper_;
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_TRANSPORT_STREAM_LIMITER_H_
