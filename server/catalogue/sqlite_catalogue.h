// SqliteCatalogue: the Catalogue (server/catalogue/catalogue.h) in one SQLite file,
// the default for a single dendrod.
//
// One connection, serialised by a mutex; WAL journal with synchronous=FULL,
// so a committed row survives a power cut. A few MiB are kept allocated in
// `<db>.reserve`: when a delete fails because the disk is full, the reserve
// is released and the delete retried once, so space can always be freed.
#ifndef DENDRO_SERVER_CATALOGUE_SQLITE_CATALOGUE_H_
#define DENDRO_SERVER_CATALOGUE_SQLITE_CATALOGUE_H_

#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "core/common/mutex.h"
#include "server/catalogue/catalogue.h"

struct sqlite3;

namespace dendro::server {

class SqliteCatalogue final : public Catalogue {
 public:
  // Opens (creating and migrating as needed) the database at `path`.
  static absl::StatusOr<std::unique_ptr<SqliteCatalogue>> Open(const std::string& path);
  ~SqliteCatalogue() override;

  absl::Status PutDataset(const v1::Dataset& d) override;
  absl::StatusOr<v1::Dataset> GetDataset(const std::string& id) override;
  absl::StatusOr<v1::Dataset> GetDatasetGeneration(const std::string& lineage,
                                                   int generation) override;
  absl::StatusOr<Page<v1::Dataset>> ListDatasets(int64_t after_seq, int limit) override;
  absl::Status DeleteDataset(const std::string& id) override;
  absl::Status DeleteUnusedDataset(const std::string& id, const std::string& except_job) override;
  absl::StatusOr<std::vector<std::string>> AllDatasetIds() override;
  absl::Status PutJob(const v1::Job& job) override;
  absl::StatusOr<v1::Job> GetJob(const std::string& id) override;
  absl::Status DeleteJob(const std::string& id) override;
  absl::StatusOr<int> DeleteJobsEndedBefore(int64_t epoch_seconds) override;
  absl::StatusOr<std::optional<v1::Job>> FindJobByRequest(const std::string& owner,
                                                          const std::string& request_id) override;
  absl::StatusOr<Page<v1::Job>> ListJobs(int64_t cursor, int limit,
                                         const JobListing& listing) override;
  absl::StatusOr<std::vector<v1::Job>> UnfinishedJobs() override;
  absl::Status EnqueueJob(const v1::Job& job, int capacity) override;
  absl::StatusOr<std::optional<ClaimedJob>> ClaimJob(const std::string& holder,
                                                     absl::Duration ttl) override;
  absl::StatusOr<v1::Job> RenewJobLease(const std::string& id, int64_t token, absl::Duration ttl,
                                        double progress, const std::string& stage) override;
  absl::Status ReleaseJob(const v1::Job& job, int64_t token) override;
  absl::StatusOr<std::vector<v1::Job>> RequeueLostJobs(const std::string& holder) override;
  absl::StatusOr<v1::Job> UpdateJob(const std::string& id,
                                    const std::function<bool(v1::Job&)>& edit) override;
  absl::StatusOr<JobCounts> CountJobs() override;
  absl::StatusOr<CommitResult> CommitModel(v1::Model model, const std::string& dir,
                                           v1::Job job, int64_t lease_token) override;
  absl::StatusOr<StoredModel> GetModel(const std::string& name, int64_t version,
                                       const std::string& label) override;
  absl::StatusOr<Page<v1::Model>> ListModels(const std::string& name, int64_t after_seq,
                                             int limit) override;
  absl::StatusOr<std::vector<StoredModel>> DeleteModels(const std::string& name,
                                                        int64_t version) override;
  absl::StatusOr<v1::Model> SetModelLabel(const std::string& name, const std::string& label,
                                          int64_t version) override;
  absl::StatusOr<int64_t> DeleteModelLabel(const std::string& name, const std::string& label) override;
  absl::StatusOr<std::vector<StoredModel>> SetModelRetention(const std::string& name,
                                                             int64_t keep_versions) override;
  absl::StatusOr<std::vector<std::string>> AllModelDirs() override;
  absl::StatusOr<std::vector<StoredModel>> ModelVersions(const std::string& name) override;
  // Only this process writes the file (the data directory is locked).
  std::unique_ptr<ChangeWatch> WatchModelChanges(std::function<void(const std::string&)>,
                                                 absl::Duration) override {
    return nullptr;
  }
  // Jobs are queued only by this process, whose job manager wakes its own
  // workers.
  std::unique_ptr<ChangeWatch> WatchQueue(std::function<void()>) override { return nullptr; }
  bool shared() const override { return false; }

 private:
  class Op;  // one operation: holds mu_, reports to observer_
  SqliteCatalogue(sqlite3* db, std::string reserve_path)
      : db_(db), reserve_path_(std::move(reserve_path)) {}
  absl::Status Exec(const char* sql);
  // The column names of `table` (empty when there is no such table).
  absl::StatusOr<absl::flat_hash_set<std::string>> ColumnsOf(const char* table);
  // Brings an older catalogue's schema up to date (idempotent).
  absl::Status Migrate();

  // Full-disk handling. A few MiB are kept allocated in `reserve_path_`;
  // when a delete fails because the disk is full, the reserve is released
  // and the delete retried once, so space can always be freed. The reserve
  // is re-created (if there is room) before later deletes and at start.
  void RestoreReserveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The dataset's row exists / is removed (NotFound if there is none).
  absl::StatusOr<bool> DatasetExistsLocked(const std::string& id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status DeleteDatasetRowLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  template <typename Fn>
  std::invoke_result_t<Fn&> DeleteWithReserveLocked(Fn fn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Mutex mu_;
  sqlite3* db_;
  const std::string reserve_path_;
  bool reserve_present_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_CATALOGUE_SQLITE_CATALOGUE_H_
