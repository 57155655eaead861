// PostgresCatalogue: the Catalogue (server/catalogue/catalogue.h) in a PostgreSQL 15
// database, which several dendrod replicas can share.
//
// Schema: created and migrated by dendrod itself, versioned in the table
// dendro_schema. Migration runs in one transaction under a transaction-level
// advisory lock, so replicas starting together apply each step once. Each
// step records the oldest schema version whose binaries still work after it
// (`compatible_from`): a binary finding a newer schema runs on it when its
// own version is at least that (an additive step during a rolling upgrade,
// or a rollback), and is refused otherwise. docs/operations.md, "Upgrades".
//
// Connections: one libpq connection, serialised by a mutex (like the SQLite
// catalogue's). A connection found broken is re-opened once per operation;
// an operation whose COMMIT was in flight when the connection broke reports
// UNAVAILABLE ("outcome unknown") rather than guess.
//
// Pagination by `seq` (a BIGSERIAL): a row whose insert commits after a
// later-numbered one can be missed by a listing already past it.
#ifndef DENDRO_SERVER_CATALOGUE_POSTGRES_CATALOGUE_H_
#define DENDRO_SERVER_CATALOGUE_POSTGRES_CATALOGUE_H_

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/catalogue/catalogue.h"

namespace dendro::server {

// The newest schema version this binary writes.
inline constexpr int kPostgresSchemaVersion = 3;

// One step of the schema: brings version i to i + 1.
struct SchemaMigration {
  std::string sql;
  // The oldest schema version whose binaries still work once this step has
  // run: i + 1 when older binaries would misread the new schema; lower for
  // an additive step (a new table, a nullable column) they never look at.
  int compatible_from = 0;
};

// This binary's steps (kPostgresSchemaVersion of them) and, in tests of
// upgrades only, one more from the environment variable
// DENDRO_TEST_EXTRA_MIGRATION="COMPATIBLE_FROM;SQL": a stand-in for the next
// release's binary. InvalidArgument if the variable is malformed.
absl::StatusOr<std::vector<SchemaMigration>> PostgresMigrations();

class PostgresCatalogue final : public Catalogue {
 public:
  // Connects to `uri` (postgresql://…, no password in it) and brings the
  // schema up to date. Up to `connections` transactions run at once, each
  // on a connection of its own, opened when first needed.
  // `migrations`: the schema steps this binary knows (PostgresMigrations()
  // when absent; tests pass their own to play older or newer binaries).
  static absl::StatusOr<std::unique_ptr<PostgresCatalogue>> Open(
      const std::string& uri, int connections = 4,
      std::optional<std::vector<SchemaMigration>> migrations = std::nullopt);
  ~PostgresCatalogue() override;

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
  absl::StatusOr<CommitResult> CommitModel(v1::Model model, const std::string& dir, v1::Job job,
                                           int64_t lease_token) override;
  absl::StatusOr<StoredModel> GetModel(const std::string& name, int64_t version,
                                       const std::string& label) override;
  absl::StatusOr<Page<v1::Model>> ListModels(const std::string& name, int64_t after_seq,
                                             int limit) override;
  absl::StatusOr<std::vector<StoredModel>> DeleteModels(const std::string& name,
                                                        int64_t version) override;
  absl::StatusOr<v1::Model> SetModelLabel(const std::string& name, const std::string& label,
                                          int64_t version) override;
  absl::StatusOr<int64_t> DeleteModelLabel(const std::string& name,
                                           const std::string& label) override;
  absl::StatusOr<std::vector<StoredModel>> SetModelRetention(const std::string& name,
                                                             int64_t keep_versions) override;
  absl::StatusOr<std::vector<std::string>> AllModelDirs() override;
  absl::StatusOr<std::vector<StoredModel>> ModelVersions(const std::string& name) override;
  // LISTEN/NOTIFY on a connection of its own (outside the pool); every
  // transaction that changes a model NOTIFYs its name when it commits.
  std::unique_ptr<ChangeWatch> WatchModelChanges(std::function<void(const std::string&)> changed,
                                                 absl::Duration reconcile) override;
  // The same on the queue's channel, which every write of a QUEUED job
  // NOTIFYs when it commits.
  std::unique_ptr<ChangeWatch> WatchQueue(std::function<void()> queued) override;
  bool shared() const override { return true; }

  // The connection pool (defined in the .cc: libpqxx stays out of this
  // header).
  struct Conn;

 private:
  explicit PostgresCatalogue(std::unique_ptr<Conn> conn);
  std::unique_ptr<Conn> conn_;
};

// InvalidArgument unless `uri` is a postgresql:// or postgres:// URI without
// a password.
absl::Status CheckPostgresUri(const std::string& uri);

}  // namespace dendro::server

#endif  // DENDRO_SERVER_CATALOGUE_POSTGRES_CATALOGUE_H_
