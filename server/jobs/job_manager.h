// JobManager: submits jobs to the catalogue's queue, runs the ones this
// replica claims, and answers for any job.
//
// Lifecycle of a job: QUEUED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED.
// The queue lives in the Catalogue, shared by every dendrod using it (one
// with SQLite, any number with PostgreSQL). Idle workers claim the oldest
// queued job (Catalogue::ClaimJob) under a lease that a maintenance thread
// renews every renew_interval, writing the job's progress at the same time:
// progress is published locally at once and to the catalogue at most once
// per renew_interval. A replica that dies stops renewing; once its lease
// expires any replica re-queues the job and one claims it again (attempts
// counts the starts). A job claimed for the (max_attempts + 1)th time is
// FAILED, never run again: a job that kills its server cannot crash-loop
// the fleet. A replica that restarts under the same replica_id re-queues its
// own jobs at once.
//
// Every write a running job makes (progress, outcome, model commit) names
// its lease's token; after the lease has passed to another replica those
// writes are refused, the stale run's result is dropped, and so a job
// commits at most one model version.
//
// Cancel works from any replica: a queued job is CANCELLED at once; a
// running one gets cancel_requested in the catalogue, which its holder reads
// at its next renewal and passes to the algorithm (RunContext::Cancelled).
// Shutdown() drains: new submissions are refused, this replica stops
// claiming, running jobs get a grace period, then are interrupted and put
// back in the queue (another replica may take them at once); a job that does
// not stop within stop_timeout of the interrupt is recorded as interrupted
// and abandoned (the caller then ends the process).
//
// A transient dataset is deleted as soon as no queued or running job uses
// it, whatever the outcome.
//
// Invariants:
//   * at most queue_capacity jobs are QUEUED over every replica;
//   * a job's progress never decreases while it runs;
//   * a requested cancel always wins over a shutdown interrupt: a cancelled
//     job never runs again;
//   * an exception thrown by a method (std::bad_alloc included) fails that
//     job only.
#ifndef DENDRO_SERVER_JOBS_JOB_MANAGER_H_
#define DENDRO_SERVER_JOBS_JOB_MANAGER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/common/mutex.h"
#include "dendro/v1/dendro.pb.h"
#include "server/storage/dataset_store.h"
#include "server/catalogue/catalogue.h"
#include "server/methods/method.h"
#include "server/models/model_registry.h"

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
    // Names this process as a lease holder; unique among the replicas that
    // share a catalogue, and the same across a restart where possible.
    std::string replica_id = "local";
    // A lease not renewed for this long lets another replica take the job.
    absl::Duration lease_ttl = absl::Seconds(30);
    // How often running jobs' leases are renewed and their progress written
    // to the catalogue; well under lease_ttl.
    absl::Duration renew_interval = absl::Seconds(1);
    // How often idle workers look for jobs submitted through other replicas
    // (a submission here wakes them at once).
    absl::Duration poll_interval = absl::Milliseconds(250);
    // The nice value of the worker threads and of the threads their jobs
    // start (0-19): fits yield the CPU to request handling when both want
    // it, and still use every core when nobody is calling.
    int nice = 10;
    // SCHED_IDLE for the worker threads and the threads their jobs start:
    // they run only on cores that no other thread of their cgroup wants, so
    // a fit takes no CPU from a request waiting for one (the nice value above
    // still shares the cores by weight, about a tenth for the job at nice 10).
    // Off by default: outside a container of its own, "other threads" are
    // every process of the session (a browser, a build), behind which a fit
    // would crawl. When the kernel refuses the policy, the nice value alone
    // applies.
    bool idle_scheduling = false;
    // Called (with the manager's lock held: keep it cheap) when a job that
    // ran has ended SUCCEEDED, FAILED or CANCELLED. Optional.
    std::function<void(const v1::Job&)> on_finished;
    // Called likewise when this replica has claimed a job and is about to
    // run it (the job is RUNNING, its start_time set). Optional.
    std::function<void(const v1::Job&)> on_started;
  };

  struct Stats {
    int queued = 0;   // over every replica; -1 if the catalogue is unreadable
    int running = 0;  // on this replica
  };
  // Lease events since this manager was made. Each expired lease is
  // re-queued by exactly one replica, so summing `takeovers` over replicas
  // counts each once.
  struct LeaseStats {
    int64_t takeovers = 0;  // other replicas' jobs re-queued here after their lease expired
    int64_t lost = 0;       // runs here stopped because their lease passed to another replica
  };

  JobManager(Options options, Catalogue* catalogue, DatasetStore* datasets,
             ModelRegistry* models);
  ~JobManager();

  // Re-queues the jobs this replica held before a restart (and any whose
  // lease expired) and starts the workers.
  absl::Status Start() ABSL_LOCKS_EXCLUDED(mu_);
  // Refuses new jobs, waits up to `grace` for running ones, interrupts the
  // rest (they go back to the queue, or become CANCELLED if a cancel was
  // asked for) and joins the workers. Returns false if some job did not stop
  // within stop_timeout of the interrupt: its record is already written as
  // interrupted, its worker thread is detached and must not outlive the
  // process for long (dendrod exits at once; see DendroServer::Shutdown).
  bool Shutdown(absl::Duration grace) ABSL_LOCKS_EXCLUDED(mu_);

  // `owner`: the submitting principal, recorded on the job and its model.
  // With a `request_id`, a repeat of the same (owner, request_id) returns
  // the first job instead of creating another (ALREADY_EXISTS if the spec
  // differs).
  absl::StatusOr<v1::Job> Submit(const v1::JobSpec& spec, const std::string& owner = "",
                                 const std::string& request_id = "") ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<v1::Job> Get(const std::string& id) ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<Page<v1::Job>> List(int64_t cursor, int limit, const JobListing& listing) {
    return catalogue_->ListJobs(cursor, limit, listing);
  }
  absl::StatusOr<v1::Job> Cancel(const std::string& id) ABSL_LOCKS_EXCLUDED(mu_);
  // Removes a finished job's record; FAILED_PRECONDITION while it is queued
  // or running.
  absl::Status Delete(const std::string& id);
  // Blocks until the job differs from what `*seen` describes (a fingerprint
  // the caller keeps; start at 0), the job is finished, or `deadline`
  // passes; returns the current job and updates `*seen` (UINT64_MAX once the
  // job has finished). A job running on another replica is polled.
  absl::StatusOr<v1::Job> WaitForChange(const std::string& id, uint64_t* seen, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_);
  Stats GetStats() ABSL_LOCKS_EXCLUDED(mu_);
  // Reads no catalogue.
  LeaseStats GetLeaseStats() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // A job this replica has claimed and not yet finished.
  //
  // Its Guarded fields belong to JobManager::mu_, a member of the manager
  // that an annotation inside Entry cannot name. So they are private to
  // Entry and reached only through JobManager::Guarded(), which requires
  // mu_: the analysis checks each call. The reference it returns is used
  // only while mu_ is held.
  class Entry {
   public:
    struct Guarded {
      v1::Job job;
      bool user_cancel = false;  // a cancel was requested
      bool lost = false;         // the lease passed on
      // The run is writing its outcome, which ends the lease; a renewal
      // refused from then on says nothing about a lost lease.
      bool finishing = false;
      // Ended (job holds its final state) but the catalogue refused the
      // record (a full disk, a database outage). The entry stays, so this
      // replica answers with the outcome at once, keeps the lease and
      // retries the record at every renewal until it lands.
      bool unrecorded = false;
      std::string final_stage;  // the stage to record then
    };

    Entry(v1::Job job, int64_t token) : token(token) { guarded_.job = std::move(job); }

    const int64_t token;              // the lease's fencing token
    std::atomic<bool> cancel{false};  // user cancel, shutdown interrupt or lost lease
    std::atomic<bool> interrupted{false};

   private:
    friend class JobManager;
    Guarded guarded_;  // only through JobManager::Guarded()
  };
  class Context;

  // The fields of `entry` that mu_ guards.
  Entry::Guarded& Guarded(Entry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return entry.guarded_;
  }

  void WorkerLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Checks a freshly claimed job; records and returns false if it must not
  // run (cancelled while it waited, out of attempts, dataset gone).
  bool Admit(Entry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run(const std::shared_ptr<Entry>& entry) ABSL_LOCKS_EXCLUDED(mu_);
  // Renews leases (passing on remote cancels), re-queues jobs whose lease
  // expired and applies Options::retention, until the workers have stopped.
  void MaintenanceLoop() ABSL_LOCKS_EXCLUDED(mu_);
  void RenewLeases() ABSL_LOCKS_EXCLUDED(mu_);
  static absl::Status ValidateRequestId(const std::string& request_id);
  // FailedPrecondition unless `base` (a JobSpec.warm_start) was fitted on a
  // generation of `dataset`'s lineage with no more rows than it: its rows
  // are then the dataset's first rows.
  absl::Status CheckWarmStart(const v1::Model& base, const v1::Dataset& dataset);
  // The answer to a repeated request: `previous` as it is now.
  absl::StatusOr<v1::Job> Replay(const v1::Job& previous, const v1::JobSpec& submitted);
  // Deletes a transient dataset unless a queued or running job other than
  // `except_job` uses it.
  void ReleaseTransientDataset(const std::string& dataset_id, const std::string& except_job = "")
      ABSL_LOCKS_EXCLUDED(mu_);
  // Runs the method; exceptions become a failed status.
  absl::StatusOr<std::unique_ptr<FittedModel>> Fit(const v1::JobSpec& spec, RunContext& ctx);
  // Refuses a job whose model name already holds another method's versions,
  // unless the spec allows it.
  absl::Status CheckMethodChange(const v1::JobSpec& spec, const Method& method);
  // Sets the terminal (or re-queued) state of an interrupted or failed job.
  void RecordStopLocked(Entry& entry, const absl::Status& outcome)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the entry's job under its lease (ending it). The catalogue's
  // error when it could not take the record; OK when recorded, or when the
  // lease passed on (then nothing is left to record).
  absl::Status ReleaseLocked(Entry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends a run whose record ReleaseLocked could not write: frees its worker
  // slot and leaves the entry for RenewLeases to record.
  void KeepUnrecordedLocked(const std::shared_ptr<Entry>& entry, const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records every such entry the catalogue now takes, and drops it.
  void RetryUnrecordedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops a finished entry and reports it.
  void ForgetLocked(const std::shared_ptr<Entry>& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Options options_;
  Catalogue* const catalogue_;
  DatasetStore* const datasets_;
  ModelRegistry* const models_;

  Mutex mu_;
  CondVar wake_cv_;                                // a job was submitted here, or draining
  CondVar changed_cv_;                             // a local entry changed
  // Bumps on each local submission and each job another replica queues.
  uint64_t submissions_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, std::shared_ptr<Entry>> active_ ABSL_GUARDED_BY(mu_);  // claimed here
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  LeaseStats lease_stats_ ABSL_GUARDED_BY(mu_);
  int claiming_ ABSL_GUARDED_BY(mu_) = 0;        // workers between ClaimJob and registering its job
  bool accepting_ ABSL_GUARDED_BY(mu_) = false;  // submissions and claims allowed
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;   // workers must return
  bool abandoned_ ABSL_GUARDED_BY(mu_) = false;  // jobs outlived stop_timeout; workers detached
  std::vector<std::thread> workers_;
  CondVar maintenance_cv_;  // maintenance_stop_
  bool maintenance_stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread maintenance_thread_;
  std::unique_ptr<Catalogue::ChangeWatch> queue_watch_;  // set by Start, reset by Shutdown
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_JOBS_JOB_MANAGER_H_
