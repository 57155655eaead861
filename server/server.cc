#include "server/server.h"

#include <fcntl.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/impl/codegen/service_type.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/common/cpus.h"
#include "core/common/mutex.h"
#include "core/common/status_macros.h"
#include "core/io/atomic_file.h"
#include "server/api/batcher.h"
#include "server/api/serving_gate.h"
#include "server/base/elastic_pool.h"
#include "server/base/ids.h"
#include "server/catalogue/catalogue.h"
#include "server/catalogue/open_catalogue.h"
#include "server/jobs/job_manager.h"
#include "server/methods/method.h"
#include "server/models/model_registry.h"
#include "server/observability/metrics.h"
#include "server/security/auth.h"
#include "server/security/caller.h"
#include "server/storage/artifact_store.h"
#include "server/storage/dataset_store.h"
#include "server/storage/disk_guard.h"
#include "server/storage/import_roots.h"
#include "server/storage/open_artifact_store.h"
#include "server/transport/http_console.h"
#include "server/transport/services.h"
#include "server/transport/stream_limiter.h"
#include "spdlog/spdlog.h"

namespace dendro::server {

// Everything a running server owns, and the steps that build it. Start()
// runs the steps in order; each either adds its part or fails, leaving what
// the earlier steps made for the destructor.
struct DendroServer::State {
  // First: destroyed last, after the gRPC server whose calls use them.
  std::unique_ptr<ServerMetrics> metrics;
  std::unique_ptr<Authenticator> auth;  // likewise used by the handlers
  std::unique_ptr<Catalogue> catalogue;
  std::unique_ptr<ArtifactStore> artifacts;  // outlives the two below
  std::unique_ptr<DatasetStore> datasets;
  std::unique_ptr<ModelRegistry> models;
  std::unique_ptr<JobManager> jobs;
  std::unique_ptr<StreamLimiter> streams;
  std::unique_ptr<ServingGate> gate;
  std::unique_ptr<Batcher> batcher;  // asks `gate`
  std::vector<std::unique_ptr<grpc::Service>> services;
  std::unique_ptr<grpc::Server> grpc_server;
  std::unique_ptr<grpc::Server> health_server;  // --health_listen
  // Threads of the Assign/Predict calls that wait for their turn: they
  // finish calls of grpc_server, so they are joined before it is destroyed.
  std::unique_ptr<ElasticPool> waiting;
  std::unique_ptr<HttpConsole> http;  // --http_listen; before the stores it reads
  int port = 0;
  int lock_fd = -1;          // flock on <data_dir>/LOCK; closed last
  int replica_lock_fd = -1;  // flock on the replica id (shared catalogue)
  bool shared = false;       // a catalogue other replicas share (PostgreSQL)
  std::string replica_id = "local";
  Mutex mu;
  bool shut_down ABSL_GUARDED_BY(mu) = false;
  bool abandoned ABSL_GUARDED_BY(mu) = false;

