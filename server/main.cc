// dendrod: the Dendro model server.
#include <grpc/support/log.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "core/common/cpus.h"
#include "core/common/malloc_tuning.h"
#include "core/io/atomic_file.h"
#include "dendro/version.h"
#include "server/base/logging.h"
#include "server/base/memory.h"
#include "server/security/auth.h"
#include "server/server.h"
#include "server/storage/verify.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "HOST:PORT to serve gRPC on");
ABSL_FLAG(bool, verify, false,
          "do not serve: check every dataset's and model's files in --data_dir (and --catalog) "
          "against their recorded checksums, print the damaged ones, and exit 0 if all are "
          "intact, 1 if any is damaged, 2 if the check could not run");
ABSL_FLAG(std::string, data_dir, "./dendro-data",
          "directory for the metadata database, datasets and models");
ABSL_FLAG(std::string, catalog, "",
          "where datasets, jobs and models are recorded: empty for SQLite in --data_dir, or a "
          "postgresql://user@host:port/db URI (password from PGPASSWORD or PGPASSFILE, never "
          "in the URI)");
ABSL_FLAG(int, catalog_connections, 4,
          "with a PostgreSQL --catalog: connections this process keeps to it, i.e. catalogue "
          "transactions that may run at once (each replica has its own)");
ABSL_FLAG(int, threads, 0,
          "threads each job may use (0: the CPUs this process may run on, from its affinity "
          "mask and cgroup CPU quota)");
ABSL_FLAG(int, workers, 1, "jobs run at the same time (each uses all cores)");
ABSL_FLAG(int, queue_size, 64, "jobs that may wait; more are refused with RESOURCE_EXHAUSTED");
ABSL_FLAG(int, max_message_mb, 64, "largest gRPC message accepted or sent, in MiB");
ABSL_FLAG(int, drain_seconds, 30,
          "on SIGTERM, how long running jobs may finish (the process exits within "
          "--drain_seconds + --job_stop_seconds + 2 s)");
ABSL_FLAG(int, job_stop_seconds, 10,
          "after the drain, how long an interrupted job may take to stop before the process "
          "exits without it (it is re-queued)");
ABSL_FLAG(std::string, replica_id, "",
          "with a PostgreSQL --catalog: this replica's name among those sharing the catalogue "
          "and data directory (e.g. the pod name); the same name after a restart lets it "
          "re-queue its unfinished jobs at once (default: <hostname>-<random>)");
ABSL_FLAG(int, job_lease_seconds, 30,
          "a running job whose replica has not renewed its lease for this long (it died) is "
          "re-queued for another replica");
ABSL_FLAG(int, max_job_attempts, 3,
          "a job started this many times without finishing (the server went down under it) "
          "is FAILED instead of re-queued");
ABSL_FLAG(double, job_retention_days, 0,
          "finished job records older than this are removed (their models stay); 0 keeps them");
ABSL_FLAG(int64_t, max_job_memory_mb, 0,
          "estimated peak memory one job may need; larger specs are refused at submit "
          "(0: three quarters of the machine's or cgroup's memory)");
ABSL_FLAG(int64_t, model_cache_mb, 0,
          "memory for loaded models kept between requests, least recently used dropped first "
          "(0: a quarter of the machine's or cgroup's memory)");
ABSL_FLAG(int64_t, malloc_keep_mb, 64,
          "free memory each allocator arena keeps for reuse, with blocks up to 32 MiB served "
          "from the arenas: matrix products then reuse their buffers instead of faulting in "
          "fresh pages on every call (0: TuneAllocator's 4 MiB / 32 MiB thresholds, "
          "server/base/memory.h)");
ABSL_FLAG(int, job_nice, 10,
          "nice value (0-19) of the threads that run jobs: a fit yields the CPU to requests "
          "when both want it, and uses every core when nobody is calling");
ABSL_FLAG(bool, job_sched_idle, false,
          "run job threads under SCHED_IDLE: a fit then uses only cores that no other thread of "
          "the container (or, outside one, of the machine) wants, which keeps request latency "
          "near its idle level during fits; for a replica in a container of its own (the "
          "Kubernetes manifests set it). Off: --job_nice alone shares the cores");
ABSL_FLAG(int, serving_concurrency, 0,
          "Assign and Predict computations (over gRPC and HTTP, each PredictStream message "
          "too) that run at once; more wait in line (0: twice the CPUs available)");
