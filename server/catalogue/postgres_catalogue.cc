#include "server/catalogue/postgres_catalogue.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <pqxx/pqxx>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "core/common/mutex.h"
#include "core/common/status_macros.h"
#include "spdlog/spdlog.h"

namespace dendro::server {

// A pool of at most `size` connections. A transaction borrows one for its
// whole duration, so at most `size` transactions of this process run at
// once and the database sees at most `size` connections from it. A borrowed
// connection that broke is dropped; the next borrower opens a new one.
struct PostgresCatalogue::Conn {
  std::string uri;
  int size = 1;
  Mutex mu;
  CondVar returned;
  std::vector<std::unique_ptr<pqxx::connection>> idle ABSL_GUARDED_BY(mu);
  int lent ABSL_GUARDED_BY(mu) = 0;  // <= size

  // Counts one more lent, waiting while all `size` are; an idle connection,
  // or null (the borrower opens one).
  std::unique_ptr<pqxx::connection> Lend() ABSL_LOCKS_EXCLUDED(mu) {
    MutexLock lock(&mu);
    while (lent >= size) returned.Wait(&mu);
    ++lent;
    if (idle.empty()) return nullptr;
    std::unique_ptr<pqxx::connection> c = std::move(idle.back());
    idle.pop_back();
    return c;
  }
  // Counts one less lent; keeps `c` for the next borrower if it is open.
  void Return(std::unique_ptr<pqxx::connection> c) ABSL_LOCKS_EXCLUDED(mu) {
    {
      MutexLock lock(&mu);
      --lent;
      if (c != nullptr && c->is_open()) idle.push_back(std::move(c));
    }
    returned.Signal();
  }
};

namespace {

// Any fixed numbers: the advisory locks that serialise schema migrations
// and the queue-capacity check of EnqueueJob.
constexpr int64_t kMigrationLock = 0x64656e64726f;  // "dendro"
constexpr int64_t kQueueLock = 0x64656e64726f71;    // "dendroq"

// The LISTEN/NOTIFY channel of model changes; the payload is the name.
constexpr const char* kModelChannel = "dendro_models";
// The channel of the job queue: a job became QUEUED (no payload).
constexpr const char* kQueueChannel = "dendro_queue";

constexpr int kQueued = static_cast<int>(v1::JOB_STATE_QUEUED);
constexpr int kRunning = static_cast<int>(v1::JOB_STATE_RUNNING);

// Each entry brings the schema from version i to i + 1; see SchemaMigration
// for the number after it.
constexpr struct {
  const char* sql;
  int compatible_from;
} kMigrations[] = {
    {R"sql(
CREATE TABLE datasets (
  seq BIGSERIAL PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  record BYTEA NOT NULL);
CREATE TABLE jobs (
  seq BIGSERIAL PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  state INTEGER NOT NULL,
  dataset_id TEXT NOT NULL,
  record BYTEA NOT NULL,
  request_key TEXT UNIQUE,
  end_seconds BIGINT);
CREATE INDEX jobs_state ON jobs (state);
CREATE TABLE models (
  seq BIGSERIAL PRIMARY KEY,
  name TEXT NOT NULL,
  version BIGINT NOT NULL,
  dir TEXT NOT NULL,
  record BYTEA NOT NULL,
  UNIQUE (name, version));
CREATE TABLE model_names (
  name TEXT PRIMARY KEY,
  next_version BIGINT NOT NULL,
  keep_versions BIGINT NOT NULL DEFAULT 0);
CREATE TABLE model_labels (
  name TEXT NOT NULL,
  label TEXT NOT NULL,
  version BIGINT NOT NULL,
  PRIMARY KEY (name, label));
)sql",
     1},
    // 2: job leases (the shared queue). Binaries without leases would run
    // jobs twice: not compatible.
    {R"sql(
ALTER TABLE jobs ADD COLUMN lease_holder TEXT;
ALTER TABLE jobs ADD COLUMN lease_expires TIMESTAMPTZ;
ALTER TABLE jobs ADD COLUMN lease_token BIGINT NOT NULL DEFAULT 0;
CREATE SEQUENCE job_lease_tokens;
CREATE INDEX jobs_queue ON jobs (state, seq);
CREATE INDEX jobs_dataset ON jobs (dataset_id);
)sql",
     2},
    // 3: dataset generations. Binaries of version 2 insert datasets without
    // a lineage (NULL, which the unique index leaves alone) and never read
    // the columns: compatible.
    {R"sql(
ALTER TABLE datasets ADD COLUMN lineage TEXT;
ALTER TABLE datasets ADD COLUMN generation INTEGER;
UPDATE datasets SET lineage = id, generation = 1;
CREATE UNIQUE INDEX datasets_generation ON datasets (lineage, generation);
)sql",
     2},
};
static_assert(std::size(kMigrations) == kPostgresSchemaVersion);
static_assert(kMigrations[kPostgresSchemaVersion - 1].compatible_from <= kPostgresSchemaVersion);

const absl::Status& StatusOf(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}

// One connection of the pool, borrowed for the lifetime of this object
// (waiting while all `size` are lent). `c` is null until opened, and is
// reset when it breaks; an open one goes back to the pool.
class Borrowed {
 public:
  explicit Borrowed(PostgresCatalogue::Conn& pool) : c(pool.Lend()), pool_(pool) {}
  ~Borrowed() { pool_.Return(std::move(c)); }
  Borrowed(const Borrowed&) = delete;
  Borrowed& operator=(const Borrowed&) = delete;

  std::unique_ptr<pqxx::connection> c;

 private:
  PostgresCatalogue::Conn& pool_;
};

// `status` for the caller, with the driver's text (host, port, SQL) in the
// server log only: a client learns what failed, never where the database is.
absl::Status Logged(absl::Status status, const std::exception& e) {
  spdlog::warn("{}: {}", std::string(status.message()), e.what());
  return status;
}