  // The steps of Start(), in the order it runs them.
  absl::Status CheckOptions(const ServerOptions& o);
  absl::Status StartAuthentication(const ServerOptions& o);
  absl::Status LockDataDirectory(const ServerOptions& o);
  absl::Status OpenStores(const ServerOptions& o);
  absl::Status SweepOrphans();
  void CreateMetrics(const ServerOptions& o);
  void CreateJobManager(const ServerOptions& o);
  void CreateServingLimits(const ServerOptions& o);
  absl::Status ServeMetrics(const ServerOptions& o);
  absl::Status StartGrpc(const ServerOptions& o);
  absl::Status StartHealthPort(const ServerOptions& o);
  absl::Status StartConsole(const ServerOptions& o);
  // One line for whoever reads the log: authentication (keys by role), TLS,
  // mutual TLS, and every listener with what protects it.
  void LogSecurity(const ServerOptions& o) const;
};

DendroServer::DendroServer(ServerOptions options)
    : options_(std::move(options)), state_(std::make_unique<State>()) {}

DendroServer::~DendroServer() {
  // With abandoned jobs the stores stay allocated: their threads still run.
  const bool clean = Shutdown();
  // The exposer's threads read the stores through probes: stop it first.
  if (state_->metrics) state_->metrics->StopServing();
  if (!clean) {
    // The abandoned jobs' threads still use the stores, so the state is
    // never freed: it is kept, reachable, for the rest of the process (which
    // is about to exit; the kernel then drops the lock).
    static auto* abandoned_mu = new Mutex;
    static auto* abandoned = new std::vector<std::unique_ptr<State>>;
    MutexLock lock(abandoned_mu);
    abandoned->push_back(std::move(state_));
    return;
  }
  const int lock_fd = state_->lock_fd;
  const int replica_lock_fd = state_->replica_lock_fd;
  state_.reset();
  if (replica_lock_fd >= 0) ::close(replica_lock_fd);
  if (lock_fd >= 0) ::close(lock_fd);
}

namespace {

// Takes a flock on <data_dir>/LOCK, held until `*fd` is closed: exclusive
// for a server that owns the directory (SQLite catalogue), shared for
// replicas of a PostgreSQL catalogue, so an owner never runs beside
// replicas. An owner writes its pid into the file for the message below.
absl::Status LockDataDir(const std::string& data_dir, bool shared, int* fd) {
  const std::string path = data_dir + "/LOCK";
  *fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (*fd < 0) {
    return absl::PermissionDeniedError(absl::StrCat("cannot open ", path, ": ",
                                                    std::strerror(errno)));
  }
  if (::flock(*fd, (shared ? LOCK_SH : LOCK_EX) | LOCK_NB) != 0) {
    char buf[32] = {0};
    const ssize_t n = ::pread(*fd, buf, sizeof(buf) - 1, 0);
    ::close(*fd);
    *fd = -1;
    std::string holder(buf, n > 0 ? static_cast<size_t>(n) : 0);
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    if (shared) {
      return absl::FailedPreconditionError(absl::StrCat(
          "data directory ", data_dir, " is owned by a dendrod with an SQLite catalogue",
          holder.empty() ? "" : absl::StrCat(" (pid ", holder, ")"),
          "; replicas of a PostgreSQL catalogue cannot share it"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "data directory ", data_dir, " is in use by another dendrod",
        holder.empty() ? "" : absl::StrCat(" (pid ", holder, ")"),
        "; stop it or choose another --data_dir"));
  }
  if (shared) return absl::OkStatus();
  // The lock is what matters; the pid is only a hint for the message above,
  // so a failure to write it is ignored.
  const std::string pid = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(*fd, 0) == 0) (void)!::pwrite(*fd, pid.data(), pid.size(), 0);
  return absl::OkStatus();
}

// Refuses a replica id that another live process sharing the data directory
// uses (an exclusive flock on <data_dir>/replicas/<id>.lock, held until
// `*fd` is closed).
absl::Status LockReplicaId(const std::string& data_dir, const std::string& id, int* fd) {
  const std::string dir = data_dir + "/replicas";
  DENDRO_RETURN_IF_ERROR(MakeDirs(dir));
  const std::string path = absl::StrCat(dir, "/", id, ".lock");
  *fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (*fd < 0) {
    return absl::PermissionDeniedError(absl::StrCat("cannot open the lock file of replica '", id,
                                                    "': ", std::strerror(errno)));
  }
  if (::flock(*fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(*fd);
    *fd = -1;
    return absl::FailedPreconditionError(absl::StrCat(
        "replica id '", id, "' is in use by another dendrod on this data directory; give each "
        "replica its own --replica_id"));
  }
  return absl::OkStatus();
}

// "<hostname>-<6 random hex digits>".
std::string DefaultReplicaId() {
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
    std::snprintf(host, sizeof(host), "dendrod");
  }
  std::string id = NewId(host);
  return id.substr(0, id.size() - 6);
}

// Replica ids name lock files: keep them to a safe alphabet.
absl::Status ValidateReplicaId(const std::string& id) {
  bool ok = !id.empty() && id.size() <= 128 && id[0] != '.';
  for (char c : id) {
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-');
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--replica_id must be 1 to 128 characters from [A-Za-z0-9._-], not starting with '.'; "
      "got '", id, "'"));
}

// Whether HOST:PORT names a loopback address.
bool IsLoopback(const std::string& listen) {
  std::string host = listen.substr(0, listen.rfind(':'));
  if (!host.empty() && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

// The TLS credentials of the main port: plaintext without --tls_cert; with
// --tls_client_ca, clients must present a certificate that CA signed.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const ServerOptions& o) {
  if (o.tls_cert_file.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  DENDRO_RETURN_IF_ERROR(ReadFileToString(o.tls_key_file, &pair.private_key));
  DENDRO_RETURN_IF_ERROR(ReadFileToString(o.tls_cert_file, &pair.cert_chain));
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  if (!o.tls_client_ca_file.empty()) {
    DENDRO_RETURN_IF_ERROR(ReadFileToString(o.tls_client_ca_file, &ssl.pem_root_certs));
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

}  // namespace

absl::Status DendroServer::Start() {
  State& s = *state_;
  const ServerOptions& o = options_;
  DENDRO_RETURN_IF_ERROR(s.CheckOptions(o));
  DENDRO_RETURN_IF_ERROR(s.StartAuthentication(o));
  DENDRO_RETURN_IF_ERROR(s.LockDataDirectory(o));
  DENDRO_RETURN_IF_ERROR(s.OpenStores(o));
  DENDRO_RETURN_IF_ERROR(s.SweepOrphans());
  s.CreateMetrics(o);
  s.CreateJobManager(o);
  s.CreateServingLimits(o);
  DENDRO_RETURN_IF_ERROR(s.ServeMetrics(o));
  DENDRO_RETURN_IF_ERROR(s.StartGrpc(o));
  DENDRO_RETURN_IF_ERROR(s.StartHealthPort(o));
  DENDRO_RETURN_IF_ERROR(s.StartConsole(o));
  DENDRO_RETURN_IF_ERROR(s.jobs->Start());
  SetServing(true);
  spdlog::info("dendrod serving on port {} (data dir {})", s.port, o.data_dir);
  if (s.metrics) spdlog::info("metrics on port {} at /metrics", s.metrics->port());
  s.LogSecurity(o);
  return absl::OkStatus();
}

// Flags that contradict each other, checked before anything is opened.
absl::Status DendroServer::State::CheckOptions(const ServerOptions& o) {
  DENDRO_RETURN_IF_ERROR(CheckRulesCover(ServiceNames()));
  if (!o.tls_client_ca_file.empty() && o.tls_cert_file.empty()) {
    return absl::InvalidArgumentError("--tls_client_ca needs --tls_cert and --tls_key");
  }
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key must be given together");
  }
  if (o.job_lease < absl::Seconds(2)) {
    return absl::InvalidArgumentError("--job_lease_seconds must be at least 2");
  }
  shared = !o.catalog.empty() && o.catalog != "sqlite";
  if (shared) {
    replica_id = o.replica_id.empty() ? DefaultReplicaId() : o.replica_id;
    DENDRO_RETURN_IF_ERROR(ValidateReplicaId(replica_id));
  }
  return absl::OkStatus();
}

// The keys file and client CA; without either, only a loopback address is
// served unless --allow_insecure says otherwise.
absl::Status DendroServer::State::StartAuthentication(const ServerOptions& o) {
  DENDRO_ASSIGN_OR_RETURN(auth,
                          Authenticator::Create(o.auth_keys_file, !o.tls_client_ca_file.empty()));
  if (o.auth_reflection && !auth->enabled()) {
    return absl::InvalidArgumentError("--auth_reflection needs --auth_keys or --tls_client_ca");
  }
  if (auth->enabled()) return absl::OkStatus();
  if (!IsLoopback(o.listen) && !o.allow_insecure) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to serve ", o.listen, " without authentication: give --auth_keys ",
        "(or --tls_client_ca), or --allow_insecure to accept any client"));
  }
  spdlog::warn(
      "authentication is off: every client that reaches {} may read, write and "
      "delete everything{}",
      o.listen, o.allow_insecure ? " (--allow_insecure)" : " (loopback only)");
  return absl::OkStatus();
}