ABSL_FLAG(int, serving_queue, 1024,
          "calls that may wait for an Assign/Predict computing slot; more are refused at once "
          "with RESOURCE_EXHAUSTED, and a waiting call whose deadline passes is dropped "
          "uncomputed (DEADLINE_EXCEEDED)");
ABSL_FLAG(int64_t, batch_max_rows, 64,
          "concurrent Assign/Predict calls on one model version of fewer rows than this are "
          "computed together, up to this many rows at once (0 or 1: each call alone)");
ABSL_FLAG(int64_t, batch_max_delay_us, 0,
          "how long a batch waits for more calls before it asks for a computing slot, in "
          "microseconds (0: never waits; calls that arrive while others compute still share "
          "a batch)");
ABSL_FLAG(int, model_table_reconcile_seconds, 30,
          "with a PostgreSQL catalogue: other replicas' model changes arrive as notifications "
          "within milliseconds; the in-memory table of names, versions and labels is also "
          "re-read this often in case one was lost");
ABSL_FLAG(int64_t, max_dataset_mb, 65536, "largest dataset an upload may declare, in MiB");
ABSL_FLAG(std::string, min_free_disk, "",
          "free space the data volume keeps: uploads and jobs are refused below it "
          "(a percentage like 5%, or MiB; at least 64 MiB in any case)");
ABSL_FLAG(std::vector<std::string>, import_dirs, {},
          "comma-separated absolute directories whose float32 .npy files clients on this host "
          "may import by path instead of uploading (the importer role; none: imports are "
          "refused)");
ABSL_FLAG(int, max_streams, 64,
          "concurrent streaming calls (uploads, job watches, prediction and tree streams) and "
          "WaitJob calls; more are refused with RESOURCE_EXHAUSTED");
ABSL_FLAG(int, max_streams_per_caller, 0,
          "of --max_streams, how many one caller (a key's principal; with authentication off, "
          "one connection) may hold (0: half of --max_streams)");
ABSL_FLAG(int, admin_reserved_streams, 4,
          "of --max_streams, how many only admin callers may take, so that an admin still gets "
          "a stream when the others hold the rest (at most a quarter of --max_streams)");
ABSL_FLAG(int, upload_idle_seconds, 60,
          "an upload that sends nothing, or a tree download that takes nothing, for this long "
          "is cancelled (CANCELLED)");
ABSL_FLAG(int, stream_idle_seconds, 300,
          "a prediction stream that sends no request (or takes no answer), or a job watch whose "
          "job has not changed, for this long is ended (DEADLINE_EXCEEDED); also the longest a "
          "WaitJob call waits");
ABSL_FLAG(std::string, metrics_listen, "",
          "HOST:PORT to serve Prometheus metrics on at /metrics (off when empty)");
ABSL_FLAG(std::string, http_listen, "",
          "HOST:PORT to serve the read-only web console and JSON endpoints on (off when "
          "empty; same keys as gRPC; HTTPS with --tls_cert; see docs/http.md)");
ABSL_FLAG(int64_t, http_max_body_mb, 64,
          "--http_listen: largest request body, in MiB; a larger Content-Length is refused "
          "(413) before the body is read, and a body must declare its length (411)");
ABSL_FLAG(int, http_max_header_kb, 16,
          "--http_listen: largest request line and headers together, in KiB (431 above it)");
ABSL_FLAG(int, http_threads, 8,
          "--http_listen: requests served at once (health checks have two workers of "
          "their own)");
ABSL_FLAG(int, http_header_timeout_seconds, 10,
          "--http_listen: a request's line and headers (and the TLS handshake) must arrive "
          "within this time of its first byte, or the connection is closed; no worker waits "
          "for them");
ABSL_FLAG(int, http_read_timeout_seconds, 10,
          "--http_listen: a request whose body sends nothing for this long is dropped");
ABSL_FLAG(int, http_write_timeout_seconds, 10,
          "--http_listen: an answer the client takes nothing of for this long is dropped");
ABSL_FLAG(int, http_keepalive_seconds, 5,
          "--http_listen: an idle kept-alive connection is closed after this long");
ABSL_FLAG(int, http_max_connections, 512,
          "--http_listen: connections that may wait for their request headers at once; "
          "past it the one waiting longest is closed");
ABSL_FLAG(std::string, http_allowed_hosts, "",
          "--http_listen: comma-separated Host names (name, or name:port) accepted besides "
          "loopback names and the listen address; the Host check is on when authentication "
          "is off, or whenever this is set (health checks are exempt)");
