// Catalogue: what Dendro records about datasets, jobs and models.
//
// Each record is a serialized dendro.v1 message plus the few fields queries
// need. Arrays and trees live in files (see DatasetStore and ModelRegistry);
// a row is written only after its files are durable, and deleted before its
// files are removed, so the catalogue never points at a missing file.
//
// Two implementations, one contract (tests/server/catalogue_test.cc runs the
// same cases on both):
//   * SqliteCatalogue (sqlite_catalogue.h): one file in the data directory;
//     the default, for a single dendrod.
//   * PostgresCatalogue (postgres_catalogue.h): a PostgreSQL 15 database
//     that several dendrod replicas can share.
// OpenCatalogue (server/catalogue/open_catalogue.h) picks one from the --catalog flag. All methods are
// thread-safe.
//
// Pagination: every table has an integer `seq` in insertion order; List*
// return rows with seq > after_seq and report the last seq.
//
// Errors: NOT_FOUND names the object; ALREADY_EXISTS for a duplicate key;
// RESOURCE_EXHAUSTED when the database's storage is full; UNAVAILABLE when
// the database cannot be reached or is busy; DATA_LOSS for a record that
// does not parse; INTERNAL otherwise. Messages never hold a password.
#ifndef DENDRO_SERVER_CATALOGUE_CATALOGUE_H_
#define DENDRO_SERVER_CATALOGUE_CATALOGUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dendro/v1/dendro.pb.h"
#include "server/base/job_lifecycle.h"

namespace dendro::server {

template <typename T>
struct Page {
  std::vector<T> items;
  int64_t last_seq = 0;  // seq of the last item; 0 if empty
  bool more = false;     // rows remain after this page
};

// Which jobs ListJobs returns, in which order. The cursor of a page is the
// seq of the last job of the page before (0: the first page): listing goes
// on above it oldest first, below it newest first.
struct JobListing {
  bool newest_first = false;
  uint32_t state_mask = 0;  // bit s: v1::JobState s is listed; 0: every state

  bool Lists(v1::JobState state) const {
    return state_mask == 0 || (state_mask >> static_cast<int>(state) & 1u) != 0;
  }
};

struct StoredModel {
  v1::Model model;
  std::string dir;  // artifact directory, relative to the data dir
};

// What CommitModel did: the new version, and the older versions the name's
// retention policy removed in the same transaction (their files are the
// caller's to delete).
struct CommitResult {
  int64_t version = 0;
  std::vector<StoredModel> pruned;
};

// A job taken from the queue: its record as stored (RUNNING, attempts
// counted) and the lease's fencing token. Writes made under the lease name
// the token; once the lease has passed to someone else they are refused.
struct ClaimedJob {
  v1::Job job;
  int64_t token = 0;
};

struct JobCounts {
  int64_t queued = 0;
  int64_t running = 0;
};

class Catalogue {
 public:
  virtual ~Catalogue() = default;

  // Inserts a dataset's row, indexed by its id and by (lineage,
  // generation) (DatasetLineage/DatasetGeneration below); ALREADY_EXISTS when
  // either is taken, which is how two appends racing for one generation
  // are told apart.
  virtual absl::Status PutDataset(const v1::Dataset& d) = 0;
  virtual absl::StatusOr<v1::Dataset> GetDataset(const std::string& id) = 0;
  // Generation `generation` (>= 1) of `lineage`, or its newest generation
  // when `generation` is 0; NOT_FOUND when there is none.
  virtual absl::StatusOr<v1::Dataset> GetDatasetGeneration(const std::string& lineage,
                                                           int generation) = 0;
  virtual absl::StatusOr<Page<v1::Dataset>> ListDatasets(int64_t after_seq, int limit) = 0;
  virtual absl::Status DeleteDataset(const std::string& id) = 0;
  // Removes the row unless a QUEUED or RUNNING job other than `except_job`
  // uses the dataset (FailedPrecondition, nothing removed). The check and
  // the removal are atomic with EnqueueJob, which refuses a job whose
  // dataset has no row: no job is ever queued on a dataset this removed,
  // whichever replica does either.
  virtual absl::Status DeleteUnusedDataset(const std::string& id,
                                           const std::string& except_job) = 0;
  // Every dataset id. An error (never an empty list) when the catalogue
  // cannot be read: callers sweep files that are not listed here.
  virtual absl::StatusOr<std::vector<std::string>> AllDatasetIds() = 0;