// The data directory's lock (and the replica id's, when shared): a second
// owner of the directory stops here.
absl::Status DendroServer::State::LockDataDirectory(const ServerOptions& o) {
  DENDRO_RETURN_IF_ERROR(MakeDirs(o.data_dir));
  DENDRO_RETURN_IF_ERROR(LockDataDir(o.data_dir, shared, &lock_fd));
  if (!shared) return absl::OkStatus();
  DENDRO_RETURN_IF_ERROR(LockReplicaId(o.data_dir, replica_id, &replica_lock_fd));
  spdlog::info("replica '{}' of a shared catalogue", replica_id);
  return absl::OkStatus();
}

// The catalogue, the artifact store over the data directory, and the dataset
// and model stores on both.
absl::Status DendroServer::State::OpenStores(const ServerOptions& o) {
  DENDRO_ASSIGN_OR_RETURN(catalogue,
                          OpenCatalogue(o.catalog, o.data_dir, o.catalog_connections));
  DENDRO_ASSIGN_OR_RETURN(MinFreeDisk min_free, ParseMinFreeDisk(o.min_free_disk));
  // Replicas sharing the directory may be writing files they have not yet
  // recorded, and reading files another replica deletes: see
  // server/storage/shared_volume_store.h.
  artifacts = OpenArtifactStore(o.data_dir, catalogue->shared());
  datasets = std::make_unique<DatasetStore>(artifacts.get(), catalogue.get(),
                                            DiskGuard(o.data_dir, min_free),
                                            o.max_dataset_bytes, UploadPreparers());
  if (!o.import_dirs.empty()) {
    DENDRO_ASSIGN_OR_RETURN(ImportRoots roots, ImportRoots::Open(o.import_dirs));
    spdlog::info("same-host imports read .npy files under {}", absl::StrJoin(roots.paths(), ", "));
    datasets->set_import_roots(std::move(roots));
  }
  const int64_t cache_bytes =
      o.model_cache_bytes > 0 ? o.model_cache_bytes : DefaultJobMemoryBytes() / 3;
  models = std::make_unique<ModelRegistry>(artifacts.get(), catalogue.get(), cache_bytes);
  spdlog::info("model cache holds up to {} MiB of loaded models", cache_bytes >> 20);
  return absl::OkStatus();
}