// Runs fn(txn) in one transaction on a borrowed connection, committed if fn
// returns OK. A broken connection is re-opened and the operation retried
// once, unless the COMMIT itself was in flight. Exceptions become statuses.
template <typename Fn>
auto InTxn(PostgresCatalogue::Conn& pool, Fn&& fn)
    -> decltype(fn(std::declval<pqxx::work&>())) {
  Borrowed conn(pool);
  for (int attempt = 0;; ++attempt) {
    bool committing = false;
    try {
      if (conn.c == nullptr || !conn.c->is_open()) {
        conn.c = std::make_unique<pqxx::connection>(pool.uri);
      }
      pqxx::work txn(*conn.c);
      auto result = fn(txn);
      if (!StatusOf(result).ok()) return result;  // rolled back by ~work
      committing = true;
      txn.commit();
      return result;
    } catch (const pqxx::in_doubt_error& e) {
      conn.c.reset();
      return Logged(absl::UnavailableError(
                        "catalogue: the connection to PostgreSQL broke during a commit; its "
                        "outcome is unknown"),
                    e);
    } catch (const pqxx::broken_connection& e) {
      conn.c.reset();
      if (!committing && attempt == 0) continue;
      return Logged(absl::UnavailableError(absl::StrCat(
                        "catalogue database unreachable",
                        committing ? " during a commit (outcome unknown)" : "",
                        "; retry later (the server log has the connection error)")),
                    e);
    } catch (const pqxx::unique_violation& e) {
      return Logged(absl::AlreadyExistsError("catalogue: the record exists already"), e);
    } catch (const pqxx::insufficient_resources& e) {
      return Logged(absl::ResourceExhaustedError(
                        "the catalogue database is out of resources; delete datasets or models, "
                        "or grow the database"),
                    e);
    } catch (const pqxx::transaction_rollback& e) {
      return Logged(absl::UnavailableError("catalogue: transaction conflict, retry"), e);
    } catch (const std::exception& e) {
      return Logged(absl::InternalError("catalogue: unexpected database error (see the server log)"),
                    e);
    }
  }
}

