// ServerMetrics: dendrod's Prometheus instruments and their HTTP endpoint.
//
// Exposition is prometheus-cpp's (text format over its civetweb pull
// Exposer at /metrics). Three kinds of series:
//   * per RPC, counted by a gRPC server interceptor (every method, including
//     health and reflection): grpc_server_handled_total{grpc_service,
//     grpc_method, grpc_code}, grpc_server_handling_seconds (histogram),
//     grpc_server_in_flight;
//   * per HTTP request, reported by the HTTP listener:
//     http_server_requests_total{method, route, code},
//     http_server_request_duration_seconds{route} (histogram), where route
//     is the endpoint's pattern ("/api/v1/jobs/{id}"), never the raw path;
//   * events the server reports: dendro_upload_bytes_total,
//     dendro_jobs_finished_total{method, state}, dendro_job_duration_seconds
//     {method} (histogram, start to end of the run),
//     dendro_job_queue_wait_seconds{method} (histogram, submission to first
//     start), dendro_catalogue_seconds{op} (histogram of catalogue
//     operations);
//   * dendro_build_info{version, revision}, always 1;
//   * values read at scrape time from registered probes (queue depth,
//     running jobs, model cache entries/bytes/capacity and its hit, miss and
//     eviction counters, open streams) and from /proc/self
//     (process_resident_memory_bytes, process_cpu_seconds_total,
//     process_open_fds, process_start_time_seconds).
// Thread-safe. Must outlive the gRPC server it instruments.
#ifndef DENDRO_SERVER_OBSERVABILITY_METRICS_H_
#define DENDRO_SERVER_OBSERVABILITY_METRICS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "dendro/v1/dendro.pb.h"

namespace grpc::experimental {
class ServerInterceptorFactoryInterface;
}

namespace dendro::server {

class ServerMetrics {
 public:
  ServerMetrics();
  ~ServerMetrics();
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  // Serves /metrics on `listen` (HOST:PORT; port 0 picks a free one).
  absl::Status Serve(const std::string& listen);
  // The bound port once serving, else 0.
  int port() const;
  // Stops the HTTP endpoint (waiting for scrapes in progress); probes are
  // not called after this returns.
  void StopServing();

  // An interceptor factory for grpc::ServerBuilder that records every RPC.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeInterceptorFactory();

  // A gauge whose value is read from `probe` at each scrape. Call before
  // Serve().
  void AddProbe(const std::string& name, const std::string& help,
                std::function<double()> probe);
  // The same for a counter (`name` should end in _total; the probe's value
  // must never decrease).
  void AddCounterProbe(const std::string& name, const std::string& help,
                       std::function<double()> probe);

  void AddUploadBytes(int64_t bytes);
  // One catalogue (SQLite) operation and its duration.
  void CatalogueOp(const char* op, double seconds);
  // A job reached SUCCEEDED, FAILED or CANCELLED after running.
  void JobFinished(const v1::Job& job);
  // A job was claimed to run. Its wait from submission is recorded on its
  // first start only (a re-queued job's wait would include its earlier runs).
  void JobStarted(const v1::Job& job);
  // One HTTP request answered with `status` (`route`: the endpoint's
  // pattern, from a fixed set; see HttpRoute in server/transport).
  void HttpRequestFinished(const std::string& method, const std::string& route, int status,
                           double seconds);

  // The text exposition of everything above (what /metrics returns).
  std::string Render() const;

  // Recording one RPC (used by the interceptor).
  void RpcStarted();
  void RpcFinished(const std::string& full_method, int code, double seconds);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_OBSERVABILITY_METRICS_H_