// Removes what a crash left behind: the store's trash, then datasets and
// models on disk that the catalogue does not name.
absl::Status DendroServer::State::SweepOrphans() {
  // First, so that it finds only what a crash or kill left in the trash: the
  // sweeps below hand what they remove to the store's background deletion.
  if (absl::Status kept = artifacts->Maintain(); !kept.ok()) {
    spdlog::warn("artifact store housekeeping failed (retried at the next start): {}",
                 std::string(kept.message()));
  }
  // A catalogue that cannot be read stops the start: sweeping against it
  // would delete every dataset and model as an orphan.
  if (absl::Status swept = datasets->RemoveOrphans(); !swept.ok()) {
    return absl::DataLossError(
        absl::StrCat("cannot read the dataset catalogue or files; refusing to start ",
                     "(nothing was deleted): ", swept.message()));
  }
  if (absl::Status swept = models->RemoveOrphans(); !swept.ok()) {
    return absl::DataLossError(
        absl::StrCat("cannot read the model catalogue or files; refusing to start ",
                     "(nothing was deleted): ", swept.message()));
  }
  return absl::OkStatus();
}

// With --metrics_listen: the registry, fed by the catalogue's timings from
// here on (its port opens in ServeMetrics, once every probe is known).
void DendroServer::State::CreateMetrics(const ServerOptions& o) {
  if (o.metrics_listen.empty()) return;
  metrics = std::make_unique<ServerMetrics>();
  catalogue->set_observer(
      [m = metrics.get()](const char* op, double seconds) { m->CatalogueOp(op, seconds); });
}