  // Insert or replace by id.
  virtual absl::Status PutJob(const v1::Job& job) = 0;
  virtual absl::StatusOr<v1::Job> GetJob(const std::string& id) = 0;
  // Removes a job's record (any state: callers check it is finished).
  virtual absl::Status DeleteJob(const std::string& id) = 0;
  // Removes finished jobs whose end_time is before `epoch_seconds`;
  // returns how many.
  virtual absl::StatusOr<int> DeleteJobsEndedBefore(int64_t epoch_seconds) = 0;
  // The job `owner` created under SubmitJobRequest.request_id, if any.
  // PutJob refuses (ALREADY_EXISTS) a second job with the same pair.
  virtual absl::StatusOr<std::optional<v1::Job>> FindJobByRequest(const std::string& owner,
                                                                  const std::string& request_id) = 0;
  virtual absl::StatusOr<Page<v1::Job>> ListJobs(int64_t cursor, int limit,
                                                 const JobListing& listing) = 0;
  // Jobs in QUEUED or RUNNING state, oldest first.
  virtual absl::StatusOr<std::vector<v1::Job>> UnfinishedJobs() = 0;

  // --- The job queue, shared by every dendrod using this catalogue. ---
  //
  // A RUNNING job is leased: its holder (a replica id) must renew the lease
  // before it expires, and every write it makes names the lease's token. A
  // lease that expires (the holder died or lost the database) lets another
  // replica re-queue and claim the job; the old holder's writes are then
  // refused with ABORTED, so a job commits at most one model. Lease times
  // are the catalogue's clock (the database server's for PostgreSQL), never
  // compared with a replica's clock.
  //
  // Invariant: once cancel_requested is set on a job it stays set; writes
  // by the lease holder keep it whatever their record says, and a job with
  // it is never put back in the queue by its holder (it ends CANCELLED).

  // Inserts `job` (QUEUED) unless `capacity` jobs are already QUEUED in the
  // whole catalogue (RESOURCE_EXHAUSTED, naming the count) or its dataset
  // has no row (NOT_FOUND; see DeleteUnusedDataset).
  // ALREADY_EXISTS for a second job with the same (owner, request_id).
  virtual absl::Status EnqueueJob(const v1::Job& job, int capacity) = 0;
  // Takes the oldest QUEUED job: it becomes RUNNING (stage "starting",
  // progress 0, start_time now, attempts + 1), leased to `holder` for
  // `ttl` under a new token. nullopt when nothing is queued.
  virtual absl::StatusOr<std::optional<ClaimedJob>> ClaimJob(const std::string& holder,
                                                             absl::Duration ttl) = 0;
  // Extends the lease to `ttl` from now and records `progress` and `stage`,
  // if `token` still holds the job. Returns the stored record (whose
  // cancel_requested any replica may have set); ABORTED if the lease is lost.
  virtual absl::StatusOr<v1::Job> RenewJobLease(const std::string& id, int64_t token,
                                                absl::Duration ttl, double progress,
                                                const std::string& stage) = 0;
  // Stores `job` (finished, or QUEUED again) and ends the lease, if `token`
  // still holds it; ABORTED otherwise.
  virtual absl::Status ReleaseJob(const v1::Job& job, int64_t token) = 0;
  // Puts back in the queue every RUNNING job whose lease has expired and,
  // with a `holder`, every RUNNING job that holder leases (a replica that
  // restarts under the same id). Returns the jobs re-queued.
  virtual absl::StatusOr<std::vector<v1::Job>> RequeueLostJobs(const std::string& holder) = 0;
  // Reads job `id` under a row lock, lets `edit` change it (returning true
  // to store the change) and returns the record as stored. `edit` runs
  // inside the transaction: it must be quick and must not call back into
  // the catalogue.
  virtual absl::StatusOr<v1::Job> UpdateJob(const std::string& id,
                                            const std::function<bool(v1::Job&)>& edit) = 0;
  // How many jobs are QUEUED and RUNNING, over every replica.
  virtual absl::StatusOr<JobCounts> CountJobs() = 0;

  // In one transaction: assigns the next version of model.name(), stores
  // the model row with `dir`, stores `job` (already marked SUCCEEDED) with
  // the model name/version filled in, ends its lease and applies the name's
  // retention policy. With a `lease_token` (non-zero) nothing is written
  // unless that lease still holds the job (ABORTED), and a job whose cancel
  // was requested is not committed (CANCELLED).
  virtual absl::StatusOr<CommitResult> CommitModel(v1::Model model, const std::string& dir,
                                                   v1::Job job, int64_t lease_token) = 0;
  // By label when `label` is set, else by version (0 = latest). The
  // returned model carries its labels and its name's keep_versions.
  virtual absl::StatusOr<StoredModel> GetModel(const std::string& name, int64_t version,
                                               const std::string& label = "") = 0;
  virtual absl::StatusOr<Page<v1::Model>> ListModels(const std::string& name, int64_t after_seq,
                                                     int limit) = 0;
  // version 0 = all versions (and the name's labels). Returns the removed
  // rows (for file cleanup); NotFound if nothing matched; FailedPrecondition
  // for one version that a label points at.
  virtual absl::StatusOr<std::vector<StoredModel>> DeleteModels(const std::string& name,
                                                                int64_t version) = 0;
  // Points `label` of `name` at `version` (0 = latest); returns that model.
  virtual absl::StatusOr<v1::Model> SetModelLabel(const std::string& name, const std::string& label,
                                                  int64_t version) = 0;
  // Removes a label; returns the version it pointed at.
  virtual absl::StatusOr<int64_t> DeleteModelLabel(const std::string& name, const std::string& label) = 0;
  // Sets the name's policy (0 = keep all) and applies it now; returns the
  // versions removed. NotFound for a name that never had a version.
  virtual absl::StatusOr<std::vector<StoredModel>> SetModelRetention(const std::string& name,
                                                                     int64_t keep_versions) = 0;
  // Every model's artifact directory; an error when unreadable (as above).
  virtual absl::StatusOr<std::vector<std::string>> AllModelDirs() = 0;
  // Every version of `name` (of every name, when `name` is empty) with its
  // directory, labels and keep_versions, ordered by name and version; empty
  // when there is none. The registry's in-memory table of names, versions
  // and labels (server/models/model_table.h) is filled from it.
  virtual absl::StatusOr<std::vector<StoredModel>> ModelVersions(const std::string& name) = 0;