// Times one operation for the observer.
class Timed {
 public:
  Timed(const Catalogue* catalogue, const char* op)
      : catalogue_(catalogue), op_(op), start_(std::chrono::steady_clock::now()) {}
  ~Timed() {
    catalogue_->Observe(
        op_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }

 private:
  const Catalogue* const catalogue_;
  const char* const op_;
  const std::chrono::steady_clock::time_point start_;
};

pqxx::binarystring Blob(const google::protobuf::Message& m) {
  return pqxx::binarystring(m.SerializeAsString());
}

template <typename Msg>
absl::StatusOr<Msg> Decode(const pqxx::field& f, const char* what) {
  const pqxx::binarystring bytes(f);
  Msg m;
  if (!m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::DataLossError(absl::StrCat("corrupt ", what, " record in the catalogue"));
  }
  return m;
}

// Rows of (seq, record): up to `limit` items, noting whether more remain
// (the query selects limit + 1).
template <typename Msg>
absl::StatusOr<Page<Msg>> ReadPage(const pqxx::result& rows, int limit, const char* what) {
  Page<Msg> page;
  for (const pqxx::row& row : rows) {
    if (static_cast<int>(page.items.size()) == limit) {
      page.more = true;
      break;
    }
    DENDRO_ASSIGN_OR_RETURN(Msg m, Decode<Msg>(row[1], what));
    page.items.push_back(std::move(m));
    page.last_seq = row[0].as<int64_t>();
  }
  return page;
}

std::vector<std::string> Column(const pqxx::result& rows) {
  std::vector<std::string> out;
  out.reserve(rows.size());
  for (const pqxx::row& row : rows) out.push_back(row[0].as<std::string>());
  return out;
}

std::string RequestKey(const std::string& owner, const std::string& request_id) {
  return request_id.empty() ? std::string() : absl::StrCat(owner, "\n", request_id);
}

// Inserts or replaces a job row; a job that is not RUNNING holds no lease.
void UpsertJob(pqxx::work& txn, const v1::Job& job) {
  txn.exec_params(
      "INSERT INTO jobs (id, state, dataset_id, record, request_key, end_seconds) "
      "VALUES ($1, $2, $3, $4, NULLIF($5, ''), NULLIF($6, 0)) "
      "ON CONFLICT (id) DO UPDATE SET state = excluded.state, record = excluded.record, "
      "end_seconds = excluded.end_seconds, "
      "lease_holder = CASE WHEN excluded.state = $7 THEN jobs.lease_holder END, "
      "lease_expires = CASE WHEN excluded.state = $7 THEN jobs.lease_expires END",
      job.id(), static_cast<int>(job.state()), job.spec().dataset_id(), Blob(job),
      RequestKey(job.owner(), job.request_id()), static_cast<int64_t>(job.end_time().seconds()),
      kRunning);
  // Idle workers of every replica wake when this commits (a released or
  // re-queued job included), instead of at their next poll.
  if (job.state() == v1::JOB_STATE_QUEUED) {
    txn.exec_params("SELECT pg_notify($1, '')", kQueueChannel);
  }
}

// The stored record of job `id`, row-locked, if lease `token` still holds
// it; ABORTED (LeaseLost) otherwise.
absl::StatusOr<v1::Job> LockLeased(pqxx::work& txn, const std::string& id, int64_t token) {
  const pqxx::result r = txn.exec_params(
      "SELECT record FROM jobs WHERE id = $1 AND state = $2 AND lease_token = $3 FOR UPDATE", id,
      kRunning, token);
  if (r.empty()) return LeaseLost(id);
  return Decode<v1::Job>(r[0][0], "job");
}

std::string Millis(absl::Duration d) { return absl::StrCat(absl::ToInt64Milliseconds(d)); }

// The columns that carry a model row's registry fields, after `m.record`:
// its labels (comma-joined, sorted; labels hold no commas) and its name's
// retention policy. Used with "FROM models m".
constexpr const char* kRegistryColumns =
    "COALESCE((SELECT string_agg(l.label, ',' ORDER BY l.label) FROM model_labels l "
    "WHERE l.name = m.name AND l.version = m.version), ''), "
    "COALESCE((SELECT n.keep_versions FROM model_names n WHERE n.name = m.name), 0)";

// Sets the registry fields of `m` from the two kRegistryColumns fields.
void SetRegistryFields(const pqxx::field& labels, const pqxx::field& keep, v1::Model* m) {
  m->clear_labels();
  const std::string joined = labels.as<std::string>();
  if (!joined.empty()) {
    for (absl::string_view l : absl::StrSplit(joined, ',')) m->add_labels(std::string(l));
  }
  m->set_keep_versions(keep.as<int32_t>());
}

void FillRegistryFields(pqxx::work& txn, v1::Model* m) {
  m->clear_labels();
  for (const pqxx::row& row :
       txn.exec_params("SELECT label FROM model_labels WHERE name = $1 AND version = $2 "
                       "ORDER BY label",
                       m->name(), m->version())) {
    m->add_labels(row[0].as<std::string>());
  }
  const pqxx::result keep =
      txn.exec_params("SELECT keep_versions FROM model_names WHERE name = $1", m->name());
  m->set_keep_versions(keep.empty() ? 0 : keep[0][0].as<int32_t>());
}

// Tells every listening replica, once `txn` commits, that `name` changed.
void NotifyModelChange(pqxx::work& txn, const std::string& name) {
  txn.exec_params("SELECT pg_notify($1, $2)", kModelChannel, name);
}

absl::StatusOr<std::vector<StoredModel>> PruneVersions(pqxx::work& txn, const std::string& name,
                                                       int64_t keep) {
  std::vector<StoredModel> pruned;
  if (keep <= 0) return pruned;
  const pqxx::result rows = txn.exec_params(
      "DELETE FROM models WHERE name = $1 AND version IN ("
      "SELECT version FROM models m WHERE name = $1 AND NOT EXISTS ("
      "SELECT 1 FROM model_labels l WHERE l.name = m.name AND l.version = m.version) "
      "ORDER BY version DESC OFFSET $2) RETURNING record, dir",
      name, keep);
  for (const pqxx::row& row : rows) {
    DENDRO_ASSIGN_OR_RETURN(v1::Model m, Decode<v1::Model>(row[0], "model"));
    pruned.push_back(StoredModel{std::move(m), row[1].as<std::string>()});
  }
  return pruned;
}

absl::Status Migrate(PostgresCatalogue::Conn& conn,
                     const std::vector<SchemaMigration>& migrations) {
  const int ours = static_cast<int>(migrations.size());
  return InTxn(conn, [&](pqxx::work& txn) -> absl::Status {
    txn.exec_params("SELECT pg_advisory_xact_lock($1)", kMigrationLock);
    txn.exec("CREATE TABLE IF NOT EXISTS dendro_schema (version INTEGER NOT NULL)");
    // Not a schema step of its own: binaries that predate it read only
    // `version`. NULL (written by them) means "this version only".
    txn.exec("ALTER TABLE dendro_schema ADD COLUMN IF NOT EXISTS compatible_from INTEGER");
    const pqxx::result r = txn.exec("SELECT version, compatible_from FROM dendro_schema");
    int version = 0;
    int compatible_from = 0;
    if (r.empty()) {
      txn.exec("INSERT INTO dendro_schema (version, compatible_from) VALUES (0, 0)");
    } else {
      version = r[0][0].as<int>();
      compatible_from = r[0][1].is_null() ? version : r[0][1].as<int>();
    }
    if (version > ours) {
      if (compatible_from > ours) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the catalogue's schema is version ", version, ", which needs a dendrod of schema ",
            "version ", compatible_from, " or later; this one's is ", ours, ": upgrade dendrod"));
      }
      spdlog::warn(
          "catalogue: the schema is version {}, newer than this dendrod's ({}) and compatible "
          "with it (a rolling upgrade or a rollback in progress?); running without migrating",
          version, ours);
      return absl::OkStatus();
    }
    for (int v = version; v < ours; ++v) {
      spdlog::info("catalogue: migrating the PostgreSQL schema to version {}", v + 1);
      txn.exec(migrations[v].sql);
    }
    if (version < ours || r.empty() || r[0][1].is_null()) {
      txn.exec_params("UPDATE dendro_schema SET version = $1, compatible_from = $2", ours,
                      migrations[ours - 1].compatible_from);
    }
    return absl::OkStatus();
  });
}

}  // namespace

absl::Status CheckPostgresUri(const std::string& uri) {
  std::string rest;
  for (const char* scheme : {"postgresql://", "postgres://"}) {
    if (absl::StartsWith(uri, scheme)) rest = uri.substr(std::string(scheme).size());
  }
  if (rest.empty() && !absl::StartsWith(uri, "postgres")) {
    return absl::InvalidArgumentError(
        "--catalog must be empty (SQLite in the data directory) or a postgresql:// URI");
  }
  const std::string authority = rest.substr(0, rest.find_first_of("/?"));
  const size_t at = authority.rfind('@');
  if ((at != std::string::npos && authority.substr(0, at).find(':') != std::string::npos) ||
      absl::StrContains(rest, "password=")) {
    return absl::InvalidArgumentError(
        "--catalog must not hold a password (command lines are visible to every user); "
        "set PGPASSWORD or PGPASSFILE instead");
  }
  return absl::OkStatus();
}

PostgresCatalogue::PostgresCatalogue(std::unique_ptr<Conn> conn) : conn_(std::move(conn)) {}
PostgresCatalogue::~PostgresCatalogue() = default;

