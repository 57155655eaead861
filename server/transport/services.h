// gRPC adapters: translate dendro.v1 requests into calls on the stores and
// the job manager, and absl::Status into grpc::Status. No algorithm logic
// lives here.
#ifndef DENDRO_SERVER_TRANSPORT_SERVICES_H_
#define DENDRO_SERVER_TRANSPORT_SERVICES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/api/batcher.h"
#include "server/api/serving_gate.h"
#include "server/base/elastic_pool.h"
#include "server/jobs/job_manager.h"
#include "server/models/model_registry.h"
#include "server/observability/metrics.h"
#include "server/security/auth.h"
#include "server/storage/dataset_store.h"
#include "server/transport/stream_limiter.h"

namespace grpc {
class Service;
}

namespace dendro::server {

struct ServiceDeps {
  DatasetStore* datasets;
  JobManager* jobs;
  ModelRegistry* models;
  // Caps concurrent streams (and WaitJob calls), per caller too; times out
  // idle uploads and tree downloads (its own idle timeout).
  StreamLimiter* streams;
  // How long a prediction stream may send no request, or a job watch be sent
  // nothing, before the server ends it; also the longest a WaitJob waits.
  absl::Duration stream_idle_timeout = absl::Minutes(5);
  // Paths under it are cut from every message sent to a client.
  std::string data_dir;
  // The largest response a unary call may return (the server's send limit).
  int64_t max_message_bytes = 64 << 20;
  // Identifies callers and applies the rule table (never null).
  const Authenticator* auth = nullptr;
  // Optional (null when metrics are off).
  ServerMetrics* metrics = nullptr;
  // Bounds Assign and Predict computations and their waiting line (null:
  // no bound).
  ServingGate* gate = nullptr;
  // Coalesces small Assign/Predict calls (null: each alone).
  Batcher* batcher = nullptr;
  // Threads for the unary Assign and Predict calls that must wait for their
  // turn (null: they wait on gRPC's callback threads). Those calls' handlers
  // run on gRPC's callback threads, which must not block: a call that can
  // compute at once does so there; the others move here, where they wait at
  // the serving gate or in a batch. It must outlive the gRPC server.
  ElasticPool* waiting = nullptr;
};

// The three dendro.v1 services, ready to register with a ServerBuilder.
std::vector<std::unique_ptr<grpc::Service>> MakeServices(ServiceDeps deps);

// Fully qualified service names, for health status.
std::vector<std::string> ServiceNames();

// The methods served by gRPC's callback API, as "/dendro.v1.ModelService/Predict".
std::vector<std::string> CallbackMethodNames();

}  // namespace dendro::server

#endif  // DENDRO_SERVER_TRANSPORT_SERVICES_H_