  // Where other processes may change models (shared()), calls
  // `changed(name)` from a thread of the catalogue's soon after any of them
  // commits a change to `name` (a version committed or deleted, a label set
  // or removed, a retention policy applied), and `changed("")` when changes
  // may have been missed: once the notification channel is up (again), and
  // every `reconcile` in case a notification was lost. The calls stop when
  // the returned object is destroyed; `changed` must not destroy it.
  // nullptr where only this process writes (SQLite): its own writes are all
  // the changes there are.
  class ChangeWatch {
   public:
    virtual ~ChangeWatch() = default;
  };
  virtual std::unique_ptr<ChangeWatch> WatchModelChanges(
      std::function<void(const std::string& name)> changed, absl::Duration reconcile) = 0;
  // Where other processes may queue jobs (shared()), calls `queued()` from
  // a thread of the catalogue's soon after any of them commits a job in
  // state QUEUED (new, released or re-queued), and whenever such a commit
  // may have been missed (the channel is up again); nullptr where only this
  // process queues jobs. Like WatchModelChanges otherwise.
  virtual std::unique_ptr<ChangeWatch> WatchQueue(std::function<void()> queued) = 0;

  // Whether other dendrod processes may share this catalogue (and so the
  // data directory): then each replica may sweep only what it owns.
  virtual bool shared() const = 0;

  // Called after every catalogue operation with its name ("put_job") and
  // duration in seconds, lock wait included. Set it before the catalogue is
  // shared between threads; it must be cheap and thread-safe.
  void set_observer(std::function<void(const char* op, double seconds)> observer) {
    observer_ = std::move(observer);
  }
  // Reports one operation to the observer (for implementations).
  void Observe(const char* op, double seconds) const {
    if (observer_) observer_(op, seconds);
  }

 private:
  std::function<void(const char*, double)> observer_;
};

// The seqs a ListJobs page may hold, as both implementations query them:
// above < seq < below, and state's bit in state_mask.
struct JobSeqRange {
  int64_t above = 0;
  int64_t below = 0;
  int64_t state_mask = 0;

  static JobSeqRange Of(int64_t cursor, const JobListing& listing);
};

// Errors both implementations return, worded once.
// NOT_FOUND for `name` (version 0: any version) / for a missing label.
absl::Status ModelNotFound(const std::string& name, int64_t version);
absl::Status LabelNotFound(const std::string& name, const std::string& label);
// FAILED_PRECONDITION: one version of `name` cannot be deleted while `labels`
// (not empty) point at it.
absl::Status LabelledVersion(const std::string& name, int64_t version,
                             const std::vector<std::string>& labels);
// ABORTED: job `id`'s lease has passed to another holder (or the job ended).
absl::Status LeaseLost(const std::string& id);
// CANCELLED: job `id` was cancelled before its model was committed.
absl::Status CancelledBeforeCommit(const std::string& id);
// FailedPrecondition: a queued or running job uses the dataset.
absl::Status DatasetInUseError(const std::string& id);
// A dataset's lineage and generation as indexed (v1::Dataset.lineage): a
// dataset stored before generations is generation 1 of its own lineage.
inline const std::string& DatasetLineage(const v1::Dataset& d) {
  return d.lineage().empty() ? d.id() : d.lineage();
}
inline int DatasetGeneration(const v1::Dataset& d) {
  return d.generation() < 1 ? 1 : d.generation();
}
// NotFound: `lineage` has no dataset (generation 0) or no generation
// `generation`.
absl::Status DatasetGenerationNotFound(const std::string& lineage, int generation);
// NotFound: a job's dataset was deleted before the job could be queued.
absl::Status DatasetGoneError(const std::string& id);

}  // namespace dendro::server

#endif  // DENDRO_SERVER_CATALOGUE_CATALOGUE_H_
