// StreamLimiter: a cap on concurrent streaming RPCs and an idle timeout for
// the ones that wait on their client.
//
// Each open stream holds one server thread (and, for an upload, an open
// file) for as long as the client keeps it open. Acquire() hands out at most
// `max_streams` slots at a time; more are refused with RESOURCE_EXHAUSTED.
// A slot acquired with an idle callback must be Touch()ed whenever its
// client sends something; a reaper thread calls the callback once (for a
// gRPC stream: ServerContext::TryCancel) when it has been idle longer than
// `idle_timeout`. Thread-safe.
#ifndef DENDRO_SERVER_STREAM_LIMITER_H_
#define DENDRO_SERVER_STREAM_LIMITER_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace dendro::server {

class StreamLimiter {
 public:
  class Slot {
   public:
    ~Slot();
    // The client just sent (or, on a download, took) something.
    void Touch() { last_ns_.store(NowNs(), std::memory_order_relaxed); }
    // True once the idle callback has run.
    bool timed_out() const { return timed_out_.load(); }

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
    Slot(StreamLimiter* owner, std::function<void()> on_idle)
        : owner_(owner), on_idle_(std::move(on_idle)) {
      Touch();
    }
    static int64_t NowNs();

    StreamLimiter* owner_;
    std::function<void()> on_idle_;  // empty: never times out
    std::atomic<int64_t> last_ns_{0};
    std::atomic<int> working_{0};  // live Working objects
    std::atomic<bool> timed_out_{false};
  };

  StreamLimiter(int max_streams, absl::Duration idle_timeout);
  ~StreamLimiter();
  StreamLimiter(const StreamLimiter&) = delete;
  StreamLimiter& operator=(const StreamLimiter&) = delete;

  // A slot for one stream of `rpc` (named in the refusal), or
  // RESOURCE_EXHAUSTED when every slot is taken. `on_idle` may be empty for
  // streams that never wait on their client (e.g. a job watch).
  absl::StatusOr<std::unique_ptr<Slot>> Acquire(const std::string& rpc,
                                                std::function<void()> on_idle);
  int open_streams();
  absl::Duration idle_timeout() const { return idle_timeout_; }

 private:
  void Release(Slot* slot);
  void ReapLoop();

  const int max_streams_;
  const absl::Duration idle_timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<Slot*> slots_;  // guarded by mu_
  bool stop_ = false;      // guarded by mu_
  std::thread reaper_;
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_STREAM_LIMITER_H_