ABSL_FLAG(std::string, auth_keys, "",
          "keys file: lines '<sha256-hex of key>|cn:<client cert CN>  <name>  <role>'; "
          "reloaded on SIGHUP (see 'dendro keys hash')");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA that client certificates must chain to (mutual TLS; needs --tls_cert)");
ABSL_FLAG(bool, allow_insecure, false,
          "serve a non-loopback address without --auth_keys or --tls_client_ca");
ABSL_FLAG(bool, auth_reflection, false,
          "gRPC reflection answers only callers with a key or client certificate (by default "
          "it is open, like health checks)");
ABSL_FLAG(std::string, health_listen, "",
          "HOST:PORT of an extra plaintext port serving only gRPC health checks (for probes "
          "when --tls_cert or --auth_keys is on)");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain; enables TLS with --tls_key");
ABSL_FLAG(std::string, tls_key, "", "PEM private key");
ABSL_FLAG(std::string, port_file, "",
          "if set, write the bound port here once serving (for --listen HOST:0)");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error");
ABSL_FLAG(std::string, log_format, "text",
          "text, or json: one object per line with time, level, message, request_id, "
          "principal, rpc and job_id");

namespace {

void LogFromGrpc(gpr_log_func_args* args) {
  const spdlog::level::level_enum level =
      args->severity == GPR_LOG_SEVERITY_ERROR   ? spdlog::level::warn
      : args->severity == GPR_LOG_SEVERITY_INFO  ? spdlog::level::info
                                                  : spdlog::level::debug;
  spdlog::log(level, "grpc: {}", args->message);
}

// Blocks SIGTERM/SIGINT/SIGHUP in every thread and waits for them on a
// dedicated one, so they are handled in ordinary code rather than a signal
// handler: SIGHUP reloads the keys file, the others shut down.
void WaitForSignalThenShutdown(dendro::server::DendroServer* server, sigset_t set) {
  int sig = 0;
  for (;;) {
    sigwait(&set, &sig);
    if (sig != SIGHUP) break;
    spdlog::info("received SIGHUP: reloading the keys file");
    server->ReloadKeys().IgnoreError();  // logged; the old keys stay in force
  }
  spdlog::info("received signal {}", sig);
  if (!server->Shutdown()) {
    // A job ignored the interrupt; its record says so and it re-runs at the
    // next start. Its thread must not keep the process alive.
    spdlog::shutdown();
    std::_Exit(1);
  }
}

// dendrod's own flags (those defined in this file), sorted, with their
// defaults. absl's --help looks for flags by file name heuristics and exits
// 1; this lists exactly ours and exits 0.
void PrintHelp() {
  std::cout << "usage: dendrod [--listen HOST:PORT] [--data_dir DIR] [flags]\n"
               "The Dendro model server. Flags may be spelt with '-' or '_'.\n\n";
  std::vector<absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::EndsWith(flag->Filename(), "server/main.cc")) flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(),
            [](const auto* a, const auto* b) { return a->Name() < b->Name(); });
  for (const absl::CommandLineFlag* f : flags) {
    std::string def = f->DefaultValue();
    if (f->IsOfType<std::string>()) def = absl::StrCat("\"", def, "\"");
    std::cout << "  --" << f->Name() << " (default " << def << ")\n      " << f->Help()
              << "\n";
  }
  std::cout << "  --auth_rules\n      print the least role each RPC needs, then exit\n"
               "  --help, --version\n";
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h" || a == "--helpfull") {
      PrintHelp();
      return 0;
    }
    if (a == "--auth_rules" || a == "--auth-rules") {
      // The rule table, one "<method> <least role>" line per RPC.
      for (const dendro::server::RpcRule& rule : dendro::server::RpcRules()) {
        std::cout << rule.method << " " << dendro::server::RoleName(rule.role) << "\n";
      }
      return 0;
    }
    if (a == "--version") {
      std::cout << "dendrod " << DENDRO_VERSION << " (" << DENDRO_GIT_REVISION << ")\n";
      return 0;
    }
  }
  // Idle OpenMP threads spinning between parallel regions steal the cores
  // that other jobs and RPC threads need; make them sleep unless the
  // operator chose otherwise.
  setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/0);
  dendro::server::TuneAllocator();
  absl::SetProgramUsageMessage("dendrod --listen HOST:PORT --data-dir DIR");
  // Accept --data-dir as well as --data_dir (and so on for every flag).
  std::vector<std::string> args(argv, argv + argc);
  std::vector<char*> argv2;
  for (std::string& a : args) {
    if (a.rfind("--", 0) == 0) {
      const size_t end = std::min(a.find('='), a.size());
      std::replace(a.begin() + 2, a.begin() + end, '-', '_');
    }
    argv2.push_back(a.data());
  }
  absl::ParseCommandLine(static_cast<int>(argv2.size()), argv2.data());
  if (absl::Status s = dendro::server::SetupLogging(absl::GetFlag(FLAGS_log_format),
                                                    absl::GetFlag(FLAGS_log_level));
      !s.ok()) {
    std::cerr << "dendrod: " << s.message() << "\n";
    return 2;
  }
  // gRPC's own messages go through the same logger (and format).
  gpr_set_log_function(&LogFromGrpc);
  if (absl::GetFlag(FLAGS_verify)) {
    return dendro::server::RunVerify(absl::GetFlag(FLAGS_data_dir), absl::GetFlag(FLAGS_catalog),
                                     std::cout);
  }

  if (const int64_t keep_mb = absl::GetFlag(FLAGS_malloc_keep_mb); keep_mb < 0) {
    std::cerr << "dendrod: --malloc_keep_mb must be >= 0\n";
    return 2;
  } else if (keep_mb > 0 && !dendro::KeepFreedMemory(keep_mb << 20)) {
    spdlog::warn("--malloc_keep_mb: this C library has no such setting; its defaults apply");
  }

  // A peer that closes a connection mid-answer must cost that answer, not
  // the process: writes on any socket (TLS ones included, which go through
  // write()) then fail with EPIPE instead of raising SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