// The job manager (not yet running: Start() starts it last) and the model
// table's watch of other replicas' changes.
void DendroServer::State::CreateJobManager(const ServerOptions& o) {
  JobManager::Options jopts;
  jopts.workers = o.workers;
  jopts.nice = o.job_nice;
  jopts.idle_scheduling = o.job_sched_idle;
  jopts.queue_capacity = o.queue_capacity;
  jopts.max_attempts = o.max_job_attempts;
  jopts.retention = o.job_retention;
  jopts.stop_timeout = o.job_stop_timeout;
  jopts.replica_id = replica_id;
  jopts.lease_ttl = o.job_lease;
  // Progress reaches other replicas' watchers through the catalogue, so
  // renew often when shared; alone, the lease only guards against a
  // restart under the same catalogue, and progress is served from memory.
  jopts.renew_interval = std::min(shared ? absl::Seconds(1) : absl::Seconds(10), o.job_lease / 3);
  jopts.limits.memory_bytes =
      o.max_job_memory_bytes > 0 ? o.max_job_memory_bytes : DefaultJobMemoryBytes();
  jopts.resolve_method = o.resolve_method;
  if (metrics) {
    jopts.on_finished = [m = metrics.get()](const v1::Job& job) { m->JobFinished(job); };
    jopts.on_started = [m = metrics.get()](const v1::Job& job) { m->JobStarted(job); };
  }
  jobs = std::make_unique<JobManager>(jopts, catalogue.get(), datasets.get(), models.get());
  // After CreateMetrics set the catalogue's observer: the watch's thread
  // uses the catalogue.
  models->StartWatching(o.model_table_reconcile);
}

// What keeps one caller from starving the others: the stream slots, the
// serving gate and the batcher in front of it.
void DendroServer::State::CreateServingLimits(const ServerOptions& o) {
  StreamLimiter::Options stream_caps;
  stream_caps.max_streams = o.max_streams;
  stream_caps.max_per_caller = o.max_streams_per_caller;
  stream_caps.admin_reserved = o.admin_reserved_streams;
  streams = std::make_unique<StreamLimiter>(stream_caps, o.upload_idle_timeout);
  spdlog::info("streams: at most {}, {} per caller, the last {} kept for admins",
               streams->max_streams(), streams->max_per_caller(), streams->admin_reserved());
  ServingGate::Options gate_options;
  gate_options.concurrency =
      o.serving_concurrency > 0 ? o.serving_concurrency : 2 * AvailableCpus();
  gate_options.max_waiting = o.serving_queue;
  gate = std::make_unique<ServingGate>(gate_options);
  spdlog::info("serving: {} Assign/Predict computations at once, up to {} more waiting",
               gate_options.concurrency, gate_options.max_waiting);
  Batcher::Options batch_options;
  batch_options.max_rows = o.batch_max_rows;
  batch_options.max_delay = o.batch_max_delay;
  batcher = std::make_unique<Batcher>(batch_options, gate.get());
  // A thread for every call the gate lets compute or wait (batch members
  // beyond that are refused, as the gate refuses calls).
  ElasticPool::Options pool_options;
  pool_options.max_threads = gate_options.concurrency + std::max(1, gate_options.max_waiting);
  waiting = std::make_unique<ElasticPool>(pool_options);
  if (batch_options.max_rows > 1) {
    spdlog::info(
        "serving: calls of fewer than {} rows on one model are computed together "
        "(waiting at most {} us for company)",
        batch_options.max_rows, absl::ToInt64Microseconds(batch_options.max_delay));
  }
}

