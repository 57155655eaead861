// gRPC adapters: translate dendro.v1 requests into calls on the stores and
// the job manager, and absl::Status into grpc::Status. No algorithm logic
// lives here.
#ifndef DENDRO_SERVER_SERVICES_H_
#define DENDRO_SERVER_SERVICES_H_

#include <memory>
#include <vector>

#include "server/dataset_store.h"
#include "server/job_manager.h"
#include "server/model_registry.h"

namespace grpc {
class Service;
}

namespace dendro::server {

struct ServiceDeps {
  DatasetStore* datasets;
  JobManager* jobs;
  ModelRegistry* models;
};

// The three dendro.v1 services, ready to register with a ServerBuilder.
std::vector<std::unique_ptr<grpc::Service>> MakeServices(ServiceDeps deps);

// Fully qualified service names, for health status.
std::vector<std::string> ServiceNames();

}  // namespace dendro::server

#endif  // DENDRO_SERVER_SERVICES_H_
