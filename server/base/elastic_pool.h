// ElasticPool: threads for work that may block, started when needed.
//
// Each task runs on an idle thread of the pool; when none is idle a new
// thread is started for it, up to `max_threads`, beyond which Schedule
// refuses the task. A thread with nothing to do for `idle_timeout` exits, so
// a burst leaves no threads behind. This is the thread-per-waiting-call model
// of a synchronous server, kept for the calls that need it: the callers of
// Schedule run their other work on threads that must not block.
//
// Thread-safe. The destructor waits for every scheduled task to finish.
#ifndef DENDRO_SERVER_BASE_ELASTIC_POOL_H_
#define DENDRO_SERVER_BASE_ELASTIC_POOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "core/common/mutex.h"

namespace dendro::server {

class ElasticPool {
 public:
  struct Options {
    int max_threads = 64;  // >= 1
    absl::Duration idle_timeout = absl::Seconds(10);
  };
  explicit ElasticPool(Options options);
  ElasticPool(const ElasticPool&) = delete;
  ElasticPool& operator=(const ElasticPool&) = delete;
  ~ElasticPool();

  // Runs `task` on a thread of the pool; false (and `task` not run) when
  // every one of max_threads threads is busy.
  bool Schedule(std::function<void()> task);

  struct Stats {
    int threads = 0;      // alive now
    int busy = 0;         // running a task or about to
    int64_t refused = 0;  // tasks Schedule turned away
  };
  Stats stats() const;

 private:
  void Work();
  // Joins the threads that have exited.
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable Mutex mu_;
  CondVar wake_;     // a task is queued, or the pool stops
  CondVar stopped_;  // a thread exited
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread::id> exited_ ABSL_GUARDED_BY(mu_);
  int alive_ ABSL_GUARDED_BY(mu_) = 0;
  int idle_ ABSL_GUARDED_BY(mu_) = 0;  // waiting for a task
  int64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_BASE_ELASTIC_POOL_H_