absl::StatusOr<std::vector<SchemaMigration>> PostgresMigrations() {
  std::vector<SchemaMigration> out;
  for (const auto& m : kMigrations) out.push_back({m.sql, m.compatible_from});
  const char* extra = std::getenv("DENDRO_TEST_EXTRA_MIGRATION");
  if (extra == nullptr || *extra == '\0') return out;
  const std::string text(extra);
  const size_t semi = text.find(';');
  int compatible_from = 0;
  if (semi == std::string::npos || !absl::SimpleAtoi(text.substr(0, semi), &compatible_from) ||
      compatible_from < 1 || compatible_from > kPostgresSchemaVersion + 1 ||
      semi + 1 == text.size()) {
    return absl::InvalidArgumentError(
        "DENDRO_TEST_EXTRA_MIGRATION must be COMPATIBLE_FROM;SQL with COMPATIBLE_FROM in "
        "[1, schema version + 1]");
  }
  spdlog::warn(
      "catalogue: DENDRO_TEST_EXTRA_MIGRATION adds schema version {} (compatible from "
      "{}): a test of upgrades",
      kPostgresSchemaVersion + 1, compatible_from);
  out.push_back({text.substr(semi + 1), compatible_from});
  return out;
}

absl::StatusOr<std::unique_ptr<PostgresCatalogue>> PostgresCatalogue::Open(
    const std::string& uri, int connections,
    std::optional<std::vector<SchemaMigration>> migrations) {
  DENDRO_RETURN_IF_ERROR(CheckPostgresUri(uri));
  if (connections < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("catalogue: the connection pool needs at least 1 connection, got ",
                     connections));
  }
  auto conn = std::make_unique<Conn>();
  conn->uri = uri;
  conn->size = connections;
  if (!migrations.has_value()) {
    DENDRO_ASSIGN_OR_RETURN(migrations, PostgresMigrations());
  }
  if (migrations->empty()) return absl::InvalidArgumentError("no schema migrations");
  DENDRO_RETURN_IF_ERROR(Migrate(*conn, *migrations));
  return std::unique_ptr<PostgresCatalogue>(new PostgresCatalogue(std::move(conn)));
}

// --- datasets ---------------------------------------------------------------

absl::Status PostgresCatalogue::PutDataset(const v1::Dataset& d) {
  const Timed t(this, "put_dataset");
  return InTxn(*conn_, [&](pqxx::work& txn) {
    txn.exec_params(
        "INSERT INTO datasets (id, record, lineage, generation) VALUES ($1, $2, $3, $4)", d.id(),
        Blob(d), DatasetLineage(d), DatasetGeneration(d));
    return absl::OkStatus();
  });
}

absl::StatusOr<v1::Dataset> PostgresCatalogue::GetDatasetGeneration(const std::string& lineage,
                                                                    int generation) {
  const Timed t(this, "get_dataset_generation");
  return InTxn(*conn_, [&](pqxx::work& txn) -> absl::StatusOr<v1::Dataset> {
    const pqxx::result r = txn.exec_params(
        "SELECT record FROM datasets WHERE lineage = $1 AND ($2 = 0 OR generation = $2) "
        "ORDER BY generation DESC LIMIT 1",
        lineage, generation);
    if (r.empty()) return DatasetGenerationNotFound(lineage, generation);
    return Decode<v1::Dataset>(r[0][0], "dataset");
  });
}

absl::StatusOr<v1::Dataset> PostgresCatalogue::GetDataset(const std::string& id) {
  const Timed t(this, "get_dataset");
  return InTxn(*conn_, [&](pqxx::work& txn) -> absl::StatusOr<v1::Dataset> {
    const pqxx::result r = txn.exec_params("SELECT record FROM datasets WHERE id = $1", id);
    if (r.empty()) return absl::NotFoundError(absl::StrCat("dataset '", id, "' not found"));
    return Decode<v1::Dataset>(r[0][0], "dataset");
  });
}

absl::StatusOr<Page<v1::Dataset>> PostgresCatalogue::ListDatasets(int64_t after_seq, int limit) {
  const Timed t(this, "list_datasets");
  return InTxn(*conn_, [&](pqxx::work& txn) {
    return ReadPage<v1::Dataset>(
        txn.exec_params("SELECT seq, record FROM datasets WHERE seq > $1 ORDER BY seq LIMIT $2",
                        after_seq, static_cast<int64_t>(limit) + 1),
        limit, "dataset");
  });
}

absl::Status PostgresCatalogue::DeleteDataset(const std::string& id) {
  const Timed t(this, "delete_dataset");
  return InTxn(*conn_, [&](pqxx::work& txn) -> absl::Status {
    const pqxx::result r = txn.exec_params("DELETE FROM datasets WHERE id = $1", id);
    if (r.affected_rows() == 0) {
      return absl::NotFoundError(absl::StrCat("dataset '", id, "' not found"));
    }
    return absl::OkStatus();
  });
}