// With --metrics_listen: the gauges and counters read at each scrape, then
// the exposer's port.
absl::Status DendroServer::State::ServeMetrics(const ServerOptions& o) {
  if (!metrics) return absl::OkStatus();
  struct Probe {
    const char* name;
    const char* help;
    std::function<double()> read;
  };
  JobManager* j = jobs.get();
  ModelRegistry* m = models.get();
  StreamLimiter* st = streams.get();
  ServingGate* g = gate.get();
  Batcher* b = batcher.get();
  ElasticPool* w = waiting.get();
  const DiskGuard* d = &datasets->disk();
  // A volume that cannot be read reads as 0 free (which the disk alert
  // reports) rather than dropping the series.
  auto space = [d] { return d->Measure().value_or(DiskGuard::Space{}); };
  const Probe gauges[] = {
      {"dendro_job_queue_depth", "Jobs waiting in the queue.",
       [j] { return j->GetStats().queued; }},
      {"dendro_jobs_running", "Jobs running now.", [j] { return j->GetStats().running; }},
      {"dendro_job_threads", "Threads each job may use (--threads).",
       [] { return DefaultThreads(); }},
      {"dendro_model_cache_entries", "Models held in the load cache.",
       [m] { return m->CacheStats().entries; }},
      {"dendro_model_cache_bytes",
       "Bytes charged to the models in the load cache (their artifact files).",
       [m] { return m->CacheStats().bytes; }},
      {"dendro_model_cache_capacity_bytes", "Bound on dendro_model_cache_bytes (--model_cache_mb).",
       [m] { return m->CacheStats().capacity; }},
      {"dendro_open_streams", "Streaming RPCs holding a slot.",
       [st] { return st->open_streams(); }},
      {"dendro_serving_computing",
       "Assign/Predict computations running now (at most --serving_concurrency).",
       [g] { return g->stats().computing; }},
      {"dendro_serving_waiting",
       "Assign/Predict calls waiting for a computing slot (at most --serving_queue).",
       [g] { return g->stats().waiting; }},
      {"dendro_serving_batch_waiting",
       "Assign/Predict calls in batches that are not computing yet.",
       [b] { return b->stats().waiting; }},
      {"dendro_serving_wait_threads",
       "Threads holding unary Assign/Predict calls that could not compute at once (at most "
       "--serving_concurrency + --serving_queue; idle ones exit after 10 s).",
       [w] { return w->stats().threads; }},
      {"dendro_data_volume_free_bytes",
       "Bytes free on the data directory's volume (as available to dendrod).",
       [space] { return static_cast<double>(space().free_bytes); }},
      {"dendro_data_volume_size_bytes", "Size of the data directory's volume.",
       [space] { return static_cast<double>(space().total_bytes); }},
      {"dendro_data_volume_min_free_bytes",
       "The floor below which uploads and fits are refused (--min_free_disk, at least 64 MiB).",
       [space] { return static_cast<double>(space().floor_bytes); }},
  };
  const Probe counters[] = {
      {"dendro_model_cache_hits_total", "Model loads answered from the cache.",
       [m] { return m->CacheStats().hits; }},
      {"dendro_model_cache_misses_total", "Model loads that read the model's files.",
       [m] { return m->CacheStats().misses; }},
      {"dendro_model_cache_evictions_total",
       "Models dropped from the cache to make room for others.",
       [m] { return m->CacheStats().evictions; }},
      {"dendro_serving_refused_total", "Assign/Predict calls refused because the line was full.",
       [g, w] { return g->stats().refused + w->stats().refused; }},
      {"dendro_serving_expired_total",
       "Assign/Predict calls dropped uncomputed: their deadline passed while they waited.",
       [g, b] { return g->stats().expired + b->stats().expired; }},
      {"dendro_serving_batches_total",
       "Assign/Predict evaluations that answered two or more calls together "
       "(--batch_max_rows).",
       [b] { return b->stats().batches; }},
      {"dendro_serving_batched_calls_total", "Assign/Predict calls answered by such an evaluation.",
       [b] { return b->stats().batched_calls; }},
      {"dendro_job_lease_takeovers_total",
       "Jobs this replica re-queued because the replica running them stopped renewing its "
       "lease.",
       [j] { return static_cast<double>(j->GetLeaseStats().takeovers); }},
      {"dendro_job_leases_lost_total",
       "Runs this replica stopped because their lease passed to another replica.",
       [j] { return static_cast<double>(j->GetLeaseStats().lost); }},
  };
  for (const Probe& p : gauges) metrics->AddProbe(p.name, p.help, p.read);
  for (const Probe& p : counters) metrics->AddCounterProbe(p.name, p.help, p.read);
  return metrics->Serve(o.metrics_listen);
}