#ifdef NDEBUG
  // Abseil's mutexes (ours, and gRPC's inside every call) record each lock
  // order in a global graph to report deadlocks, unless told not to: a
  // cost on every call that a release build does not pay. Debug and
  // sanitizer builds keep the checks.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  dendro::server::ServerOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.data_dir = absl::GetFlag(FLAGS_data_dir);
  options.catalog = absl::GetFlag(FLAGS_catalog);
  options.catalog_connections = absl::GetFlag(FLAGS_catalog_connections);
  options.workers = absl::GetFlag(FLAGS_workers);
  if (absl::GetFlag(FLAGS_threads) < 0) {
    fprintf(stderr, "dendrod: --threads must be >= 0\n");
    return 2;
  }
  // Resolved once: "all" would otherwise read the cgroup's files on every
  // call that asks (each Predict does).
  dendro::SetDefaultThreads(absl::GetFlag(FLAGS_threads) > 0 ? absl::GetFlag(FLAGS_threads)
                                                             : dendro::AvailableCpus());
  spdlog::info("jobs use {} thread(s); {} CPU(s) available to this process",
               dendro::DefaultThreads(), dendro::AvailableCpus());
  options.queue_capacity = absl::GetFlag(FLAGS_queue_size);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_mb) << 20;
  options.drain_grace = absl::Seconds(absl::GetFlag(FLAGS_drain_seconds));
  options.job_stop_timeout = absl::Seconds(absl::GetFlag(FLAGS_job_stop_seconds));
  options.max_job_attempts = absl::GetFlag(FLAGS_max_job_attempts);
  options.replica_id = absl::GetFlag(FLAGS_replica_id);
  options.job_lease = absl::Seconds(absl::GetFlag(FLAGS_job_lease_seconds));
  options.job_retention = absl::Hours(24 * absl::GetFlag(FLAGS_job_retention_days));
  options.max_job_memory_bytes = absl::GetFlag(FLAGS_max_job_memory_mb) << 20;
  options.max_dataset_bytes = absl::GetFlag(FLAGS_max_dataset_mb) << 20;
  options.model_cache_bytes = absl::GetFlag(FLAGS_model_cache_mb) << 20;
  options.serving_concurrency = absl::GetFlag(FLAGS_serving_concurrency);
  options.job_nice = absl::GetFlag(FLAGS_job_nice);
  options.job_sched_idle = absl::GetFlag(FLAGS_job_sched_idle);
  options.serving_queue = absl::GetFlag(FLAGS_serving_queue);
  options.batch_max_rows = absl::GetFlag(FLAGS_batch_max_rows);
  options.batch_max_delay = absl::Microseconds(absl::GetFlag(FLAGS_batch_max_delay_us));
  options.model_table_reconcile =
      absl::Seconds(absl::GetFlag(FLAGS_model_table_reconcile_seconds));
  options.max_streams = absl::GetFlag(FLAGS_max_streams);
  options.max_streams_per_caller = absl::GetFlag(FLAGS_max_streams_per_caller);
  options.admin_reserved_streams = absl::GetFlag(FLAGS_admin_reserved_streams);
  options.stream_idle_timeout = absl::Seconds(absl::GetFlag(FLAGS_stream_idle_seconds));
  options.min_free_disk = absl::GetFlag(FLAGS_min_free_disk);
  options.import_dirs = absl::GetFlag(FLAGS_import_dirs);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.health_listen = absl::GetFlag(FLAGS_health_listen);
  options.http_listen = absl::GetFlag(FLAGS_http_listen);
  options.http_limits.max_body_bytes = absl::GetFlag(FLAGS_http_max_body_mb) << 20;
  options.http_limits.max_header_bytes = int64_t{absl::GetFlag(FLAGS_http_max_header_kb)} << 10;
  options.http_limits.threads = absl::GetFlag(FLAGS_http_threads);
  options.http_limits.header_timeout_seconds = absl::GetFlag(FLAGS_http_header_timeout_seconds);
  options.http_limits.read_timeout_seconds = absl::GetFlag(FLAGS_http_read_timeout_seconds);
  options.http_limits.write_timeout_seconds = absl::GetFlag(FLAGS_http_write_timeout_seconds);
  options.http_limits.keep_alive_seconds = absl::GetFlag(FLAGS_http_keepalive_seconds);
  options.http_limits.max_pending_connections = absl::GetFlag(FLAGS_http_max_connections);
  for (absl::string_view host : absl::StrSplit(absl::GetFlag(FLAGS_http_allowed_hosts), ',',
                                               absl::SkipWhitespace())) {
    options.http_limits.allowed_hosts.emplace_back(absl::StripAsciiWhitespace(host));
  }
  options.auth_keys_file = absl::GetFlag(FLAGS_auth_keys);
  options.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  options.allow_insecure = absl::GetFlag(FLAGS_allow_insecure);
  options.auth_reflection = absl::GetFlag(FLAGS_auth_reflection);
  options.upload_idle_timeout = absl::Seconds(absl::GetFlag(FLAGS_upload_idle_seconds));
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  if (options.workers < 1 || options.queue_capacity < 1 || options.max_message_bytes <= 0 ||
      options.max_job_attempts < 1 || options.max_dataset_bytes <= 0 || options.max_streams < 1 ||
      options.upload_idle_timeout <= absl::ZeroDuration() ||
      options.stream_idle_timeout <= absl::ZeroDuration() ||
      options.max_streams_per_caller < 0 || options.admin_reserved_streams < 0 ||
      options.job_stop_timeout < absl::ZeroDuration() || options.max_job_memory_bytes < 0 ||
      options.model_cache_bytes < 0 || options.catalog_connections < 1 ||
      options.model_table_reconcile <= absl::ZeroDuration() ||
      options.serving_concurrency < 0 || options.serving_queue < 0 ||
      options.job_nice < 0 || options.job_nice > 19 ||
      !(absl::GetFlag(FLAGS_job_retention_days) >= 0)) {
    fprintf(stderr,
            "dendrod: --workers, --queue_size, --max_message_mb, --max_job_attempts, "
            "--max_dataset_mb, --max_streams, --upload_idle_seconds, --stream_idle_seconds, "
            "--model_table_reconcile_seconds and --catalog_connections must be >= 1; "
            "--job_stop_seconds, --max_job_memory_mb, --model_cache_mb, "
            "--max_streams_per_caller, --admin_reserved_streams, --serving_concurrency, "
            "--serving_queue and --job_retention_days >= 0; --job_nice in [0, 19]\n");
    return 2;
  }

  dendro::server::DendroServer server(options);
  absl::Status s = server.Start();
  if (!s.ok()) {
    fprintf(stderr, "dendrod: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  if (const std::string pf = absl::GetFlag(FLAGS_port_file); !pf.empty()) {
    absl::Status w = dendro::WriteFileAtomic(pf, absl::StrCat(server.port(), "\n"));
    if (!w.ok()) {
      fprintf(stderr, "dendrod: %s\n", std::string(w.message()).c_str());
      return 1;
    }
  }
  std::thread signals(WaitForSignalThenShutdown, &server, set);
  server.Wait();
  signals.join();
  return 0;
}
