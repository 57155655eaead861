// JobManager: the bounded job queue, its worker threads and job state.
//
// Lifecycle of a job: QUEUED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED.
// Every state transition is written to the Catalogue before it becomes
// visible; progress and stage text are kept in memory only. On Start(), jobs
// the store still lists as QUEUED or RUNNING (the server stopped while they
// were pending) are queued again, in submission order, unless a cancel was
// recorded for them (then CANCELLED) or they were already started
// max_attempts times (then FAILED: a job that kills the process cannot
// crash-loop it). Shutdown() drains: new submissions are refused, running
// jobs get a grace period, then are interrupted and left QUEUED for the next
// start; a job that does not stop within stop_timeout of the interrupt is
// recorded as interrupted and abandoned (the caller then ends the process).
//
// A transient dataset is deleted as soon as the last job using it has
// ended, whatever the outcome (and swept at start-up in any case).
//
// Invariants:
//   * at most queue_capacity jobs wait in the queue (recovered jobs may
//     exceed it once at start-up);
//   * a job's progress never decreases while it runs;
//   * a cancel request reaches the running algorithm through
//     RunContext::Cancelled(), and a requested cancel always wins over a
//     shutdown interrupt: a cancelled job never runs again;
//   * an exception thrown by a method (std::bad_alloc included) fails that
//     job only.
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
#include "server/catalogue.h"
#include "server/methods/method.h"
#include "server/model_registry.h"

namespace dendro::server {

class JobManager {
 public:
  struct Options {
    int workers = 1;
    int queue_capacity = 64;
    // Starts without finishing after which a recovered job is FAILED.
    int max_attempts = 3;
    // After the shutdown interrupt, how long running jobs may take to stop
    // before they are abandoned.
    absl::Duration stop_timeout = absl::Seconds(10);
    // Submit-time resource limits, passed to Method::Validate.
    JobLimits limits;
    // Maps a spec to its Method; MethodForSpec unless a test substitutes
    // one (e.g. a method that blocks until cancelled).
    std::function<absl::StatusOr<const Method*>(const v1::JobSpec&)> resolve_method;
    // Finished job records older than this are removed (their models stay);
    // zero keeps them forever.
    absl::Duration retention = absl::ZeroDuration();
    // Called (with the manager's lock held: keep it cheap) when a job that
    // ran has ended SUCCEEDED, FAILED or CANCELLED. Optional.
    std::function<void(const v1::Job&)> on_finished;
  };

  struct Stats {
    int queued = 0;
    int running = 0;
  };

  JobManager(Options options, Catalogue* meta, DatasetStore* datasets,
             ModelRegistry* models);
  ~JobManager();

  // Re-queues unfinished jobs and starts the workers.
  absl::Status Start();
  // Refuses new jobs, waits up to `grace` for running ones, interrupts the
  // rest (they stay QUEUED in the store, or become CANCELLED if a cancel was
  // asked for) and joins the workers. Returns false if some job did not stop
  // within stop_timeout of the interrupt: its record is already written as
  // interrupted, its worker thread is detached and must not outlive the
  // process for long (dendrod exits at once; see DendroServer::Shutdown).
  bool Shutdown(absl::Duration grace);

  // `owner`: the submitting principal, recorded on the job and its model.
  // With a `request_id`, a repeat of the same (owner, request_id) returns
  // the first job instead of creating another (ALREADY_EXISTS if the spec
  // differs).
  absl::StatusOr<v1::Job> Submit(const v1::JobSpec& spec, const std::string& owner = "",
                                 const std::string& request_id = "");
  absl::StatusOr<v1::Job> Get(const std::string& id);
  absl::StatusOr<Page<v1::Job>> List(int64_t after_seq, int limit) {
    return meta_->ListJobs(after_seq, limit);
  }
  absl::StatusOr<v1::Job> Cancel(const std::string& id);
  // Removes a finished job's record; FAILED_PRECONDITION while it is queued
  // or running.
  absl::Status Delete(const std::string& id);
  // Blocks until the job has changed since `*seen` (a change counter the
  // caller keeps, start at 0), the job is finished, or `deadline` passes;
  // returns the current job and updates `*seen`.
  absl::StatusOr<v1::Job> WaitForChange(const std::string& id, uint64_t* seen,
                                        absl::Time deadline);
  Stats GetStats();

  // True if a queued or running job reads the dataset.
  bool DatasetInUse(const std::string& dataset_id);

 private:
  struct Entry {
    v1::Job job;                      // guarded by mu_
    uint64_t version = 1;             // guarded by mu_; bumps on each change
    std::atomic<bool> cancel{false};  // user cancel or shutdown interrupt
    std::atomic<bool> interrupted{false};
    bool user_cancel = false;         // guarded by mu_; a cancel was requested
  };
  class Context;

  void WorkerLoop();
  void Run(const std::shared_ptr<Entry>& entry);
  // Applies Options::retention periodically until Shutdown.
  void RetentionLoop();
  static absl::Status ValidateRequestId(const std::string& request_id);
  // The answer to a repeated request: `previous` as it is now.
  absl::StatusOr<v1::Job> Replay(const v1::Job& previous, const v1::JobSpec& submitted);
  // Cancel() without the transient-dataset release (takes mu_ itself).
  absl::StatusOr<v1::Job> CancelEntry(const std::string& id);
  // Deletes a transient dataset unless a queued or running job other than
  // `except_job` uses it.
  void ReleaseTransientDataset(const std::string& dataset_id,
                               const std::string& except_job = "");
  // Runs the method; exceptions become a failed status.
  absl::StatusOr<std::unique_ptr<FittedModel>> Fit(const v1::JobSpec& spec, RunContext& ctx);
  // Refuses a job whose model name already holds another method's versions,
  // unless the spec allows it.
  absl::Status CheckMethodChange(const v1::JobSpec& spec, const Method& method);
  // Sets the terminal (or re-queued) state of an interrupted or failed job.
  // Requires mu_ held.
  void RecordStopLocked(Entry& entry, const absl::Status& outcome);
  // Persists entry->job and publishes the change. Requires mu_ held.
  absl::Status PublishLocked(Entry& entry);

  Options options_;
  Catalogue* const meta_;
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
  bool abandoned_ = false;  // jobs outlived stop_timeout; workers detached
  std::vector<std::thread> workers_;
  std::condition_variable retention_cv_;  // stopping_
  std::thread retention_thread_;
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_JOB_MANAGER_H_