// The main port: its credentials, the services over the stores, and the
// interceptors (parse failures, metrics, the reflection guard).
absl::Status DendroServer::State::StartGrpc(const ServerOptions& o) {
  DENDRO_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> creds, ServerCredentials(o));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // One server per address: without this, gRPC sets SO_REUSEPORT and a
  // second dendrod on the same port starts and takes half the connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(o.listen, creds, &port);
  builder.SetMaxReceiveMessageSize(o.max_message_bytes);
  builder.SetMaxSendMessageSize(o.max_message_bytes);
  ServiceDeps deps;
  deps.gate = gate.get();
  deps.batcher = batcher.get();
  deps.waiting = waiting.get();
  deps.datasets = datasets.get();
  deps.jobs = jobs.get();
  deps.models = models.get();
  deps.streams = streams.get();
  deps.data_dir = o.data_dir;
  deps.max_message_bytes = o.max_message_bytes;
  deps.stream_idle_timeout = o.stream_idle_timeout;
  deps.metrics = metrics.get();
  deps.auth = auth.get();
  services = MakeServices(std::move(deps));
  for (auto& svc : services) builder.RegisterService(svc.get());
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
  creators.push_back(MakeParseFailureStatusFactory(CallbackMethodNames()));
  if (metrics) creators.push_back(metrics->MakeInterceptorFactory());
  if (o.auth_reflection) creators.push_back(MakeReflectionGuardFactory(auth.get()));
  builder.experimental().SetInterceptorCreators(std::move(creators));
  grpc_server = builder.BuildAndStart();
  if (!grpc_server || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", o.listen,
                     " (is another server using the port? see the log above)"));
  }
  return absl::OkStatus();
}

// With --health_listen: a second, plaintext server with no services of its
// own: gRPC gives it the default health service (and reflection, guarded
// like the main port's), nothing else.
absl::Status DendroServer::State::StartHealthPort(const ServerOptions& o) {
  if (o.health_listen.empty()) return absl::OkStatus();
  grpc::ServerBuilder hb;
  if (o.auth_reflection) {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> guard;
    guard.push_back(MakeReflectionGuardFactory(auth.get()));
    hb.experimental().SetInterceptorCreators(std::move(guard));
  }
  int health_port = 0;
  hb.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  hb.AddListeningPort(o.health_listen, grpc::InsecureServerCredentials(), &health_port);
  health_server = hb.BuildAndStart();
  if (!health_server || health_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", o.health_listen, " (--health_listen)"));
  }
  spdlog::info("health checks (plaintext) on port {}", health_port);
  return absl::OkStatus();
}

// With --http_listen: the web console and JSON API (server/transport/http_console.h).
absl::Status DendroServer::State::StartConsole(const ServerOptions& o) {
  if (o.http_listen.empty()) return absl::OkStatus();
  HttpConsoleOptions hopts;
  hopts.listen = o.http_listen;
  hopts.data_dir = o.data_dir;
  hopts.max_message_bytes = o.max_message_bytes;
  hopts.limits = o.http_limits;
  hopts.tls_cert_file = o.tls_cert_file;
  hopts.tls_key_file = o.tls_key_file;
  hopts.tls_client_ca_file = o.tls_client_ca_file;
  hopts.allow_insecure = o.allow_insecure;
  http = std::make_unique<HttpConsole>(
      hopts, HttpConsoleDeps{datasets.get(), jobs.get(), models.get(), auth.get(), gate.get(),
                             batcher.get(), metrics.get()});
  return http->Start();
}

