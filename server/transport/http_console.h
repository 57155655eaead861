// HttpConsole: dendrod's optional HTTP listener (--http_listen), serving
// the read-only web console and JSON endpoints (docs/http.md).
//
//   GET  /                          the console (index.html; /console/* assets)
//   GET  /v2, /v2/health/{live,ready}                        open, like gRPC health
//   GET  /api/v1/{datasets,jobs,models}[/...]                reader
//   GET  /v2/models/{name}[/versions/{v}][/ready]            reader
//   POST /v2/models/{name}[/versions/{v}]/infer              reader (Assign, Predict)
//
// Callers are identified exactly as on the gRPC port (server/security/auth.h): an
// `Authorization: Bearer <key>` header, or with mutual TLS the client
// certificate's common name; each data endpoint is checked against the rule
// of the RPC it mirrors, so a role that may call GetTree may fetch the tree.
// The console's own files carry no data and are served to anyone; the page
// asks for a key and sends it with every request it makes.
//
// With --tls_cert/--tls_key the listener serves HTTPS with the same
// certificate (and, with --tls_client_ca, requires client certificates);
// otherwise plain HTTP. Without authentication it refuses a non-loopback
// address unless --allow_insecure, as the gRPC port does.
//
// Every answer that is not 2xx has a JSON body {"error": "...", "code":
// "<gRPC code name>"}; messages go through ForClient, so no server path
// leaves the process. The handlers call the same in-process stores as the
// gRPC services (through JsonApi) and run on cpp-httplib's thread pool.
// Start, Stop and SetReady may be called from any thread; Stop is
// idempotent and must run before the stores are destroyed.
#ifndef DENDRO_SERVER_TRANSPORT_HTTP_CONSOLE_H_
#define DENDRO_SERVER_TRANSPORT_HTTP_CONSOLE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "server/api/batcher.h"
#include "server/api/serving_gate.h"
#include "server/jobs/job_manager.h"
#include "server/models/model_registry.h"
#include "server/observability/metrics.h"
#include "server/security/auth.h"
#include "server/storage/dataset_store.h"
#include "server/transport/http_limits.h"

namespace dendro::server {

struct HttpConsoleOptions {
  std::string listen;  // HOST:PORT; port 0 picks a free one
  // Paths under it are cut from every message (see ForClient).
  std::string data_dir;
  // Answers (and the float32 data of an inference) are bounded like gRPC
  // messages.
  int64_t max_message_bytes = 64 << 20;
  HttpLimits limits;
  // PEM paths as for the gRPC port; all empty for plain HTTP.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  bool allow_insecure = false;
};

struct HttpConsoleDeps {
  DatasetStore* datasets = nullptr;
  JobManager* jobs = nullptr;
  ModelRegistry* models = nullptr;
  const Authenticator* auth = nullptr;  // never null
  ServingGate* gate = nullptr;          // shared with gRPC; null: no bound
  Batcher* batcher = nullptr;           // shared with gRPC; null: no batching
  // Counts and times every request answered (by route and status); null:
  // no metrics.
  ServerMetrics* metrics = nullptr;
};

class HttpConsole {
 public:
  HttpConsole(HttpConsoleOptions options, HttpConsoleDeps deps);
  ~HttpConsole();  // Stop()s
  HttpConsole(const HttpConsole&) = delete;
  HttpConsole& operator=(const HttpConsole&) = delete;

  // Binds and starts serving on a thread of its own.
  absl::Status Start();
  // The port bound (after Start).
  int port() const;
  // What /v2/health/ready answers: 200 when true, 503 when false (the
  // server sets it with its gRPC health status).
  void SetReady(bool ready);
  // Stops accepting, finishes in-flight requests and joins the threads.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_TRANSPORT_HTTP_CONSOLE_H_
