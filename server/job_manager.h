// JobManager: the bounded job queue, its worker threads and job state.
//
// Lifecycle of a job: QUEUED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED.
// Every state transition is written to the MetadataStore before it becomes
// visible; progress and stage text are kept in memory only. On Start(), jobs
// the store still lists as QUEUED or RUNNING (the server stopped while they
// were pending) are queued again, in submission order. Shutdown() drains:
// new submissions are refused, running jobs get a grace period, then are
// interrupted and left QUEUED for the next start.
//
// Invariants:
//   * at most queue_capacity jobs wait in the queue (recovered jobs may
//     exceed it once at start-up);
//   * a job's progress never decreases while it runs;
//   * a cancel request reaches the running algorithm through
//     RunContext::Cancelled().
#ifndef DENDRO_SERVER_JOB_MANAGER_H_
#define DENDRO_SERVER_JOB_MANAGER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dendro/v1/dendro.pb.h"
#include "server/dataset_store.h"
#include "server/metadata_store.h"
#include "server/methods/method.h"
#include "server/model_registry.h"

namespace dendro::server {

class JobManager {
 public:
  struct Options {
    int workers = 1;
    int queue_capacity = 64;
    // Maps a spec to its Method; MethodForSpec unless a test substitutes
    // one (e.g. a method that blocks until cancelled).
    std::function<absl::StatusOr<const Method*>(const v1::JobSpec&)> resolve_method;
  };

  JobManager(Options options, MetadataStore* meta, DatasetStore* datasets,
             ModelRegistry* models);
  ~JobManager();

  // Re-queues unfinished jobs and starts the workers.
  absl::Status Start();
  // Refuses new jobs, waits up to `grace` for running ones, interrupts the
  // rest (they stay QUEUED in the store) and joins the workers.
  void Shutdown(absl::Duration grace);

  absl::StatusOr<v1::Job> Submit(const v1::JobSpec& spec);
  absl::StatusOr<v1::Job> Get(const std::string& id);
  absl::StatusOr<Page<v1::Job>> List(int64_t after_seq, int limit) {
    return meta_->ListJobs(after_seq, limit);
  }
  absl::StatusOr<v1::Job> Cancel(const std::string& id);
  // Blocks until the job has changed since `*seen` (a change counter the
  // caller keeps, start at 0), the job is finished, or `deadline` passes;
  // returns the current job and updates `*seen`.
  absl::StatusOr<v1::Job> WaitForChange(const std::string& id, uint64_t* seen,
                                        absl::Time deadline);
  // True if a queued or running job reads the dataset.
  bool DatasetInUse(const std::string& dataset_id);

 private:
  struct Entry {
    v1::Job job;                      // guarded by mu_
    uint64_t version = 1;             // guarded by mu_; bumps on each change
    std::atomic<bool> cancel{false};  // user cancel or shutdown interrupt
    std::atomic<bool> interrupted{false};
  };
  class Context;

  void WorkerLoop();
  void Run(const std::shared_ptr<Entry>& entry);
  // Persists entry->job and publishes the change. Requires mu_ held.
  absl::Status PublishLocked(Entry& entry);

  Options options_;
  MetadataStore* const meta_;
  DatasetStore* const datasets_;
  ModelRegistry* const models_;

  std::mutex mu_;
  std::condition_variable queue_cv_;    // queue_ non-empty or stopping_
  std::condition_variable changed_cv_;  // any entry changed
  std::deque<std::string> queue_;
  std::map<std::string, std::shared_ptr<Entry>> active_;  // queued or running
  int running_ = 0;
  bool accepting_ = false;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_JOB_MANAGER_H_
