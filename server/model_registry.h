// ModelRegistry: versioned, persisted fitted models.
//
// A model is (name, version) with versions 1, 2, ... per name, assigned when
// a job's result is committed. Artifacts live in
// <data_dir>/models/<name>/<random id>/, written and fsynced before the
// metadata row that points at them; loaded models are cached in memory.
#ifndef DENDRO_SERVER_MODEL_REGISTRY_H_
#define DENDRO_SERVER_MODEL_REGISTRY_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "server/metadata_store.h"
#include "server/methods/method.h"

namespace dendro::server {

// Model names: 1-128 characters of [A-Za-z0-9._-], not starting with '.'.
absl::Status ValidateModelName(const std::string& name);

class ModelRegistry {
 public:
  ModelRegistry(std::string data_dir, MetadataStore* meta);

  // Saves `model`'s artifacts and, in one metadata transaction, records the
  // new version and marks `job` SUCCEEDED with it. Returns the stored Model.
  absl::StatusOr<v1::Model> Commit(const FittedModel& model, v1::Job job);

  absl::StatusOr<v1::Model> Get(const std::string& name, int64_t version);
  // The loaded model (cached) and its registry entry.
  absl::StatusOr<std::pair<std::shared_ptr<const FittedModel>, v1::Model>> Load(
      const std::string& name, int64_t version);
  absl::StatusOr<int> Delete(const std::string& name, int64_t version);
  absl::StatusOr<Page<v1::Model>> List(const std::string& name, int64_t after_seq, int limit) {
    return meta_->ListModels(name, after_seq, limit);
  }
  // Removes artifact directories no metadata row points at. Removes
  // nothing, and fails, if the catalogue cannot be read.
  absl::Status RemoveOrphans();
  // Models held in the load cache.
  int CachedModels();

 private:
  std::string data_dir_;
  MetadataStore* meta_;
  std::mutex mu_;
  std::map<std::pair<std::string, int64_t>, std::shared_ptr<const FittedModel>> cache_;
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_MODEL_REGISTRY_H_
