#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/impl/codegen/service_type.h>

#include <fcntl.h>
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
#include "core/common/cpus.h"
#include "core/common/status_macros.h"
#include "core/io/atomic_file.h"
#include "server/auth.h"
#include "server/caller.h"
#include "server/dataset_store.h"
#include "server/ids.h"
#include "server/artifact_store.h"
#include "server/http_console.h"
#include "server/job_manager.h"
#include "server/catalogue.h"
#include "server/open_artifact_store.h"
#include "server/open_catalogue.h"
#include "server/metrics.h"
#include "server/methods/method.h"
#include "server/model_registry.h"
#include "server/batcher.h"
#include "server/serving_gate.h"
#include "server/services.h"
#include "server/stream_limiter.h"
#include "spdlog/spdlog.h"

namespace dendro::server {

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
  std::unique_ptr<HttpConsole> http;  // --http_listen; before the stores it reads
  int port = 0;
  int lock_fd = -1;          // flock on <data_dir>/LOCK; closed last
  int replica_lock_fd = -1;  // flock on the replica id (shared catalogue)
  std::mutex mu;
  bool shut_down = false;
  bool abandoned = false;
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
    static auto* abandoned_mu = new std::mutex;
    static auto* abandoned = new std::vector<std::unique_ptr<State>>;
    std::lock_guard<std::mutex> lock(*abandoned_mu);
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

}  // namespace