absl::Status PostgresCatalogue::DeleteUnusedDataset(const std::string& id,
                                                    const std::string& except_job) {
  const Timed t(this, "delete_unused_dataset");
  return InTxn(*conn_, [&](pqxx::work& txn) -> absl::Status {
    // The row lock waits for any EnqueueJob holding the row FOR SHARE; the
    // statements after it see that job once it has committed.
    if (txn.exec_params("SELECT 1 FROM datasets WHERE id = $1 FOR UPDATE", id).empty()) {
      return absl::NotFoundError(absl::StrCat("dataset '", id, "' not found"));
    }
    if (!txn.exec_params("SELECT 1 FROM jobs WHERE dataset_id = $1 AND state IN ($2, $3) "
                         "AND id <> $4 LIMIT 1",
                         id, kQueued, kRunning, except_job)
             .empty()) {
      return DatasetInUseError(id);
    }
    txn.exec_params("DELETE FROM datasets WHERE id = $1", id);
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<std::string>> PostgresCatalogue::AllDatasetIds() {
  const Timed t(this, "all_dataset_ids");
  return InTxn(*conn_, [&](pqxx::work& txn) -> absl::StatusOr<std::vector<std::string>> {
    return Column(txn.exec("SELECT id FROM datasets"));
  });
}

// --- jobs -------------------------------------------------------------------

absl::Status PostgresCatalogue::PutJob(const v1::Job& job) {
  const Timed t(this, "put_job");
  return InTxn(*conn_, [&](pqxx::work& txn) {
    UpsertJob(txn, job);
    return absl::OkStatus();
  });
}

absl::StatusOr<v1::Job> PostgresCatalogue::GetJob(const std::string& id) {
  const Timed t(this, "get_job");
  return InTxn(*conn_, [&](pqxx::work& txn) -> absl::StatusOr<v1::Job> {
    const pqxx::result r = txn.exec_params("SELECT record FROM jobs WHERE id = $1", id);
    if (r.empty()) return absl::NotFoundError(absl::StrCat("job '", id, "' not found"));
    return Decode<v1::Job>(r[0][0], "job");
  });
}

absl::Status PostgresCatalogue::DeleteJob(const std::string& id) {
  const Timed t(this, "delete_job");
  return InTxn(*conn_, [&](pqxx::work& txn) -> absl::Status {
    if (txn.exec_params("DELETE FROM jobs WHERE id = $1", id).affected_rows() == 0) {
      return absl::NotFoundError(absl::StrCat("job '", id, "' not found"));
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<int> PostgresCatalogue::DeleteJobsEndedBefore(int64_t epoch_seconds) {
  const Timed t(this, "expire_jobs");
  return InTxn(*conn_, [&](pqxx::work& txn) -> absl::StatusOr<int> {
    return static_cast<int>(
        txn.exec_params("DELETE FROM jobs WHERE state IN ($1, $2, $3) AND end_seconds < $4",
                        static_cast<int>(v1::JOB_STATE_SUCCEEDED),
                        static_cast<int>(v1::JOB_STATE_FAILED),
                        static_cast<int>(v1::JOB_STATE_CANCELLED), epoch_seconds)
            .affected_rows());
  });
}

absl::StatusOr<std::optional<v1::Job>> PostgresCatalogue::FindJobByRequest(
    const std::string& owner, const std::string& request_id) {
  const Timed t(this, "find_job_by_request");
  return InTxn(*conn_, [&](pqxx::work& txn) -> absl::StatusOr<std::optional<v1::Job>> {
    const pqxx::result r = txn.exec_params("SELECT record FROM jobs WHERE request_key = $1",
                                           RequestKey(owner, request_id));
    if (r.empty()) return std::optional<v1::Job>();
    DENDRO_ASSIGN_OR_RETURN(v1::Job job, Decode<v1::Job>(r[0][0], "job"));
    return std::optional<v1::Job>(std::move(job));
  });
}

absl::StatusOr<Page<v1::Job>> PostgresCatalogue::ListJobs(int64_t cursor, int limit,
                                                          const JobListing& listing) {
  const Timed t(this, "list_jobs");
  const JobSeqRange range = JobSeqRange::Of(cursor, listing);
  return InTxn(*conn_, [&](pqxx::work& txn) {
    return ReadPage<v1::Job>(
        txn.exec_params(listing.newest_first
                            ? "SELECT seq, record FROM jobs WHERE seq > $1 AND seq < $2 "
                              "AND ((1 << state) & $3) <> 0 ORDER BY seq DESC LIMIT $4"
                            : "SELECT seq, record FROM jobs WHERE seq > $1 AND seq < $2 "
                              "AND ((1 << state) & $3) <> 0 ORDER BY seq LIMIT $4",
                        range.above, range.below, range.state_mask,
                        static_cast<int64_t>(limit) + 1),
        limit, "job");
  });
}

absl::StatusOr<std::vector<v1::Job>> PostgresCatalogue::UnfinishedJobs() {
  const Timed t(this, "unfinished_jobs");
  return InTxn(*conn_, [&](pqxx::work& txn) -> absl::StatusOr<std::vector<v1::Job>> {
    std::vector<v1::Job> jobs;
    for (const pqxx::row& row :
         txn.exec_params("SELECT record FROM jobs WHERE state IN ($1, $2) ORDER BY seq",
                         static_cast<int>(v1::JOB_STATE_QUEUED),
                         static_cast<int>(v1::JOB_STATE_RUNNING))) {
      DENDRO_ASSIGN_OR_RETURN(v1::Job job, Decode<v1::Job>(row[0], "job"));
      jobs.push_back(std::move(job));
    }
    return jobs;
  });
}

// --- the job queue ----------------------------------------------------------

absl::Status PostgresCatalogue::EnqueueJob(const v1::Job& job, int capacity) {
  const Timed t(this, "enqueue_job");
  return InTxn(*conn_, [&](pqxx::work& txn) -> absl::Status {
    // Serialises enqueues so the capacity holds over every replica.
    txn.exec_params("SELECT pg_advisory_xact_lock($1)", kQueueLock);
    // Held until commit: a DeleteUnusedDataset waits for this job to be
    // visible, or this sees the dataset gone.
    if (txn.exec_params("SELECT 1 FROM datasets WHERE id = $1 FOR SHARE", job.spec().dataset_id())
            .empty()) {
      return DatasetGoneError(job.spec().dataset_id());
    }
    const int64_t queued =
        txn.exec_params1("SELECT count(*) FROM jobs WHERE state = $1", kQueued)[0].as<int64_t>();
    if (queued >= capacity) {
      return absl::ResourceExhaustedError(
          absl::StrCat("job queue is full (", queued, " jobs waiting over all replicas, capacity ",
                       capacity, "); retry later"));
    }
    txn.exec_params(
        "INSERT INTO jobs (id, state, dataset_id, record, request_key) "
        "VALUES ($1, $2, $3, $4, NULLIF($5, ''))",
        job.id(), static_cast<int>(job.state()), job.spec().dataset_id(), Blob(job),
        RequestKey(job.owner(), job.request_id()));
    txn.exec_params("SELECT pg_notify($1, '')", kQueueChannel);
    return absl::OkStatus();
  });
}

absl::StatusOr<std::optional<ClaimedJob>> PostgresCatalogue::ClaimJob(const std::string& holder,
                                                                      absl::Duration ttl) {
  const Timed t(this, "claim_job");
  return InTxn(*conn_, [&](pqxx::work& txn) -> absl::StatusOr<std::optional<ClaimedJob>> {
    // SKIP LOCKED: replicas claiming at once each take a different job.
    const pqxx::result r = txn.exec_params(
        "SELECT record FROM jobs WHERE state = $1 ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED",
        kQueued);
    if (r.empty()) return std::optional<ClaimedJob>();
    ClaimedJob claimed;
    DENDRO_ASSIGN_OR_RETURN(claimed.job, Decode<v1::Job>(r[0][0], "job"));
    MarkClaimed(claimed.job);
    claimed.token = txn.exec_params1(
                           "UPDATE jobs SET state = $2, record = $3, lease_holder = $4, "
                           "lease_expires = now() + $5 * interval '1 millisecond', "
                           "lease_token = nextval('job_lease_tokens') WHERE id = $1 "
                           "RETURNING lease_token",
                           claimed.job.id(), kRunning, Blob(claimed.job), holder, Millis(ttl))[0]
                        .as<int64_t>();
    return std::optional<ClaimedJob>(std::move(claimed));
  });
}

absl::StatusOr<v1::Job> PostgresCatalogue::RenewJobLease(const std::string& id, int64_t token,
                                                         absl::Duration ttl, double progress,
                                                         const std::string& stage) {
  const Timed t(this, "renew_job_lease");
  return InTxn(*conn_, [&](pqxx::work& txn) -> absl::StatusOr<v1::Job> {
    DENDRO_ASSIGN_OR_RETURN(v1::Job stored, LockLeased(txn, id, token));
    stored.set_progress(std::max(stored.progress(), progress));
    if (!stored.cancel_requested()) stored.set_stage(stage);
    txn.exec_params(
        "UPDATE jobs SET record = $2, lease_expires = now() + $3 * interval '1 millisecond' "
        "WHERE id = $1",
        id, Blob(stored), Millis(ttl));
    return stored;
  });
}

absl::Status PostgresCatalogue::ReleaseJob(const v1::Job& job, int64_t token) {
  const Timed t(this, "release_job");
  return InTxn(*conn_, [&](pqxx::work& txn) -> absl::Status {
    DENDRO_ASSIGN_OR_RETURN(v1::Job stored, LockLeased(txn, job.id(), token));
    v1::Job out = job;
    KeepCancelRequest(stored, out);
    UpsertJob(txn, out);
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<v1::Job>> PostgresCatalogue::RequeueLostJobs(
    const std::string& holder) {
  const Timed t(this, "requeue_lost_jobs");
  return InTxn(*conn_, [&](pqxx::work& txn) -> absl::StatusOr<std::vector<v1::Job>> {
    std::vector<v1::Job> requeued;
    const pqxx::result rows = txn.exec_params(
        "SELECT record, lease_holder = $2 FROM jobs WHERE state = $1 AND "
        "(lease_expires IS NULL OR lease_expires < now() OR lease_holder = $2) "
        "ORDER BY seq FOR UPDATE SKIP LOCKED",
        kRunning, holder);
    for (const pqxx::row& row : rows) {
      DENDRO_ASSIGN_OR_RETURN(v1::Job job, Decode<v1::Job>(row[0], "job"));
      const bool restarted = !row[1].is_null() && row[1].as<bool>();
      MarkRequeued(job, restarted ? Requeue::kHolderRestarted : Requeue::kLeaseExpired);
      UpsertJob(txn, job);
      requeued.push_back(std::move(job));
    }
    return requeued;
  });
}

absl::StatusOr<v1::Job> PostgresCatalogue::UpdateJob(const std::string& id,
                                                     const std::function<bool(v1::Job&)>& edit) {
  const Timed t(this, "update_job");
  return InTxn(*conn_, [&](pqxx::work& txn) -> absl::StatusOr<v1::Job> {
    const pqxx::result r =
        txn.exec_params("SELECT record FROM jobs WHERE id = $1 FOR UPDATE", id);
    if (r.empty()) return absl::NotFoundError(absl::StrCat("job '", id, "' not found"));
    DENDRO_ASSIGN_OR_RETURN(v1::Job job, Decode<v1::Job>(r[0][0], "job"));
    if (edit(job)) UpsertJob(txn, job);
    return job;
  });
}

absl::StatusOr<JobCounts> PostgresCatalogue::CountJobs() {
  const Timed t(this, "count_jobs");
  return InTxn(*conn_, [&](pqxx::work& txn) -> absl::StatusOr<JobCounts> {
    const pqxx::row r = txn.exec_params1(
        "SELECT count(*) FILTER (WHERE state = $1), count(*) FILTER (WHERE state = $2) "
        "FROM jobs WHERE state IN ($1, $2)",
        kQueued, kRunning);
    return JobCounts{r[0].as<int64_t>(), r[1].as<int64_t>()};
  });
}

// --- models -----------------------------------------------------------------

absl::StatusOr<CommitResult> PostgresCatalogue::CommitModel(v1::Model model,
                                                            const std::string& dir, v1::Job job,
                                                            int64_t lease_token) {
  const Timed t(this, "commit_model");
  return InTxn(*conn_, [&](pqxx::work& txn) -> absl::StatusOr<CommitResult> {
    if (lease_token != 0) {
      // The fencing check: the job's row stays locked to the end.
      DENDRO_ASSIGN_OR_RETURN(v1::Job stored, LockLeased(txn, job.id(), lease_token));
      if (stored.cancel_requested()) return CancelledBeforeCommit(job.id());
    }
    // The upsert takes the name's row lock, so concurrent commits under
    // one name get consecutive versions.
    const pqxx::row r = txn.exec_params1(
        "INSERT INTO model_names (name, next_version) VALUES ($1, 2) "
        "ON CONFLICT (name) DO UPDATE SET next_version = model_names.next_version + 1 "
        "RETURNING next_version - 1, keep_versions",
        model.name());
    CommitResult result;
    result.version = r[0].as<int64_t>();
    const int64_t keep = r[1].as<int64_t>();
    v1::Model stored = model;
    stored.set_version(result.version);
    txn.exec_params("INSERT INTO models (name, version, dir, record) VALUES ($1, $2, $3, $4)",
                    stored.name(), result.version, dir, Blob(stored));
    job.set_model_name(model.name());
    job.set_model_version(result.version);
    UpsertJob(txn, job);
    DENDRO_ASSIGN_OR_RETURN(result.pruned, PruneVersions(txn, model.name(), keep));
    NotifyModelChange(txn, model.name());
    return result;
  });
}

absl::StatusOr<StoredModel> PostgresCatalogue::GetModel(const std::string& name, int64_t version,
                                                        const std::string& label) {
  const Timed t(this, "get_model");
  return InTxn(*conn_, [&](pqxx::work& txn) -> absl::StatusOr<StoredModel> {
    int64_t v = version;
    if (!label.empty()) {
      const pqxx::result l = txn.exec_params(
          "SELECT version FROM model_labels WHERE name = $1 AND label = $2", name, label);
      if (l.empty()) {
        return LabelNotFound(name, label);
      }
      v = l[0][0].as<int64_t>();
    }
    const std::string select =
        absl::StrCat("SELECT m.record, m.dir, ", kRegistryColumns, " FROM models m ");
    const pqxx::result r =
        v > 0 ? txn.exec_params(select + "WHERE m.name = $1 AND m.version = $2", name, v)
              : txn.exec_params(select + "WHERE m.name = $1 ORDER BY m.version DESC LIMIT 1",
                                name);
    if (r.empty()) return ModelNotFound(name, v);
    DENDRO_ASSIGN_OR_RETURN(v1::Model m, Decode<v1::Model>(r[0][0], "model"));
    SetRegistryFields(r[0][2], r[0][3], &m);
    return StoredModel{std::move(m), r[0][1].as<std::string>()};
  });
}

absl::StatusOr<Page<v1::Model>> PostgresCatalogue::ListModels(const std::string& name,
                                                              int64_t after_seq, int limit) {
  const Timed t(this, "list_models");
  return InTxn(*conn_, [&](pqxx::work& txn) -> absl::StatusOr<Page<v1::Model>> {
    const pqxx::result rows = txn.exec_params(
        absl::StrCat("SELECT m.seq, m.record, ", kRegistryColumns,
                     " FROM models m WHERE m.seq > $1 AND ($2 = '' OR m.name = $2) "
                     "ORDER BY m.seq LIMIT $3"),
        after_seq, name, static_cast<int64_t>(limit) + 1);
    DENDRO_ASSIGN_OR_RETURN(Page<v1::Model> page, ReadPage<v1::Model>(rows, limit, "model"));
    for (size_t i = 0; i < page.items.size(); ++i) {
      SetRegistryFields(rows[i][2], rows[i][3], &page.items[i]);
    }
    return page;
  });
}

absl::StatusOr<std::vector<StoredModel>> PostgresCatalogue::DeleteModels(const std::string& name,
                                                                         int64_t version) {
  const Timed t(this, "delete_models");
  return InTxn(*conn_, [&](pqxx::work& txn) -> absl::StatusOr<std::vector<StoredModel>> {
    if (version > 0) {
      std::vector<std::string> labels;
      for (const pqxx::row& row :
           txn.exec_params("SELECT label FROM model_labels WHERE name = $1 AND version = $2 "
                           "ORDER BY label",
                           name, version)) {
        labels.push_back(row[0].as<std::string>());
      }
      if (!labels.empty()) return LabelledVersion(name, version, labels);
    }
    std::vector<StoredModel> removed;
    for (const pqxx::row& row : txn.exec_params(
             "DELETE FROM models WHERE name = $1 AND ($2 = 0 OR version = $2) "
             "RETURNING record, dir",
             name, version)) {
      DENDRO_ASSIGN_OR_RETURN(v1::Model m, Decode<v1::Model>(row[0], "model"));
      removed.push_back(StoredModel{std::move(m), row[1].as<std::string>()});
    }
    if (removed.empty()) return ModelNotFound(name, version);
    if (version == 0) txn.exec_params("DELETE FROM model_labels WHERE name = $1", name);
    NotifyModelChange(txn, name);
    return removed;
  });
}

absl::StatusOr<v1::Model> PostgresCatalogue::SetModelLabel(const std::string& name,
                                                           const std::string& label,
                                                           int64_t version) {
  const Timed t(this, "set_model_label");
  return InTxn(*conn_, [&](pqxx::work& txn) -> absl::StatusOr<v1::Model> {
    const pqxx::result r =
        version > 0
            ? txn.exec_params("SELECT record FROM models WHERE name = $1 AND version = $2 "
                              "FOR SHARE",
                              name, version)
            : txn.exec_params("SELECT record FROM models WHERE name = $1 "
                              "ORDER BY version DESC LIMIT 1 FOR SHARE",
                              name);
    if (r.empty()) return ModelNotFound(name, version);
    DENDRO_ASSIGN_OR_RETURN(v1::Model m, Decode<v1::Model>(r[0][0], "model"));
    txn.exec_params(
        "INSERT INTO model_labels (name, label, version) VALUES ($1, $2, $3) "
        "ON CONFLICT (name, label) DO UPDATE SET version = excluded.version",
        name, label, m.version());
    FillRegistryFields(txn, &m);
    NotifyModelChange(txn, name);
    return m;
  });
}

absl::StatusOr<int64_t> PostgresCatalogue::DeleteModelLabel(const std::string& name,
                                                            const std::string& label) {
  const Timed t(this, "delete_model_label");
  return InTxn(*conn_, [&](pqxx::work& txn) -> absl::StatusOr<int64_t> {
    const pqxx::result r = txn.exec_params(
        "DELETE FROM model_labels WHERE name = $1 AND label = $2 RETURNING version", name,
        label);
    if (r.empty()) {
      return LabelNotFound(name, label);
    }
    NotifyModelChange(txn, name);
    return r[0][0].as<int64_t>();
  });
}

absl::StatusOr<std::vector<StoredModel>> PostgresCatalogue::SetModelRetention(
    const std::string& name, int64_t keep_versions) {
  const Timed t(this, "set_model_retention");
  return InTxn(*conn_, [&](pqxx::work& txn) -> absl::StatusOr<std::vector<StoredModel>> {
    if (txn.exec_params("UPDATE model_names SET keep_versions = $1 WHERE name = $2",
                        keep_versions, name)
            .affected_rows() == 0) {
      return ModelNotFound(name, 0);
    }
    NotifyModelChange(txn, name);
    return PruneVersions(txn, name, keep_versions);
  });
}

absl::StatusOr<std::vector<StoredModel>> PostgresCatalogue::ModelVersions(
    const std::string& name) {
  const Timed t(this, "model_versions");
  return InTxn(*conn_, [&](pqxx::work& txn) -> absl::StatusOr<std::vector<StoredModel>> {
    const pqxx::result rows = txn.exec_params(
        absl::StrCat("SELECT m.record, m.dir, ", kRegistryColumns,
                     " FROM models m WHERE ($1 = '' OR m.name = $1) ORDER BY m.name, m.version"),
        name);
    std::vector<StoredModel> out;
    out.reserve(rows.size());
    for (const pqxx::row& row : rows) {
      DENDRO_ASSIGN_OR_RETURN(v1::Model m, Decode<v1::Model>(row[0], "model"));
      SetRegistryFields(row[2], row[3], &m);
      out.push_back(StoredModel{std::move(m), row[1].as<std::string>()});
    }
    return out;
  });
}

namespace {

// A connection of its own that LISTENs on `channel` and hands each
// notification's payload to `changed`, and calls changed("") whenever
// notifications may have been missed: after (re)connecting and every
// `reconcile`. One thread; it notices the destructor within kPoll.
class PostgresChannelWatch final : public Catalogue::ChangeWatch {
 public:
  PostgresChannelWatch(std::string uri, const char* channel,
                       std::function<void(const std::string&)> changed, absl::Duration reconcile)
      : uri_(std::move(uri)),
        channel_(channel),
        changed_(std::move(changed)),
        reconcile_(reconcile) {
    thread_ = std::thread([this] { Run(); });
  }
  ~PostgresChannelWatch() override {
    stop_.store(true);
    thread_.join();
  }

 private:
  static constexpr long kPollMicros = 200000;

  class Receiver final : public pqxx::notification_receiver {
   public:
    Receiver(pqxx::connection_base& c, const char* channel,
             const std::function<void(const std::string&)>& changed)
        : pqxx::notification_receiver(c, channel), changed_(changed) {}
    void operator()(const std::string& payload, int /*backend_pid*/) override {
      changed_(payload);
    }

   private:
    const std::function<void(const std::string&)>& changed_;
  };

  void Run() {
    std::unique_ptr<pqxx::connection> conn;
    std::unique_ptr<Receiver> receiver;
    absl::Time next_reconcile = absl::InfinitePast();
    absl::Time next_connect = absl::InfinitePast();
    bool warned = false;
    while (!stop_.load()) {
      const absl::Time now = absl::Now();
      if (conn == nullptr && now >= next_connect) {
        try {
          conn = std::make_unique<pqxx::connection>(uri_);
          receiver = std::make_unique<Receiver>(*conn, channel_, changed_);
          next_reconcile = absl::InfinitePast();  // what happened while not listening
          if (warned) spdlog::info("catalogue: notifications on {} resumed", channel_);
          warned = false;
        } catch (const std::exception& e) {
          Drop(receiver, conn);
          next_connect = now + absl::Seconds(1);
          if (!warned) {
            spdlog::warn("catalogue: cannot listen on {} ({}); retrying every second", channel_,
                         e.what());
          }
          warned = true;
        }
      }
      if (absl::Now() >= next_reconcile) {
        changed_("");
        next_reconcile = absl::Now() + reconcile_;
      }
      if (conn == nullptr) {
        absl::SleepFor(absl::Microseconds(kPollMicros));
        continue;
      }
      try {
        conn->await_notification(0, kPollMicros);
      } catch (const std::exception& e) {
        spdlog::warn("catalogue: the listener on {} lost its connection ({}); reconnecting",
                     channel_, e.what());
        warned = true;
        Drop(receiver, conn);
      }
    }
    Drop(receiver, conn);
  }

  // The receiver goes first (it UNLISTENs on its connection).
  static void Drop(std::unique_ptr<Receiver>& receiver, std::unique_ptr<pqxx::connection>& conn) {
    try {
      receiver.reset();
    } catch (const std::exception&) {
    }
    conn.reset();
  }

  const std::string uri_;
  const char* const channel_;
  const std::function<void(const std::string&)> changed_;
  const absl::Duration reconcile_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Catalogue::ChangeWatch> PostgresCatalogue::WatchModelChanges(
    std::function<void(const std::string&)> changed, absl::Duration reconcile) {
  // The model table ignores an empty name only as "reconcile": a model
  // notification always names its model.
  return std::make_unique<PostgresChannelWatch>(conn_->uri, kModelChannel, std::move(changed),
                                                reconcile);
}

std::unique_ptr<Catalogue::ChangeWatch> PostgresCatalogue::WatchQueue(
    std::function<void()> queued) {
  // No reconciliation: the workers' own poll is the fallback.
  return std::make_unique<PostgresChannelWatch>(
      conn_->uri, kQueueChannel, [queued = std::move(queued)](const std::string&) { queued(); },
      absl::InfiniteDuration());
}

absl::StatusOr<std::vector<std::string>> PostgresCatalogue::AllModelDirs() {
  const Timed t(this, "all_model_dirs");
  return InTxn(*conn_, [&](pqxx::work& txn) -> absl::StatusOr<std::vector<std::string>> {
    return Column(txn.exec("SELECT dir FROM models"));
  });
}

}  // namespace dendro::server
