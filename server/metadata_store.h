// MetadataStore: the server's SQLite catalogue of datasets, jobs and models.
//
// Each record is stored as its serialized dendro.v1 message plus the few
// columns queries need. Arrays and trees live in files beside the database
// (see DatasetStore and ModelRegistry); a row is written only after its
// files are durable, and deleted before its files are removed, so the
// catalogue never points at a missing file. All methods are thread-safe.
//
// Pagination: every table has an INTEGER PRIMARY KEY `seq` in insertion
// order; List* return rows with seq > after_seq and report the last seq.
#ifndef DENDRO_SERVER_METADATA_STORE_H_
#define DENDRO_SERVER_METADATA_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "dendro/v1/dendro.pb.h"

struct sqlite3;

namespace dendro::server {

template <typename T>
struct Page {
  std::vector<T> items;
  int64_t last_seq = 0;  // seq of the last item; 0 if empty
  bool more = false;     // rows remain after this page
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

class MetadataStore {
 public:
  static absl::StatusOr<std::unique_ptr<MetadataStore>> Open(const std::string& path);
  ~MetadataStore();

  absl::Status PutDataset(const v1::Dataset& d);
  absl::StatusOr<v1::Dataset> GetDataset(const std::string& id);
  absl::StatusOr<Page<v1::Dataset>> ListDatasets(int64_t after_seq, int limit);
  absl::Status DeleteDataset(const std::string& id);
  // Every dataset id. An error (never an empty list) when the catalogue
  // cannot be read: callers sweep files that are not listed here.
  absl::StatusOr<std::vector<std::string>> AllDatasetIds();

  // Insert or replace by id.
  absl::Status PutJob(const v1::Job& job);
  absl::StatusOr<v1::Job> GetJob(const std::string& id);
  // Removes a job's record (any state: callers check it is finished).
  absl::Status DeleteJob(const std::string& id);
  // Removes finished jobs whose end_time is before `epoch_seconds`;
  // returns how many.
  absl::StatusOr<int> DeleteJobsEndedBefore(int64_t epoch_seconds);
  // The job `owner` created under SubmitJobRequest.request_id, if any.
  // PutJob refuses (ALREADY_EXISTS) a second job with the same pair.
  absl::StatusOr<std::optional<v1::Job>> FindJobByRequest(const std::string& owner,
                                                          const std::string& request_id);
  absl::StatusOr<Page<v1::Job>> ListJobs(int64_t after_seq, int limit);
  // Jobs in QUEUED or RUNNING state, oldest first.
  absl::StatusOr<std::vector<v1::Job>> UnfinishedJobs();

  // In one transaction: assigns the next version of model.name(), stores
  // the model row with `dir`, stores `job` (already marked SUCCEEDED) with
  // the model name/version filled in, and applies the name's retention
  // policy.
  absl::StatusOr<CommitResult> CommitModel(v1::Model model, const std::string& dir,
                                           v1::Job job);
  // By label when `label` is set, else by version (0 = latest). The
  // returned model carries its labels and its name's keep_versions.
  absl::StatusOr<StoredModel> GetModel(const std::string& name, int64_t version,
                                       const std::string& label = "");
  absl::StatusOr<Page<v1::Model>> ListModels(const std::string& name, int64_t after_seq,
                                             int limit);
  // version 0 = all versions (and the name's labels). Returns the removed
  // rows (for file cleanup); NotFound if nothing matched; FailedPrecondition
  // for one version that a label points at.
  absl::StatusOr<std::vector<StoredModel>> DeleteModels(const std::string& name,
                                                        int64_t version);
  // Points `label` of `name` at `version` (0 = latest); returns that model.
  absl::StatusOr<v1::Model> SetModelLabel(const std::string& name, const std::string& label,
                                          int64_t version);
  // Removes a label; returns the version it pointed at.
  absl::StatusOr<int64_t> DeleteModelLabel(const std::string& name, const std::string& label);
  // Sets the name's policy (0 = keep all) and applies it now; returns the
  // versions removed. NotFound for a name that never had a version.
  absl::StatusOr<std::vector<StoredModel>> SetModelRetention(const std::string& name,
                                                             int64_t keep_versions);
  // Every model's artifact directory; an error when unreadable (as above).
  absl::StatusOr<std::vector<std::string>> AllModelDirs();

  // Called after every catalogue operation with its name ("put_job") and
  // duration in seconds, lock wait included. Set it before the store is
  // shared between threads; it must be cheap and thread-safe.
  void set_observer(std::function<void(const char* op, double seconds)> observer) {
    observer_ = std::move(observer);
  }

 private:
  class Op;  // one operation: holds mu_, reports to observer_
  MetadataStore(sqlite3* db, std::string reserve_path)
      : db_(db), reserve_path_(std::move(reserve_path)) {}
  absl::Status Exec(const char* sql);
  // Brings an older catalogue's schema up to date (idempotent).
  absl::Status Migrate();

  // Full-disk handling. A few MiB are kept allocated in `reserve_path_`;
  // when a delete fails because the disk is full, the reserve is released
  // and the delete retried once, so space can always be freed. The reserve
  // is re-created (if there is room) before later deletes and at start.
  void RestoreReserveLocked();
  template <typename Fn>
  auto DeleteWithReserveLocked(Fn fn) -> decltype(fn());

  std::mutex mu_;
  sqlite3* db_;
  const std::string reserve_path_;
  bool reserve_present_ = false;  // guarded by mu_
  std::function<void(const char*, double)> observer_;
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_METADATA_STORE_H_
