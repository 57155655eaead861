// DendroServer: owns the stores, the job manager and the gRPC server.
//
// Start() opens (or creates) the data directory, recovers state, and begins
// serving; Shutdown() drains: health turns NOT_SERVING, running jobs get a
// grace period (see JobManager::Shutdown), then job watches and waits end and
// the other in-flight RPCs get what is left of the bound: Shutdown returns
// within drain_grace + job_stop_timeout + kShutdownMargin.
// Used by dendrod's main() and, in-process, by the server tests.
#ifndef DENDRO_SERVER_SERVER_H_
#define DENDRO_SERVER_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/methods/method.h"
#include "server/transport/http_limits.h"

namespace dendro::server {

struct ServerOptions {
  std::string listen = "127.0.0.1:50051";  // HOST:PORT; port 0 picks a free one
  std::string data_dir = "./dendro-data";
  // "" (SQLite in data_dir) or a postgresql:// URI; see OpenCatalogue (server/catalogue/open_catalogue.h).
  std::string catalog;
  int catalog_connections = 4;  // with PostgreSQL: connections of this process
  int workers = 1;
  int queue_capacity = 64;
  int max_job_attempts = 3;                     // see JobManager::Options
  // Lease holder name among replicas sharing a PostgreSQL catalogue (see
  // JobManager::Options); empty: "<hostname>-<random>", new at each start.
  // Ignored with SQLite, where the one server is always "local".
  std::string replica_id;
  absl::Duration job_lease = absl::Seconds(30);
  absl::Duration job_retention = absl::ZeroDuration();  // 0: keep finished jobs
  absl::Duration job_stop_timeout = absl::Seconds(10);
  int64_t max_job_memory_bytes = 0;             // 0: DefaultJobMemoryBytes()
  int64_t model_cache_bytes = 0;                // 0: DefaultJobMemoryBytes() / 3
  // With a shared catalogue: how often the in-memory model table re-reads
  // every name it holds, besides the change notifications.
  absl::Duration model_table_reconcile = absl::Seconds(30);
  int64_t max_dataset_bytes = int64_t{64} << 30;  // one upload's data + labels
  std::string min_free_disk;                    // "5%" or MiB; see DiskGuard
  // Directories whose .npy files same-host imports may read
  // (server/storage/import_roots.h); empty: imports are refused.
  std::vector<std::string> import_dirs;
  int max_streams = 64;                         // concurrent streaming RPCs
  // Assign/Predict computations at once (0: twice the CPUs) and calls that
  // may wait for one (server/api/serving_gate.h).
  int serving_concurrency = 0;
  // Nice value and SCHED_IDLE of job threads (JobManager::Options::nice,
  // idle_scheduling).
  int job_nice = 10;
  bool job_sched_idle = false;
  int serving_queue = 1024;
  // Dynamic batching of small Assign/Predict calls (server/api/batcher.h).
  int64_t batch_max_rows = 64;
  absl::Duration batch_max_delay = absl::ZeroDuration();
  int max_streams_per_caller = 0;               // 0: max_streams / 2 (see StreamLimiter)
  int admin_reserved_streams = 4;               // of max_streams, at most a quarter
  absl::Duration upload_idle_timeout = absl::Seconds(60);
  // A prediction stream's or job watch's idle limit, and WaitJob's longest wait.
  absl::Duration stream_idle_timeout = absl::Minutes(5);
  int max_message_bytes = 64 << 20;
  absl::Duration drain_grace = absl::Seconds(30);
  // HOST:PORT for Prometheus /metrics (port 0 picks one); empty: off.
  std::string metrics_listen;
  // HOST:PORT of a plaintext port serving only grpc.health.v1 (and
  // reflection), for probes that cannot present TLS or keys; empty: off.
  std::string health_listen;
  // HOST:PORT of the web console and JSON endpoints (server/transport/http_console.h;
  // port 0 picks one); empty: off.
  std::string http_listen;
  HttpLimits http_limits;  // the --http_* flags
  // TLS: both set to PEM file paths to serve TLS; both empty for plaintext.
  std::string tls_cert_file;
  std::string tls_key_file;
  // Authentication (see server/security/auth.h): the keys file, and a PEM CA that
  // client certificates must chain to (mutual TLS; needs the two above).
  // With neither, every caller is an anonymous admin, which is allowed only
  // on a loopback address unless allow_insecure.
  std::string auth_keys_file;
  std::string tls_client_ca_file;
  bool allow_insecure = false;
  // Reflection needs a known caller too (health checks stay open).
  bool auth_reflection = false;
  // Test hook, see JobManager::Options::resolve_method.
  std::function<absl::StatusOr<const Method*>(const v1::JobSpec&)> resolve_method;
};

// What a shutdown may take beyond drain_grace + job_stop_timeout: in-flight
// calls get at most this long once the jobs are done with (and the time
// their handlers take to notice a cancel).
inline constexpr absl::Duration kShutdownMargin = absl::Seconds(2);

class DendroServer {
 public:
  explicit DendroServer(ServerOptions options);
  ~DendroServer();

  absl::Status Start();
  // The port actually bound (useful with port 0).
  int port() const;
  // The metrics port actually bound; 0 when metrics are off.
  int metrics_port() const;
  // The web console's port actually bound; 0 when it is off.
  int http_port() const;
  // Re-reads the keys file (SIGHUP). On error the keys in force stay.
  absl::Status ReloadKeys();
  // Blocks until Shutdown() completes.
  void Wait();
  // Drains (see above). Returns false if a job ignored the interrupt past
  // job_stop_timeout: its record already says it was interrupted, but its
  // thread still runs, so the process must exit promptly (the server's
  // state is then deliberately kept alive, never freed under that thread).
  bool Shutdown();

 private:
  // Health status (overall and per service) on the main and health ports.
  void SetServing(bool serving);

  struct State;
  ServerOptions options_;
  std::unique_ptr<State> state_;
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_SERVER_H_