void DendroServer::State::LogSecurity(const ServerOptions& o) const {
  const bool tls = !o.tls_cert_file.empty();
  const bool mtls = !o.tls_client_ca_file.empty();
  auto host_of = [](const std::string& listen) {
    const size_t colon = listen.rfind(':');
    return colon == std::string::npos ? listen : listen.substr(0, colon);
  };
  std::vector<std::string> listeners;
  listeners.push_back(
      absl::StrCat("gRPC ", host_of(o.listen), ":", port,
                   tls ? (mtls ? " (TLS, client certificates)" : " (TLS)") : " (plaintext)"));
  if (http) {
    listeners.push_back(
        absl::StrCat("HTTP ", host_of(o.http_listen), ":", http->port(),
                     tls ? (mtls ? " (HTTPS, client certificates)" : " (HTTPS)") : " (plaintext)"));
  }
  if (health_server) listeners.push_back(absl::StrCat("health ", o.health_listen, " (plaintext)"));
  if (metrics) {
    listeners.push_back(
        absl::StrCat("metrics ", host_of(o.metrics_listen), ":", metrics->port(), " (plaintext)"));
  }
  spdlog::info("security: authentication {}; TLS {}; mutual TLS {}; listening: {}",
               auth->Describe(), tls ? "on" : "off",
               mtls ? "on (a client certificate signed by --tls_client_ca is required)" : "off",
               absl::StrJoin(listeners, ", "));
}

int DendroServer::port() const { return state_->port; }

void DendroServer::SetServing(bool serving) {
  for (grpc::Server* server : {state_->grpc_server.get(), state_->health_server.get()}) {
    if (server == nullptr) continue;
    grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
    health->SetServingStatus("", serving);
    for (const auto& name : ServiceNames()) health->SetServingStatus(name, serving);
  }
  if (state_->http) state_->http->SetReady(serving);
}

absl::Status DendroServer::ReloadKeys() {
  if (!state_->auth) return absl::FailedPreconditionError("the server has not started");
  absl::Status s = state_->auth->Reload();
  if (s.ok()) {
    spdlog::info("keys file reloaded");
  } else {
    spdlog::error("keys file not reloaded (the previous keys stay in force): {}", s.ToString());
  }
  return s;
}

int DendroServer::http_port() const { return state_->http ? state_->http->port() : 0; }

int DendroServer::metrics_port() const {
  return state_->metrics ? state_->metrics->port() : 0;
}

void DendroServer::Wait() {
  if (state_->grpc_server) state_->grpc_server->Wait();
}

bool DendroServer::Shutdown() {
  State& s = *state_;
  {
    MutexLock lock(&s.mu);
    if (s.shut_down || !s.grpc_server) return !s.abandoned;
    s.shut_down = true;
  }
  spdlog::info("shutting down: draining RPCs and jobs");
  const absl::Time started = absl::Now();
  SetServing(false);
  // Stop accepting jobs and let running ones finish (or be interrupted and
  // left queued): at most drain_grace + job_stop_timeout.
  const bool stopped = s.jobs->Shutdown(options_.drain_grace);
  // Watches and waits would follow jobs no one here will run: they end
  // (UNAVAILABLE) within a second. The other in-flight calls get at most
  // kShutdownMargin, less whatever the jobs took beyond their bound, and are
  // cancelled then; so the whole takes drain + job stop + the margin.
  s.streams->Close();
  const absl::Time bound = started + options_.drain_grace + options_.job_stop_timeout;
  const absl::Time rpc_deadline =
      std::min(absl::Now() + kShutdownMargin, bound + kShutdownMargin / 2);
  s.grpc_server->Shutdown(absl::ToChronoTime(rpc_deadline));
  spdlog::info("RPCs drained {} after the shutdown began", absl::FormatDuration(absl::Now() - started));
  if (s.health_server) s.health_server->Shutdown(std::chrono::system_clock::now());
  if (s.http) s.http->Stop();
  // Nothing is served any more: the model table need not follow other
  // replicas' changes (and its listener must not outlive the process's
  // logger when the state below is kept).
  s.models->StopWatching();
  if (!stopped) {
    // A detached job thread still uses the stores: never free them.
    MutexLock lock(&s.mu);
    s.abandoned = true;
    spdlog::error("shutdown complete with abandoned jobs (recorded as interrupted)");
    return false;
  }
  spdlog::info("shutdown complete");
  return true;
}

}  // namespace dendro::server