absl::Status DendroServer::Start() {
  State& s = *state_;
  DENDRO_RETURN_IF_ERROR(CheckRulesCover(ServiceNames()));
  if (!options_.tls_client_ca_file.empty() && options_.tls_cert_file.empty()) {
    return absl::InvalidArgumentError("--tls_client_ca needs --tls_cert and --tls_key");
  }
  DENDRO_ASSIGN_OR_RETURN(s.auth, Authenticator::Create(options_.auth_keys_file,
                                                        !options_.tls_client_ca_file.empty()));
  if (options_.auth_reflection && !s.auth->enabled()) {
    return absl::InvalidArgumentError("--auth_reflection needs --auth_keys or --tls_client_ca");
  }
  if (!s.auth->enabled()) {
    if (!IsLoopback(options_.listen) && !options_.allow_insecure) {
      return absl::FailedPreconditionError(absl::StrCat(
          "refusing to serve ", options_.listen, " without authentication: give --auth_keys ",
          "(or --tls_client_ca), or --allow_insecure to accept any client"));
    }
    spdlog::warn("authentication is off: every client that reaches {} may read, write and "
                 "delete everything{}", options_.listen,
                 options_.allow_insecure ? " (--allow_insecure)" : " (loopback only)");
  }
  DENDRO_RETURN_IF_ERROR(MakeDirs(options_.data_dir));
  const bool shared = !options_.catalog.empty() && options_.catalog != "sqlite";
  DENDRO_RETURN_IF_ERROR(LockDataDir(options_.data_dir, shared, &s.lock_fd));
  std::string replica_id = "local";
  if (shared) {
    replica_id = options_.replica_id.empty() ? DefaultReplicaId() : options_.replica_id;
    DENDRO_RETURN_IF_ERROR(ValidateReplicaId(replica_id));
    DENDRO_RETURN_IF_ERROR(LockReplicaId(options_.data_dir, replica_id, &s.replica_lock_fd));
    spdlog::info("replica '{}' of a shared catalogue", replica_id);
  }
  if (options_.job_lease < absl::Seconds(2)) {
    return absl::InvalidArgumentError("--job_lease_seconds must be at least 2");
  }
  DENDRO_ASSIGN_OR_RETURN(s.catalogue, OpenCatalogue(options_.catalog, options_.data_dir,
                                                       options_.catalog_connections));
  DENDRO_ASSIGN_OR_RETURN(MinFreeDisk min_free, ParseMinFreeDisk(options_.min_free_disk));
  // Replicas sharing the directory may be writing files they have not yet
  // recorded, and reading files another replica deletes: see
  // server/shared_volume_store.h.
  s.artifacts = OpenArtifactStore(options_.data_dir, s.catalogue->shared());
  s.datasets = std::make_unique<DatasetStore>(s.artifacts.get(), s.catalogue.get(),
                                              DiskGuard(options_.data_dir, min_free),
                                              options_.max_dataset_bytes, UploadPreparers());
  const int64_t cache_bytes = options_.model_cache_bytes > 0 ? options_.model_cache_bytes
                                                             : DefaultJobMemoryBytes() / 3;
  s.models = std::make_unique<ModelRegistry>(s.artifacts.get(), s.catalogue.get(), cache_bytes);
  spdlog::info("model cache holds up to {} MiB of loaded models", cache_bytes >> 20);
  // First, so that it finds only what a crash or kill left in the trash: the
  // sweeps below hand what they remove to the store's background deletion.
  if (absl::Status kept = s.artifacts->Maintain(); !kept.ok()) {
    spdlog::warn("artifact store housekeeping failed (retried at the next start): {}",
                 std::string(kept.message()));
  }
  // A catalogue that cannot be read stops the start: sweeping against it
  // would delete every dataset and model as an orphan.
  if (absl::Status swept = s.datasets->RemoveOrphans(); !swept.ok()) {
    return absl::DataLossError(absl::StrCat("cannot read the dataset catalogue or files; refusing to start ",
                                            "(nothing was deleted): ", swept.message()));
  }
  if (absl::Status swept = s.models->RemoveOrphans(); !swept.ok()) {
    return absl::DataLossError(absl::StrCat("cannot read the model catalogue or files; refusing to start ",
                                            "(nothing was deleted): ", swept.message()));
  }
  JobManager::Options jopts;
  jopts.workers = options_.workers;
  jopts.nice = options_.job_nice;
  jopts.queue_capacity = options_.queue_capacity;
  jopts.max_attempts = options_.max_job_attempts;
  jopts.retention = options_.job_retention;
  jopts.stop_timeout = options_.job_stop_timeout;
  jopts.replica_id = replica_id;
  jopts.lease_ttl = options_.job_lease;
  // Progress reaches other replicas' watchers through the catalogue, so
  // renew often when shared; alone, the lease only guards against a
  // restart under the same catalogue, and progress is served from memory.
  jopts.renew_interval =
      std::min(shared ? absl::Seconds(1) : absl::Seconds(10), options_.job_lease / 3);
  jopts.limits.memory_bytes = options_.max_job_memory_bytes > 0 ? options_.max_job_memory_bytes
                                                                : DefaultJobMemoryBytes();
  jopts.resolve_method = options_.resolve_method;
  if (!options_.metrics_listen.empty()) {
    s.metrics = std::make_unique<ServerMetrics>();
    jopts.on_finished = [m = s.metrics.get()](const v1::Job& job) { m->JobFinished(job); };
    s.catalogue->set_observer(
        [m = s.metrics.get()](const char* op, double seconds) { m->CatalogueOp(op, seconds); });
  }
  s.jobs = std::make_unique<JobManager>(jopts, s.catalogue.get(), s.datasets.get(), s.models.get());
  // After the observer is set: the watch's thread uses the catalogue.
  s.models->StartWatching(options_.model_table_reconcile);

  std::shared_ptr<grpc::ServerCredentials> creds;
  if (options_.tls_cert_file.empty() != options_.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key must be given together");
  }
  if (!options_.tls_cert_file.empty()) {
    grpc::SslServerCredentialsOptions ssl;
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    DENDRO_RETURN_IF_ERROR(ReadFileToString(options_.tls_key_file, &pair.private_key));
    DENDRO_RETURN_IF_ERROR(ReadFileToString(options_.tls_cert_file, &pair.cert_chain));
    ssl.pem_key_cert_pairs.push_back(std::move(pair));
    if (!options_.tls_client_ca_file.empty()) {
      DENDRO_RETURN_IF_ERROR(ReadFileToString(options_.tls_client_ca_file, &ssl.pem_root_certs));
      ssl.client_certificate_request =
          GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
    creds = grpc::SslServerCredentials(ssl);
  } else {
    creds = grpc::InsecureServerCredentials();
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // One server per address: without this, gRPC sets SO_REUSEPORT and a
  // second dendrod on the same port starts and takes half the connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(options_.listen, creds, &s.port);
  builder.SetMaxReceiveMessageSize(options_.max_message_bytes);
  builder.SetMaxSendMessageSize(options_.max_message_bytes);
  StreamLimiter::Options stream_caps;
  stream_caps.max_streams = options_.max_streams;
  stream_caps.max_per_caller = options_.max_streams_per_caller;
  stream_caps.admin_reserved = options_.admin_reserved_streams;
  s.streams = std::make_unique<StreamLimiter>(stream_caps, options_.upload_idle_timeout);
  spdlog::info("streams: at most {}, {} per caller, the last {} kept for admins",
               s.streams->max_streams(), s.streams->max_per_caller(),
               s.streams->admin_reserved());
  ServingGate::Options gate_options;
  gate_options.concurrency = options_.serving_concurrency > 0 ? options_.serving_concurrency
                                                             : 2 * AvailableCpus();
  gate_options.max_waiting = options_.serving_queue;
  s.gate = std::make_unique<ServingGate>(gate_options);
  spdlog::info("serving: {} Assign/Predict computations at once, up to {} more waiting",
               gate_options.concurrency, gate_options.max_waiting);
  Batcher::Options batch_options;
  batch_options.max_rows = options_.batch_max_rows;
  batch_options.max_delay = options_.batch_max_delay;
  s.batcher = std::make_unique<Batcher>(batch_options, s.gate.get());
  if (batch_options.max_rows > 1) {
    spdlog::info("serving: calls of fewer than {} rows on one model are computed together "
                 "(waiting at most {} us for company)",
                 batch_options.max_rows, absl::ToInt64Microseconds(batch_options.max_delay));
  }
  ServiceDeps deps;
  deps.gate = s.gate.get();
  deps.batcher = s.batcher.get();
  deps.datasets = s.datasets.get();
  deps.jobs = s.jobs.get();
  deps.models = s.models.get();
  deps.streams = s.streams.get();
  deps.data_dir = options_.data_dir;
  deps.max_message_bytes = options_.max_message_bytes;
  deps.stream_idle_timeout = options_.stream_idle_timeout;
  deps.metrics = s.metrics.get();
  deps.auth = s.auth.get();
  s.services = MakeServices(std::move(deps));
  for (auto& svc : s.services) builder.RegisterService(svc.get());
  {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
    creators.push_back(MakeParseFailureStatusFactory());
    if (s.metrics) creators.push_back(s.metrics->MakeInterceptorFactory());
    if (options_.auth_reflection) creators.push_back(MakeReflectionGuardFactory(s.auth.get()));
    if (!creators.empty()) builder.experimental().SetInterceptorCreators(std::move(creators));
  }
  if (s.metrics) {
    JobManager* jobs = s.jobs.get();
    ModelRegistry* models = s.models.get();
    StreamLimiter* streams = s.streams.get();
    s.metrics->AddProbe("dendro_job_queue_depth", "Jobs waiting in the queue.",
                        [jobs] { return jobs->GetStats().queued; });
    s.metrics->AddProbe("dendro_jobs_running", "Jobs running now.",
                        [jobs] { return jobs->GetStats().running; });
    s.metrics->AddProbe("dendro_job_threads", "Threads each job may use (--threads).",
                        [] { return DefaultThreads(); });
    s.metrics->AddProbe("dendro_model_cache_entries", "Models held in the load cache.",
                        [models] { return models->CacheStats().entries; });
    s.metrics->AddProbe("dendro_model_cache_bytes",
                        "Bytes charged to the models in the load cache (their artifact files).",
                        [models] { return models->CacheStats().bytes; });
    s.metrics->AddProbe("dendro_model_cache_capacity_bytes",
                        "Bound on dendro_model_cache_bytes (--model_cache_mb).",
                        [models] { return models->CacheStats().capacity; });
    s.metrics->AddCounterProbe("dendro_model_cache_hits_total",
                               "Model loads answered from the cache.",
                               [models] { return models->CacheStats().hits; });
    s.metrics->AddCounterProbe("dendro_model_cache_misses_total",
                               "Model loads that read the model's files.",
                               [models] { return models->CacheStats().misses; });
    s.metrics->AddCounterProbe("dendro_model_cache_evictions_total",
                               "Models dropped from the cache to make room for others.",
                               [models] { return models->CacheStats().evictions; });
    s.metrics->AddProbe("dendro_open_streams", "Streaming RPCs holding a slot.",
                        [streams] { return streams->open_streams(); });
    ServingGate* gate = s.gate.get();
    Batcher* batcher = s.batcher.get();
    s.metrics->AddProbe("dendro_serving_computing",
                        "Assign/Predict computations running now (at most "
                        "--serving_concurrency).",
                        [gate] { return gate->stats().computing; });
    s.metrics->AddProbe("dendro_serving_waiting",
                        "Assign/Predict calls waiting for a computing slot (at most "
                        "--serving_queue).",
                        [gate] { return gate->stats().waiting; });
    s.metrics->AddCounterProbe("dendro_serving_refused_total",
                               "Assign/Predict calls refused because the line was full.",
                               [gate] { return gate->stats().refused; });
    s.metrics->AddCounterProbe("dendro_serving_expired_total",
                               "Assign/Predict calls dropped uncomputed: their deadline passed "
                               "while they waited.",
                               [gate, batcher] {
                                 return gate->stats().expired + batcher->stats().expired;
                               });
    s.metrics->AddCounterProbe("dendro_serving_batches_total",
                               "Assign/Predict evaluations that answered two or more calls "
                               "together (--batch_max_rows).",
                               [batcher] { return batcher->stats().batches; });
    s.metrics->AddCounterProbe("dendro_serving_batched_calls_total",
                               "Assign/Predict calls answered by such an evaluation.",
                               [batcher] { return batcher->stats().batched_calls; });
    s.metrics->AddProbe("dendro_serving_batch_waiting",
                        "Assign/Predict calls in batches that are not computing yet.",
                        [batcher] { return batcher->stats().waiting; });
    DENDRO_RETURN_IF_ERROR(s.metrics->Serve(options_.metrics_listen));
  }
  s.grpc_server = builder.BuildAndStart();
  if (!s.grpc_server || s.port == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", options_.listen,
        " (is another server using the port? see the log above)"));
  }
  if (!options_.health_listen.empty()) {
    // A second server with no services of its own: gRPC gives it the
    // default health service (and reflection, guarded like the main port's),
    // nothing else.
    grpc::ServerBuilder hb;
    if (options_.auth_reflection) {
      std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> guard;
      guard.push_back(MakeReflectionGuardFactory(s.auth.get()));
      hb.experimental().SetInterceptorCreators(std::move(guard));
    }
    int health_port = 0;
    hb.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    hb.AddListeningPort(options_.health_listen, grpc::InsecureServerCredentials(), &health_port);
    s.health_server = hb.BuildAndStart();
    if (!s.health_server || health_port == 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", options_.health_listen, " (--health_listen)"));
    }
    spdlog::info("health checks (plaintext) on port {}", health_port);
  }
  if (!options_.http_listen.empty()) {  // the web console (server/http_console.h)
    HttpConsoleOptions hopts;
    hopts.listen = options_.http_listen;
    hopts.data_dir = options_.data_dir;
    hopts.max_message_bytes = options_.max_message_bytes;
    hopts.limits = options_.http_limits;
    hopts.tls_cert_file = options_.tls_cert_file;
    hopts.tls_key_file = options_.tls_key_file;
    hopts.tls_client_ca_file = options_.tls_client_ca_file;
    hopts.allow_insecure = options_.allow_insecure;
    s.http = std::make_unique<HttpConsole>(
        hopts, HttpConsoleDeps{s.datasets.get(), s.jobs.get(), s.models.get(), s.auth.get(),
                               s.gate.get(), s.batcher.get()});
    DENDRO_RETURN_IF_ERROR(s.http->Start());
  }
  DENDRO_RETURN_IF_ERROR(s.jobs->Start());
  SetServing(true);
  spdlog::info("dendrod serving on port {} (data dir {})", s.port, options_.data_dir);
  if (s.metrics) spdlog::info("metrics on port {} at /metrics", s.metrics->port());
  return absl::OkStatus();
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
    std::lock_guard<std::mutex> lock(s.mu);
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
    std::lock_guard<std::mutex> lock(s.mu);
    s.abandoned = true;
    spdlog::error("shutdown complete with abandoned jobs (recorded as interrupted)");
    return false;
  }
  spdlog::info("shutdown complete");
  return true;
}

}  // namespace dendro::server
