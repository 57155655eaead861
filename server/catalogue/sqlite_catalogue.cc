#include "server/catalogue/sqlite_catalogue.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/common/status_macros.h"
#include "spdlog/spdlog.h"

namespace dendro::server {
namespace {

// The status for a failed SQLite call. A full disk is RESOURCE_EXHAUSTED
// (the client can free space by deleting), contention UNAVAILABLE, anything
// else INTERNAL.
absl::Status SqliteError(sqlite3* db, int rc, std::string_view what) {
  const int primary = rc & 0xff;
  const int os_errno = sqlite3_system_errno(db);
  const std::string detail = absl::StrCat(std::string(what), ": ", sqlite3_errmsg(db));
  if (primary == SQLITE_FULL ||
      (primary == SQLITE_IOERR && (os_errno == ENOSPC || os_errno == EDQUOT))) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the server's disk is full (", detail, "); delete datasets or models to free space"));
  }
  if (primary == SQLITE_CONSTRAINT) return absl::AlreadyExistsError(detail);
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) {
    return absl::UnavailableError(detail);
  }
  return absl::InternalError(detail);
}

// RAII prepared statement. Bind* take 1-based indices like SQLite.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Stmt() { sqlite3_finalize(stmt_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  absl::Status prepared() const {
    if (rc_ == SQLITE_OK) return absl::OkStatus();
    return SqliteError(db_, rc_, "sqlite prepare");
  }
  Stmt& Bind(int i, const std::string& s) {
    sqlite3_bind_text(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& BindBlob(int i, const std::string& s) {
    sqlite3_bind_blob(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& Bind(int i, int64_t v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  // SQLITE_ROW -> true, SQLITE_DONE -> false, else error.
  absl::StatusOr<bool> Step() {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return SqliteError(db_, rc, "sqlite");
  }
  absl::Status Run() {
    auto r = Step();
    return r.ok() ? absl::OkStatus() : r.status();
  }
  int64_t Int(int col) { return sqlite3_column_int64(stmt_, col); }
  std::string Text(int col) {
    const void* p = sqlite3_column_blob(stmt_, col);
    const int n = sqlite3_column_bytes(stmt_, col);
    return p ? std::string(static_cast<const char*>(p), n) : std::string();
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_;
};

template <typename Msg>
absl::StatusOr<Msg> Decode(const std::string& blob, const char* what) {
  Msg m;
  if (!m.ParseFromString(blob)) {
    return absl::DataLossError(absl::StrCat("corrupt ", what, " record in metadata"));
  }
  return m;
}

// Reads (seq, record) rows until `limit` items, noting whether more remain.
// The statement must select limit + 1 rows.
template <typename Msg>
absl::StatusOr<Page<Msg>> ReadPage(Stmt& st, int limit, const char* what) {
  Page<Msg> page;
  for (;;) {
    auto row = st.Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    if (static_cast<int>(page.items.size()) == limit) {
      page.more = true;
      break;
    }
    auto m = Decode<Msg>(st.Text(1), what);
    if (!m.ok()) return m.status();
    page.items.push_back(*std::move(m));
    page.last_seq = st.Int(0);
  }
  return page;
}

// The first column of every row of `sql`; any SQLite error is returned,
// never a partial list.
absl::StatusOr<std::vector<std::string>> ReadColumn(sqlite3* db, const char* sql) {
  Stmt st(db, sql);
  DENDRO_RETURN_IF_ERROR(st.prepared());
  std::vector<std::string> values;
  for (;;) {
    DENDRO_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) return values;
    values.push_back(st.Text(0));
  }
}

// A transaction that rolls back unless committed.
class Txn {
 public:
  explicit Txn(sqlite3* db) : db_(db) {
    rc_ = sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
    ok_ = rc_ == SQLITE_OK;
  }
  ~Txn() {
    if (ok_ && !done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  absl::Status began() const {
    return ok_ ? absl::OkStatus() : SqliteError(db_, rc_, "sqlite begin");
  }
  absl::Status Commit() {
    done_ = true;
    if (const int rc = sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr); rc != SQLITE_OK) {
      absl::Status s = SqliteError(db_, rc, "sqlite commit");
      // A failed COMMIT can leave the transaction open; end it so the
      // connection can start the next one.
      if (!sqlite3_get_autocommit(db_)) {
        sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      }
      return s;
    }
    return absl::OkStatus();
  }

 private:
  sqlite3* db_;
  int rc_ = SQLITE_OK;
  bool ok_ = false;
  bool done_ = false;
};

constexpr const char* kSchema = R"sql(
PRAGMA journal_mode = WAL;
PRAGMA synchronous = FULL;
PRAGMA foreign_keys = ON;
CREATE TABLE IF NOT EXISTS datasets (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  state INTEGER NOT NULL,
  dataset_id TEXT NOT NULL,
  record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS models (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL,
  version INTEGER NOT NULL,
  dir TEXT NOT NULL,
  record BLOB NOT NULL,
  UNIQUE (name, version));
CREATE TABLE IF NOT EXISTS model_names (
  name TEXT PRIMARY KEY,
  next_version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS model_labels (
  name TEXT NOT NULL,
  label TEXT NOT NULL,
  version INTEGER NOT NULL,
  PRIMARY KEY (name, label));
)sql";

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteCatalogue>> SqliteCatalogue::Open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                                             SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("cannot open metadata db ", path, ": ", msg));
  }
  sqlite3_busy_timeout(db, 5000);
  std::unique_ptr<SqliteCatalogue> store(new SqliteCatalogue(db, path + ".reserve"));
  DENDRO_RETURN_IF_ERROR(store->Exec(kSchema));
  DENDRO_RETURN_IF_ERROR(store->Migrate());
  {
    MutexLock lock(&store->mu_);
    store->RestoreReserveLocked();
  }
  return store;
}

namespace {
constexpr off_t kReserveBytes = off_t{8} << 20;

const absl::Status& StatusOf(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}
}  // namespace

void SqliteCatalogue::RestoreReserveLocked() {
  if (reserve_present_) return;
  const int fd = ::open(reserve_path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return;
  const bool ok = posix_fallocate(fd, 0, kReserveBytes) == 0 && ::fsync(fd) == 0;
  ::close(fd);
  if (ok) {
    reserve_present_ = true;
  } else {
    ::unlink(reserve_path_.c_str());  // a partial reserve only wastes space
  }
}

template <typename Fn>
std::invoke_result_t<Fn&> SqliteCatalogue::DeleteWithReserveLocked(Fn fn) {
  RestoreReserveLocked();
  auto result = fn();
  if (StatusOf(result).code() != absl::StatusCode::kResourceExhausted || !reserve_present_) {
    return result;
  }
  // The disk is full. Give SQLite the reserved space so the delete (which
  // is how space gets freed) can go through; the reserve is made again by
  // the next write once there is room.
  ::unlink(reserve_path_.c_str());
  reserve_present_ = false;
  spdlog::warn("metadata: disk full; released the reserve file to complete a delete");
  return fn();
}

SqliteCatalogue::~SqliteCatalogue() { sqlite3_close(db_); }

// Holds mu_ for one operation and reports its duration (lock wait
// included) to the observer.
class ABSL_SCOPED_LOCKABLE SqliteCatalogue::Op {
 public:
  Op(SqliteCatalogue* store, const char* name) ABSL_EXCLUSIVE_LOCK_FUNCTION(store->mu_)
      : store_(store), name_(name), start_(std::chrono::steady_clock::now()), lock_(&store->mu_) {}
  ~Op() ABSL_UNLOCK_FUNCTION() {
    store_->Observe(name_,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }

 private:
  SqliteCatalogue* const store_;
  const char* const name_;
  const std::chrono::steady_clock::time_point start_;
  const MutexLock lock_;
};

absl::StatusOr<absl::flat_hash_set<std::string>> SqliteCatalogue::ColumnsOf(const char* table) {
  absl::flat_hash_set<std::string> columns;
  Stmt st(db_, "SELECT name FROM pragma_table_info(?)");
  DENDRO_RETURN_IF_ERROR(st.prepared());
  st.Bind(1, std::string(table));
  for (;;) {
    DENDRO_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    columns.insert(st.Text(0));
  }
  return columns;
}

absl::Status SqliteCatalogue::Migrate() {
  // Catalogues made before jobs had request ids or end times, or names a
  // retention policy, lack those columns (end_seconds stays NULL for their
  // old finished jobs; keep_versions starts at 0, keep everything).
  DENDRO_ASSIGN_OR_RETURN(const auto names, ColumnsOf("model_names"));
  if (!names.contains("keep_versions")) {
    DENDRO_RETURN_IF_ERROR(
        Exec("ALTER TABLE model_names ADD COLUMN keep_versions INTEGER NOT NULL DEFAULT 0"));
  }
  DENDRO_ASSIGN_OR_RETURN(const auto jobs, ColumnsOf("jobs"));
  if (!jobs.contains("request_key")) {
    DENDRO_RETURN_IF_ERROR(Exec("ALTER TABLE jobs ADD COLUMN request_key TEXT"));
  }
  if (!jobs.contains("end_seconds")) {
    DENDRO_RETURN_IF_ERROR(Exec("ALTER TABLE jobs ADD COLUMN end_seconds INTEGER"));
  }
  if (!jobs.contains("lease_token")) {
    // Lease expiry in milliseconds since the epoch (this process's clock:
    // an SQLite catalogue has one dendrod).
    DENDRO_RETURN_IF_ERROR(Exec("ALTER TABLE jobs ADD COLUMN lease_holder TEXT; "
                                "ALTER TABLE jobs ADD COLUMN lease_expires INTEGER; "
                                "ALTER TABLE jobs ADD COLUMN lease_token INTEGER NOT NULL "
                                "DEFAULT 0;"));
  }
  DENDRO_RETURN_IF_ERROR(
      Exec("CREATE UNIQUE INDEX IF NOT EXISTS jobs_request_key ON jobs (request_key) "
           "WHERE request_key IS NOT NULL"));
  // Dataset generations: rows stored before them are generation 1 of their
  // own lineage. (A table without an id column is not one of ours: it is
  // left for the start's read check to refuse, not backfilled.)
  DENDRO_ASSIGN_OR_RETURN(const auto datasets, ColumnsOf("datasets"));
  if (!datasets.contains("lineage")) {
    DENDRO_RETURN_IF_ERROR(
        Exec("ALTER TABLE datasets ADD COLUMN lineage TEXT; "
             "ALTER TABLE datasets ADD COLUMN generation INTEGER;"));
    if (datasets.contains("id")) {
      DENDRO_RETURN_IF_ERROR(Exec("UPDATE datasets SET lineage = id, generation = 1"));
    }
  }
  return Exec(
      "CREATE UNIQUE INDEX IF NOT EXISTS datasets_generation ON datasets (lineage, generation)");
}

absl::Status SqliteCatalogue::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return absl::InternalError(absl::StrCat("sqlite: ", msg));
  }
  return absl::OkStatus();
}

// --- datasets ---------------------------------------------------------------

absl::Status SqliteCatalogue::PutDataset(const v1::Dataset& d) {
  const Op op(this, "put_dataset");
  Stmt st(db_, "INSERT INTO datasets (id, record, lineage, generation) VALUES (?, ?, ?, ?)");
  DENDRO_RETURN_IF_ERROR(st.prepared());
  return st.Bind(1, d.id())
      .BindBlob(2, d.SerializeAsString())
      .Bind(3, DatasetLineage(d))
      .Bind(4, static_cast<int64_t>(DatasetGeneration(d)))
      .Run();
}

absl::StatusOr<v1::Dataset> SqliteCatalogue::GetDatasetGeneration(const std::string& lineage,
                                                                  int generation) {
  const Op op(this, "get_dataset_generation");
  Stmt st(db_,
          "SELECT record FROM datasets WHERE lineage = ? AND (? = 0 OR generation = ?) "
          "ORDER BY generation DESC LIMIT 1");
  DENDRO_RETURN_IF_ERROR(st.prepared());
  st.Bind(1, lineage)
      .Bind(2, static_cast<int64_t>(generation))
      .Bind(3, static_cast<int64_t>(generation));
  auto row = st.Step();
  if (!row.ok()) return row.status();
  if (!*row) return DatasetGenerationNotFound(lineage, generation);
  return Decode<v1::Dataset>(st.Text(0), "dataset");
}

absl::StatusOr<v1::Dataset> SqliteCatalogue::GetDataset(const std::string& id) {
  const Op op(this, "get_dataset");
  Stmt st(db_, "SELECT record FROM datasets WHERE id = ?");
  DENDRO_RETURN_IF_ERROR(st.prepared());
  st.Bind(1, id);
  auto row = st.Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::NotFoundError(absl::StrCat("dataset '", id, "' not found"));
  return Decode<v1::Dataset>(st.Text(0), "dataset");
}

absl::StatusOr<Page<v1::Dataset>> SqliteCatalogue::ListDatasets(int64_t after_seq, int limit) {
  const Op op(this, "list_datasets");
  Stmt st(db_, "SELECT seq, record FROM datasets WHERE seq > ? ORDER BY seq LIMIT ?");
  DENDRO_RETURN_IF_ERROR(st.prepared());
  st.Bind(1, after_seq).Bind(2, static_cast<int64_t>(limit) + 1);
  return ReadPage<v1::Dataset>(st, limit, "dataset");
}

absl::StatusOr<bool> SqliteCatalogue::DatasetExistsLocked(const std::string& id) {
  Stmt st(db_, "SELECT 1 FROM datasets WHERE id = ?");
  DENDRO_RETURN_IF_ERROR(st.prepared());
  st.Bind(1, id);
  return st.Step();
}

absl::Status SqliteCatalogue::DeleteDatasetRowLocked(const std::string& id) {
  return DeleteWithReserveLocked([&]() -> absl::Status {
    Stmt st(db_, "DELETE FROM datasets WHERE id = ?");
    DENDRO_RETURN_IF_ERROR(st.prepared());
    DENDRO_RETURN_IF_ERROR(st.Bind(1, id).Run());
    if (sqlite3_changes(db_) == 0) {
      return absl::NotFoundError(absl::StrCat("dataset '", id, "' not found"));
    }
    return absl::OkStatus();
  });
}

absl::Status SqliteCatalogue::DeleteDataset(const std::string& id) {
  const Op op(this, "delete_dataset");
  return DeleteDatasetRowLocked(id);
}

absl::Status SqliteCatalogue::DeleteUnusedDataset(const std::string& id,
                                                  const std::string& except_job) {
  // One Op: the check and the delete hold mu_, as EnqueueJob does, and this
  // process is the catalogue's only writer.
  const Op op(this, "delete_unused_dataset");
  DENDRO_ASSIGN_OR_RETURN(bool exists, DatasetExistsLocked(id));
  if (!exists) return absl::NotFoundError(absl::StrCat("dataset '", id, "' not found"));
  Stmt st(db_, "SELECT 1 FROM jobs WHERE dataset_id = ? AND state IN (?, ?) AND id <> ? LIMIT 1");
  DENDRO_RETURN_IF_ERROR(st.prepared());
  st.Bind(1, id)
      .Bind(2, static_cast<int64_t>(v1::JOB_STATE_QUEUED))
      .Bind(3, static_cast<int64_t>(v1::JOB_STATE_RUNNING))
      .Bind(4, except_job);
  DENDRO_ASSIGN_OR_RETURN(bool used, st.Step());
  if (used) return DatasetInUseError(id);
  return DeleteDatasetRowLocked(id);
}

absl::StatusOr<std::vector<std::string>> SqliteCatalogue::AllDatasetIds() {
  const Op op(this, "all_dataset_ids");
  return ReadColumn(db_, "SELECT id FROM datasets");
}

// --- jobs -------------------------------------------------------------------

namespace {
// "<owner>\n<request id>", or "" (stored as NULL) without a request id.
std::string RequestKey(const std::string& owner, const std::string& request_id) {
  return request_id.empty() ? std::string() : absl::StrCat(owner, "\n", request_id);
}

constexpr int64_t kQueued = v1::JOB_STATE_QUEUED;
constexpr int64_t kRunning = v1::JOB_STATE_RUNNING;

// Inserts or replaces a job row; a job that is not RUNNING holds no lease.
absl::Status UpsertJob(sqlite3* db, const v1::Job& job) {
  Stmt st(db,
          "INSERT INTO jobs (id, state, dataset_id, record, request_key, end_seconds) "
          "VALUES (?1, ?2, ?3, ?4, NULLIF(?5, ''), NULLIF(?6, 0)) "
          "ON CONFLICT(id) DO UPDATE SET state = excluded.state, "
          "record = excluded.record, end_seconds = excluded.end_seconds, "
          "lease_holder = CASE WHEN excluded.state = ?7 THEN lease_holder END, "
          "lease_expires = CASE WHEN excluded.state = ?7 THEN lease_expires END");
  DENDRO_RETURN_IF_ERROR(st.prepared());
  return st.Bind(1, job.id())
      .Bind(2, static_cast<int64_t>(job.state()))
      .Bind(3, job.spec().dataset_id())
      .BindBlob(4, job.SerializeAsString())
      .Bind(5, RequestKey(job.owner(), job.request_id()))
      .Bind(6, static_cast<int64_t>(job.end_time().seconds()))
      .Bind(7, kRunning)
      .Run();
}

int64_t NowMillis() { return absl::ToUnixMillis(absl::Now()); }

// The stored record of job `id` if lease `token` still holds it; ABORTED
// (LeaseLost) otherwise. Call inside a write transaction.
absl::StatusOr<v1::Job> ReadLeased(sqlite3* db, const std::string& id, int64_t token) {
  Stmt st(db, "SELECT record FROM jobs WHERE id = ? AND state = ? AND lease_token = ?");
  DENDRO_RETURN_IF_ERROR(st.prepared());
  st.Bind(1, id).Bind(2, kRunning).Bind(3, token);
  DENDRO_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return LeaseLost(id);
  return Decode<v1::Job>(st.Text(0), "job");
}
}  // namespace

absl::Status SqliteCatalogue::PutJob(const v1::Job& job) {
  const Op op(this, "put_job");
  return UpsertJob(db_, job);
}

absl::StatusOr<std::optional<v1::Job>> SqliteCatalogue::FindJobByRequest(
    const std::string& owner, const std::string& request_id) {
  const Op op(this, "find_job_by_request");
  Stmt st(db_, "SELECT record FROM jobs WHERE request_key = ?");
  DENDRO_RETURN_IF_ERROR(st.prepared());
  st.Bind(1, RequestKey(owner, request_id));
  DENDRO_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return std::optional<v1::Job>();
  DENDRO_ASSIGN_OR_RETURN(v1::Job job, Decode<v1::Job>(st.Text(0), "job"));
  return std::optional<v1::Job>(std::move(job));
}

absl::Status SqliteCatalogue::DeleteJob(const std::string& id) {
  const Op op(this, "delete_job");
  return DeleteWithReserveLocked([&]() -> absl::Status {
    Stmt st(db_, "DELETE FROM jobs WHERE id = ?");
    DENDRO_RETURN_IF_ERROR(st.prepared());
    DENDRO_RETURN_IF_ERROR(st.Bind(1, id).Run());
    if (sqlite3_changes(db_) == 0) {
      return absl::NotFoundError(absl::StrCat("job '", id, "' not found"));
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<int> SqliteCatalogue::DeleteJobsEndedBefore(int64_t epoch_seconds) {
  const Op op(this, "expire_jobs");
  return DeleteWithReserveLocked([&]() -> absl::StatusOr<int> {
    Stmt st(db_, "DELETE FROM jobs WHERE state IN (?, ?, ?) AND end_seconds < ?");
    DENDRO_RETURN_IF_ERROR(st.prepared());
    DENDRO_RETURN_IF_ERROR(st.Bind(1, static_cast<int64_t>(v1::JOB_STATE_SUCCEEDED))
                               .Bind(2, static_cast<int64_t>(v1::JOB_STATE_FAILED))
                               .Bind(3, static_cast<int64_t>(v1::JOB_STATE_CANCELLED))
                               .Bind(4, epoch_seconds)
                               .Run());
    return sqlite3_changes(db_);
  });
}

absl::StatusOr<v1::Job> SqliteCatalogue::GetJob(const std::string& id) {
  const Op op(this, "get_job");
  Stmt st(db_, "SELECT record FROM jobs WHERE id = ?");
  DENDRO_RETURN_IF_ERROR(st.prepared());
  st.Bind(1, id);
  auto row = st.Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::NotFoundError(absl::StrCat("job '", id, "' not found"));
  return Decode<v1::Job>(st.Text(0), "job");
}

absl::StatusOr<Page<v1::Job>> SqliteCatalogue::ListJobs(int64_t cursor, int limit,
                                                        const JobListing& listing) {
  const Op op(this, "list_jobs");
  const JobSeqRange range = JobSeqRange::Of(cursor, listing);
  Stmt st(db_, listing.newest_first
                   ? "SELECT seq, record FROM jobs WHERE seq > ? AND seq < ? "
                     "AND ((1 << state) & ?) != 0 ORDER BY seq DESC LIMIT ?"
                   : "SELECT seq, record FROM jobs WHERE seq > ? AND seq < ? "
                     "AND ((1 << state) & ?) != 0 ORDER BY seq LIMIT ?");
  DENDRO_RETURN_IF_ERROR(st.prepared());
  st.Bind(1, range.above)
      .Bind(2, range.below)
      .Bind(3, range.state_mask)
      .Bind(4, static_cast<int64_t>(limit) + 1);
  return ReadPage<v1::Job>(st, limit, "job");
}

absl::StatusOr<std::vector<v1::Job>> SqliteCatalogue::UnfinishedJobs() {
  const Op op(this, "unfinished_jobs");
  Stmt st(db_, "SELECT record FROM jobs WHERE state IN (?, ?) ORDER BY seq");
  DENDRO_RETURN_IF_ERROR(st.prepared());
  st.Bind(1, static_cast<int64_t>(v1::JOB_STATE_QUEUED))
      .Bind(2, static_cast<int64_t>(v1::JOB_STATE_RUNNING));
  std::vector<v1::Job> jobs;
  for (;;) {
    auto row = st.Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    auto j = Decode<v1::Job>(st.Text(0), "job");
    if (!j.ok()) return j.status();
    jobs.push_back(*std::move(j));
  }
  return jobs;
}

// --- the job queue ----------------------------------------------------------

absl::Status SqliteCatalogue::EnqueueJob(const v1::Job& job, int capacity) {
  const Op op(this, "enqueue_job");
  Txn txn(db_);
  DENDRO_RETURN_IF_ERROR(txn.began());
  DENDRO_ASSIGN_OR_RETURN(bool exists, DatasetExistsLocked(job.spec().dataset_id()));
  if (!exists) return DatasetGoneError(job.spec().dataset_id());
  {
    Stmt st(db_, "SELECT count(*) FROM jobs WHERE state = ?");
    DENDRO_RETURN_IF_ERROR(st.prepared());
    st.Bind(1, kQueued);
    DENDRO_RETURN_IF_ERROR(st.Step().status());
    if (st.Int(0) >= capacity) {
      return absl::ResourceExhaustedError(absl::StrCat("job queue is full (", st.Int(0),
                                                       " jobs waiting, capacity ", capacity,
                                                       "); retry later"));
    }
  }
  Stmt st(db_,
          "INSERT INTO jobs (id, state, dataset_id, record, request_key) "
          "VALUES (?, ?, ?, ?, NULLIF(?, ''))");
  DENDRO_RETURN_IF_ERROR(st.prepared());
  DENDRO_RETURN_IF_ERROR(st.Bind(1, job.id())
                             .Bind(2, static_cast<int64_t>(job.state()))
                             .Bind(3, job.spec().dataset_id())
                             .BindBlob(4, job.SerializeAsString())
                             .Bind(5, RequestKey(job.owner(), job.request_id()))
                             .Run());
  return txn.Commit();
}

absl::StatusOr<std::optional<ClaimedJob>> SqliteCatalogue::ClaimJob(const std::string& holder,
                                                                    absl::Duration ttl) {
  const Op op(this, "claim_job");
  Txn txn(db_);
  DENDRO_RETURN_IF_ERROR(txn.began());
  ClaimedJob claimed;
  {
    Stmt st(db_, "SELECT record FROM jobs WHERE state = ? ORDER BY seq LIMIT 1");
    DENDRO_RETURN_IF_ERROR(st.prepared());
    st.Bind(1, kQueued);
    DENDRO_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) return std::optional<ClaimedJob>();
    DENDRO_ASSIGN_OR_RETURN(claimed.job, Decode<v1::Job>(st.Text(0), "job"));
  }
  {
    Stmt st(db_, "SELECT COALESCE(MAX(lease_token), 0) + 1 FROM jobs");
    DENDRO_RETURN_IF_ERROR(st.prepared());
    DENDRO_RETURN_IF_ERROR(st.Step().status());
    claimed.token = st.Int(0);
  }
  MarkClaimed(claimed.job);
  Stmt st(db_,
          "UPDATE jobs SET state = ?, record = ?, lease_holder = ?, lease_expires = ?, "
          "lease_token = ? WHERE id = ?");
  DENDRO_RETURN_IF_ERROR(st.prepared());
  DENDRO_RETURN_IF_ERROR(st.Bind(1, kRunning)
                             .BindBlob(2, claimed.job.SerializeAsString())
                             .Bind(3, holder)
                             .Bind(4, NowMillis() + absl::ToInt64Milliseconds(ttl))
                             .Bind(5, claimed.token)
                             .Bind(6, claimed.job.id())
                             .Run());
  DENDRO_RETURN_IF_ERROR(txn.Commit());
  return std::optional<ClaimedJob>(std::move(claimed));
}

absl::StatusOr<v1::Job> SqliteCatalogue::RenewJobLease(const std::string& id, int64_t token,
                                                       absl::Duration ttl, double progress,
                                                       const std::string& stage) {
  const Op op(this, "renew_job_lease");
  Txn txn(db_);
  DENDRO_RETURN_IF_ERROR(txn.began());
  DENDRO_ASSIGN_OR_RETURN(v1::Job stored, ReadLeased(db_, id, token));
  stored.set_progress(std::max(stored.progress(), progress));
  if (!stored.cancel_requested()) stored.set_stage(stage);
  Stmt st(db_, "UPDATE jobs SET record = ?, lease_expires = ? WHERE id = ?");
  DENDRO_RETURN_IF_ERROR(st.prepared());
  DENDRO_RETURN_IF_ERROR(st.BindBlob(1, stored.SerializeAsString())
                             .Bind(2, NowMillis() + absl::ToInt64Milliseconds(ttl))
                             .Bind(3, id)
                             .Run());
  DENDRO_RETURN_IF_ERROR(txn.Commit());
  return stored;
}

absl::Status SqliteCatalogue::ReleaseJob(const v1::Job& job, int64_t token) {
  const Op op(this, "release_job");
  Txn txn(db_);
  DENDRO_RETURN_IF_ERROR(txn.began());
  DENDRO_ASSIGN_OR_RETURN(v1::Job stored, ReadLeased(db_, job.id(), token));
  v1::Job out = job;
  KeepCancelRequest(stored, out);
  DENDRO_RETURN_IF_ERROR(UpsertJob(db_, out));
  return txn.Commit();
}

absl::StatusOr<std::vector<v1::Job>> SqliteCatalogue::RequeueLostJobs(const std::string& holder) {
  const Op op(this, "requeue_lost_jobs");
  Txn txn(db_);
  DENDRO_RETURN_IF_ERROR(txn.began());
  std::vector<std::pair<v1::Job, bool>> lost;
  {
    Stmt st(db_,
            "SELECT record, COALESCE(lease_holder = ?2, 0) FROM jobs WHERE state = ?1 AND "
            "(lease_expires IS NULL OR lease_expires < ?3 OR lease_holder = ?2) ORDER BY seq");
    DENDRO_RETURN_IF_ERROR(st.prepared());
    st.Bind(1, kRunning).Bind(2, holder).Bind(3, NowMillis());
    for (;;) {
      DENDRO_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      DENDRO_ASSIGN_OR_RETURN(v1::Job job, Decode<v1::Job>(st.Text(0), "job"));
      lost.emplace_back(std::move(job), st.Int(1) != 0);
    }
  }
  std::vector<v1::Job> requeued;
  for (auto& [job, restarted] : lost) {
    MarkRequeued(job, restarted ? Requeue::kHolderRestarted : Requeue::kLeaseExpired);
    DENDRO_RETURN_IF_ERROR(UpsertJob(db_, job));
    requeued.push_back(std::move(job));
  }
  DENDRO_RETURN_IF_ERROR(txn.Commit());
  return requeued;
}

absl::StatusOr<v1::Job> SqliteCatalogue::UpdateJob(const std::string& id,
                                                   const std::function<bool(v1::Job&)>& edit) {
  const Op op(this, "update_job");
  Txn txn(db_);
  DENDRO_RETURN_IF_ERROR(txn.began());
  v1::Job job;
  {
    Stmt st(db_, "SELECT record FROM jobs WHERE id = ?");
    DENDRO_RETURN_IF_ERROR(st.prepared());
    st.Bind(1, id);
    DENDRO_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) return absl::NotFoundError(absl::StrCat("job '", id, "' not found"));
    DENDRO_ASSIGN_OR_RETURN(job, Decode<v1::Job>(st.Text(0), "job"));
  }
  if (!edit(job)) return job;
  DENDRO_RETURN_IF_ERROR(UpsertJob(db_, job));
  DENDRO_RETURN_IF_ERROR(txn.Commit());
  return job;
}

absl::StatusOr<JobCounts> SqliteCatalogue::CountJobs() {
  const Op op(this, "count_jobs");
  Stmt st(db_,
          "SELECT COALESCE(SUM(state = ?1), 0), COALESCE(SUM(state = ?2), 0) FROM jobs "
          "WHERE state IN (?1, ?2)");
  DENDRO_RETURN_IF_ERROR(st.prepared());
  st.Bind(1, kQueued).Bind(2, kRunning);
  DENDRO_RETURN_IF_ERROR(st.Step().status());
  return JobCounts{st.Int(0), st.Int(1)};
}

// --- models -----------------------------------------------------------------

namespace {

// The columns that carry a model row's registry fields, after m.record: its
// labels (comma-joined; labels hold no commas; sorted by the caller) and its
// name's retention policy. Used with "FROM models m".
constexpr const char* kRegistryColumns =
    "COALESCE((SELECT group_concat(l.label, ',') FROM model_labels l "
    "WHERE l.name = m.name AND l.version = m.version), ''), "
    "COALESCE((SELECT n.keep_versions FROM model_names n WHERE n.name = m.name), 0)";

void SetRegistryFields(const std::string& joined, int64_t keep, v1::Model* m) {
  m->clear_labels();
  if (!joined.empty()) {
    std::vector<std::string> labels = absl::StrSplit(joined, ',');
    std::sort(labels.begin(), labels.end());
    for (std::string& l : labels) m->add_labels(std::move(l));
  }
  m->set_keep_versions(static_cast<int32_t>(keep));
}

// Fills the fields of `m` that live in the registry tables, not its record:
// the labels pointing at it and its name's retention policy.
absl::Status FillRegistryFields(sqlite3* db, v1::Model* m) {
  m->clear_labels();
  {
    Stmt st(db, "SELECT label FROM model_labels WHERE name = ? AND version = ? ORDER BY label");
    DENDRO_RETURN_IF_ERROR(st.prepared());
    st.Bind(1, m->name()).Bind(2, m->version());
    for (;;) {
      DENDRO_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      m->add_labels(st.Text(0));
    }
  }
  Stmt st(db, "SELECT keep_versions FROM model_names WHERE name = ?");
  DENDRO_RETURN_IF_ERROR(st.prepared());
  st.Bind(1, m->name());
  DENDRO_ASSIGN_OR_RETURN(bool row, st.Step());
  m->set_keep_versions(row ? static_cast<int32_t>(st.Int(0)) : 0);
  return absl::OkStatus();
}

// Inside a transaction: deletes the versions of `name` beyond the newest
// `keep` unlabelled ones (none when keep <= 0) and returns them.
absl::StatusOr<std::vector<StoredModel>> PruneVersions(sqlite3* db, const std::string& name,
                                                       int64_t keep) {
  std::vector<StoredModel> pruned;
  if (keep <= 0) return pruned;
  {
    Stmt st(db,
            "SELECT record, dir FROM models m WHERE name = ? AND NOT EXISTS ("
            "SELECT 1 FROM model_labels l WHERE l.name = m.name AND l.version = m.version) "
            "ORDER BY version DESC LIMIT -1 OFFSET ?");
    DENDRO_RETURN_IF_ERROR(st.prepared());
    st.Bind(1, name).Bind(2, keep);
    for (;;) {
      DENDRO_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      DENDRO_ASSIGN_OR_RETURN(v1::Model m, Decode<v1::Model>(st.Text(0), "model"));
      pruned.push_back(StoredModel{std::move(m), st.Text(1)});
    }
  }
  for (const StoredModel& p : pruned) {
    Stmt st(db, "DELETE FROM models WHERE name = ? AND version = ?");
    DENDRO_RETURN_IF_ERROR(st.prepared());
    DENDRO_RETURN_IF_ERROR(st.Bind(1, name).Bind(2, p.model.version()).Run());
  }
  return pruned;
}

}  // namespace

absl::StatusOr<CommitResult> SqliteCatalogue::CommitModel(v1::Model model, const std::string& dir,
                                                        v1::Job job, int64_t lease_token) {
  const Op op(this, "commit_model");
  Txn txn(db_);
  DENDRO_RETURN_IF_ERROR(txn.began());
  if (lease_token != 0) {
    DENDRO_ASSIGN_OR_RETURN(v1::Job stored, ReadLeased(db_, job.id(), lease_token));
    if (stored.cancel_requested()) return CancelledBeforeCommit(job.id());
  }
  int64_t version = 1;
  int64_t keep = 0;
  {
    Stmt st(db_, "SELECT next_version, keep_versions FROM model_names WHERE name = ?");
    DENDRO_RETURN_IF_ERROR(st.prepared());
    st.Bind(1, model.name());
    auto row = st.Step();
    if (!row.ok()) return row.status();
    if (*row) {
      version = st.Int(0);
      keep = st.Int(1);
    }
  }
  {
    Stmt st(db_,
            "INSERT INTO model_names (name, next_version) VALUES (?, ?) "
            "ON CONFLICT(name) DO UPDATE SET next_version = excluded.next_version");
    DENDRO_RETURN_IF_ERROR(st.prepared());
    DENDRO_RETURN_IF_ERROR(st.Bind(1, model.name()).Bind(2, version + 1).Run());
  }
  model.set_version(version);
  {
    Stmt st(db_, "INSERT INTO models (name, version, dir, record) VALUES (?, ?, ?, ?)");
    DENDRO_RETURN_IF_ERROR(st.prepared());
    DENDRO_RETURN_IF_ERROR(st.Bind(1, model.name())
                      .Bind(2, version)
                      .Bind(3, dir)
                      .BindBlob(4, model.SerializeAsString())
                      .Run());
  }
  job.set_model_name(model.name());
  job.set_model_version(version);
  DENDRO_RETURN_IF_ERROR(UpsertJob(db_, job));
  CommitResult result;
  result.version = version;
  DENDRO_ASSIGN_OR_RETURN(result.pruned, PruneVersions(db_, model.name(), keep));
  DENDRO_RETURN_IF_ERROR(txn.Commit());
  return result;
}

absl::StatusOr<StoredModel> SqliteCatalogue::GetModel(const std::string& name, int64_t version,
                                                      const std::string& label) {
  const Op op(this, "get_model");
  if (!label.empty()) {
    Stmt st(db_, "SELECT version FROM model_labels WHERE name = ? AND label = ?");
    DENDRO_RETURN_IF_ERROR(st.prepared());
    st.Bind(1, name).Bind(2, label);
    DENDRO_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) {
      return LabelNotFound(name, label);
    }
    version = st.Int(0);
  }
  const std::string sql = absl::StrCat(
      "SELECT m.record, m.dir, ", kRegistryColumns, " FROM models m ",
      version > 0 ? "WHERE m.name = ? AND m.version = ?"
                  : "WHERE m.name = ? AND ? = 0 ORDER BY m.version DESC LIMIT 1");
  Stmt st(db_, sql.c_str());
  DENDRO_RETURN_IF_ERROR(st.prepared());
  st.Bind(1, name).Bind(2, version);
  auto row = st.Step();
  if (!row.ok()) return row.status();
  if (!*row) return ModelNotFound(name, version);
  auto m = Decode<v1::Model>(st.Text(0), "model");
  if (!m.ok()) return m.status();
  SetRegistryFields(st.Text(2), st.Int(3), &*m);
  return StoredModel{*std::move(m), st.Text(1)};
}

absl::StatusOr<Page<v1::Model>> SqliteCatalogue::ListModels(const std::string& name,
                                                          int64_t after_seq, int limit) {
  const Op op(this, "list_models");
  const std::string sql = absl::StrCat(
      "SELECT m.seq, m.record, ", kRegistryColumns,
      " FROM models m WHERE m.seq > ? AND (? = '' OR m.name = ?) ORDER BY m.seq LIMIT ?");
  Stmt st(db_, sql.c_str());
  DENDRO_RETURN_IF_ERROR(st.prepared());
  st.Bind(1, after_seq).Bind(2, name).Bind(3, name).Bind(4, static_cast<int64_t>(limit) + 1);
  Page<v1::Model> page;
  for (;;) {
    DENDRO_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    if (static_cast<int>(page.items.size()) == limit) {
      page.more = true;
      break;
    }
    DENDRO_ASSIGN_OR_RETURN(v1::Model m, Decode<v1::Model>(st.Text(1), "model"));
    SetRegistryFields(st.Text(2), st.Int(3), &m);
    page.items.push_back(std::move(m));
    page.last_seq = st.Int(0);
  }
  return page;
}

absl::StatusOr<std::vector<StoredModel>> SqliteCatalogue::DeleteModels(const std::string& name,
                                                                     int64_t version) {
  const Op op(this, "delete_models");
  return DeleteWithReserveLocked([&]() -> absl::StatusOr<std::vector<StoredModel>> {
    Txn txn(db_);
    DENDRO_RETURN_IF_ERROR(txn.began());
    std::vector<StoredModel> removed;
    {
      Stmt st(db_,
              "SELECT record, dir FROM models WHERE name = ? AND (? = 0 OR version = ?)");
      DENDRO_RETURN_IF_ERROR(st.prepared());
      st.Bind(1, name).Bind(2, version).Bind(3, version);
      for (;;) {
        auto row = st.Step();
        if (!row.ok()) return row.status();
        if (!*row) break;
        auto m = Decode<v1::Model>(st.Text(0), "model");
        if (!m.ok()) return m.status();
        removed.push_back(StoredModel{*std::move(m), st.Text(1)});
      }
    }
    if (removed.empty()) return ModelNotFound(name, version);
    if (version > 0) {
      // A label is a promise to readers: it must be moved, not dangle.
      v1::Model labelled = removed.front().model;
      DENDRO_RETURN_IF_ERROR(FillRegistryFields(db_, &labelled));
      if (labelled.labels_size() > 0) {
        return LabelledVersion(name, version,
                               {labelled.labels().begin(), labelled.labels().end()});
      }
    }
    {
      Stmt st(db_, "DELETE FROM models WHERE name = ? AND (? = 0 OR version = ?)");
      DENDRO_RETURN_IF_ERROR(st.prepared());
      DENDRO_RETURN_IF_ERROR(st.Bind(1, name).Bind(2, version).Bind(3, version).Run());
    }
    if (version == 0) {
      Stmt st(db_, "DELETE FROM model_labels WHERE name = ?");
      DENDRO_RETURN_IF_ERROR(st.prepared());
      DENDRO_RETURN_IF_ERROR(st.Bind(1, name).Run());
    }
    DENDRO_RETURN_IF_ERROR(txn.Commit());
    return removed;
  });
}

absl::StatusOr<v1::Model> SqliteCatalogue::SetModelLabel(const std::string& name,
                                                       const std::string& label,
                                                       int64_t version) {
  const Op op(this, "set_model_label");
  Txn txn(db_);
  DENDRO_RETURN_IF_ERROR(txn.began());
  Stmt get(db_, version > 0
                    ? "SELECT record FROM models WHERE name = ? AND version = ?"
                    : "SELECT record FROM models WHERE name = ? AND ? = 0 "
                      "ORDER BY version DESC LIMIT 1");
  DENDRO_RETURN_IF_ERROR(get.prepared());
  get.Bind(1, name).Bind(2, version);
  DENDRO_ASSIGN_OR_RETURN(bool row, get.Step());
  if (!row) return ModelNotFound(name, version);
  DENDRO_ASSIGN_OR_RETURN(v1::Model m, Decode<v1::Model>(get.Text(0), "model"));
  {
    Stmt st(db_,
            "INSERT INTO model_labels (name, label, version) VALUES (?, ?, ?) "
            "ON CONFLICT(name, label) DO UPDATE SET version = excluded.version");
    DENDRO_RETURN_IF_ERROR(st.prepared());
    DENDRO_RETURN_IF_ERROR(st.Bind(1, name).Bind(2, label).Bind(3, m.version()).Run());
  }
  DENDRO_RETURN_IF_ERROR(FillRegistryFields(db_, &m));
  DENDRO_RETURN_IF_ERROR(txn.Commit());
  return m;
}

absl::StatusOr<int64_t> SqliteCatalogue::DeleteModelLabel(const std::string& name,
                                                        const std::string& label) {
  const Op op(this, "delete_model_label");
  return DeleteWithReserveLocked([&]() -> absl::StatusOr<int64_t> {
    Txn txn(db_);
    DENDRO_RETURN_IF_ERROR(txn.began());
    Stmt get(db_, "SELECT version FROM model_labels WHERE name = ? AND label = ?");
    DENDRO_RETURN_IF_ERROR(get.prepared());
    get.Bind(1, name).Bind(2, label);
    DENDRO_ASSIGN_OR_RETURN(bool row, get.Step());
    if (!row) {
      return LabelNotFound(name, label);
    }
    const int64_t version = get.Int(0);
    Stmt st(db_, "DELETE FROM model_labels WHERE name = ? AND label = ?");
    DENDRO_RETURN_IF_ERROR(st.prepared());
    DENDRO_RETURN_IF_ERROR(st.Bind(1, name).Bind(2, label).Run());
    DENDRO_RETURN_IF_ERROR(txn.Commit());
    return version;
  });
}

absl::StatusOr<std::vector<StoredModel>> SqliteCatalogue::SetModelRetention(const std::string& name,
                                                                          int64_t keep_versions) {
  const Op op(this, "set_model_retention");
  return DeleteWithReserveLocked([&]() -> absl::StatusOr<std::vector<StoredModel>> {
    Txn txn(db_);
    DENDRO_RETURN_IF_ERROR(txn.began());
    Stmt st(db_, "UPDATE model_names SET keep_versions = ? WHERE name = ?");
    DENDRO_RETURN_IF_ERROR(st.prepared());
    DENDRO_RETURN_IF_ERROR(st.Bind(1, keep_versions).Bind(2, name).Run());
    if (sqlite3_changes(db_) == 0) return ModelNotFound(name, 0);
    DENDRO_ASSIGN_OR_RETURN(std::vector<StoredModel> pruned,
                            PruneVersions(db_, name, keep_versions));
    DENDRO_RETURN_IF_ERROR(txn.Commit());
    return pruned;
  });
}

absl::StatusOr<std::vector<StoredModel>> SqliteCatalogue::ModelVersions(
    const std::string& name) {
  const Op op(this, "model_versions");
  const std::string sql =
      absl::StrCat("SELECT m.record, m.dir, ", kRegistryColumns,
                   " FROM models m WHERE (?1 = '' OR m.name = ?1) ORDER BY m.name, m.version");
  Stmt st(db_, sql.c_str());
  DENDRO_RETURN_IF_ERROR(st.prepared());
  st.Bind(1, name);
  std::vector<StoredModel> out;
  for (;;) {
    DENDRO_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    DENDRO_ASSIGN_OR_RETURN(v1::Model m, Decode<v1::Model>(st.Text(0), "model"));
    SetRegistryFields(st.Text(2), st.Int(3), &m);
    out.push_back(StoredModel{std::move(m), st.Text(1)});
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> SqliteCatalogue::AllModelDirs() {
  const Op op(this, "all_model_dirs");
  return ReadColumn(db_, "SELECT dir FROM models");
}

}  // namespace dendro::server
