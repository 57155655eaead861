// ModelRegistry: versioned, persisted fitted models.
//
// A model is (name, version) with versions 1, 2, ... per name, assigned when
// a job's result is committed. Its files live under the artifact prefix
// models/<name>/<random id> (see server/storage/artifact_store.h), published before
// the metadata row that points at them. References resolve through an
// in-memory table of names, versions and labels (server/models/model_table.h), so
// serving asks no database; loaded models are kept in a ModelCache bounded
// in bytes, keyed by (name, version), and reached only through the table, so
// a version deleted or a label moved is never served from the cache once
// the table knows. The table learns this process's writes before they are
// answered, and other replicas' through StartWatching.
//
// Stable cluster ids (core/diff/stable_ids.h). Commit numbers the nodes of
// a name's first version 0 .. n-1 and matches every later version to the
// newest one before it: through their shared leaves when the method's
// leaves are given classes (Method::leaves_are_classes), else through the
// points of a shared dataset lineage (a dataset and its appended
// generations); versions that share neither get new ids. The ids are stored
// with the version (stable_ids.json, checksummed with its other files) and
// its metadata says what the match found (stable_ids_basis,
// stable_ids_previous_version, stable_ids_kept, stable_ids_new,
// stable_ids_next; stable_ids_note when the match could not be made).
#ifndef DENDRO_SERVER_MODELS_MODEL_REGISTRY_H_
#define DENDRO_SERVER_MODELS_MODEL_REGISTRY_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/diff/stable_ids.h"
#include "server/catalogue/catalogue.h"
#include "server/methods/method.h"
#include "server/models/model_cache.h"
#include "server/models/model_table.h"
#include "server/storage/artifact_store.h"

namespace dendro::server {

// Model names: 1-128 characters of [A-Za-z0-9._-], not starting with '.'.
absl::Status ValidateModelName(const std::string& name);
// Version labels: 1-64 characters of [A-Za-z0-9._-], starting with a letter,
// and not "latest" (which the CLI reads as the newest version).
absl::Status ValidateLabel(const std::string& label);

// A loaded model and its registry entry (shared with the model table: no
// copy per call).
struct LoadedModel {
  std::shared_ptr<const FittedModel> model;
  std::shared_ptr<const StoredModel> entry;
  // The ids of model->tree()'s nodes; for versions stored before stable ids
  // were kept, their node ids (FirstStableIds).
  std::shared_ptr<const StableIds> stable_ids;
  const v1::Model& info() const { return entry->model; }
};

// The node ids a served JSON tree carries (WriteJson's `stable_ids`): `ids`'
// for the refined tree, none for the unrefined one (whose nodes they do not
// name) or without ids.
inline absl::Span<const int64_t> ServedStableIds(const StableIds* ids, bool unrefined) {
  if (unrefined || ids == nullptr) return {};
  return absl::MakeConstSpan(ids->node);
}

class ModelRegistry {
 public:
  // `cache_bytes` > 0 bounds the memory of loaded models kept for reuse.
  // `artifacts` and `catalogue` must outlive the registry.
  ModelRegistry(ArtifactStore* artifacts, Catalogue* catalogue, int64_t cache_bytes);
  ~ModelRegistry();

  // Where other processes share the catalogue, follows their model changes
  // (Catalogue::WatchModelChanges), re-reading every held name at least
  // every `reconcile`. Does nothing on a catalogue only this process writes.
  // Call once, before serving.
  void StartWatching(absl::Duration reconcile);
  // Stops following them (joins the listener); idempotent. Before calling
  // this again, no StartWatching may run concurrently.
  void StopWatching() { watch_.reset(); }

  // Saves `model`'s artifacts and, in one metadata transaction, records the
  // new version and marks `job` SUCCEEDED with it, if lease `lease_token`
  // still holds the job (0: no lease check; see Catalogue::CommitModel).
  // Returns the stored Model; on any error the artifacts are removed.
  absl::StatusOr<v1::Model> Commit(const FittedModel& model, v1::Job job, int64_t lease_token);

  // By version (0 = latest) or label; both set is InvalidArgument.
  absl::StatusOr<v1::Model> Get(const v1::ModelRef& ref);
  // The loaded model (cached) and its registry entry.
  absl::StatusOr<LoadedModel> Load(const v1::ModelRef& ref);
  absl::StatusOr<int> Delete(const std::string& name, int64_t version);
  absl::StatusOr<v1::Model> SetLabel(const std::string& name, const std::string& label,
                                     int64_t version);
  absl::StatusOr<int64_t> DeleteLabel(const std::string& name, const std::string& label);
  // Labels exempt their versions from the name's retention policy. The
  // version `label` of `name` points at now, if moving the label to
  // `new_version` (0: the latest; kRemoveLabel: removing it) would take that
  // exemption away while the name has a policy; nullopt when it would not
  // (no such label yet, no policy, or the label stays where it is).
  static constexpr int64_t kRemoveLabel = -1;
  absl::StatusOr<std::optional<int64_t>> RetentionExemptionLost(const std::string& name,
                                                                const std::string& label,
                                                                int64_t new_version);
  // Returns how many versions the new policy removed.
  absl::StatusOr<int> SetRetention(const std::string& name, int64_t keep_versions);
  absl::StatusOr<Page<v1::Model>> List(const std::string& name, int64_t after_seq, int limit) {
    return catalogue_->ListModels(name, after_seq, limit);
  }
  // Removes model artifacts no metadata row points at (where the store has
  // an orphan grace, only those unchanged for that long). Removes nothing,
  // and fails, if the catalogue cannot be read.
  absl::Status RemoveOrphans();
  ModelCache::Stats CacheStats() const { return cache_.stats(); }

 private:
  // The stable ids of `model`, a new version of `name` fitted on
  // `dataset_id`, and the metadata that says how they were found. Never
  // fails: what cannot be matched gets new ids.
  struct StableIdsOutcome {
    StableIds ids;
    std::map<std::string, std::string> metadata;
  };
  StableIdsOutcome StableIdsFor(const std::string& name, const FittedModel& model,
                                const std::string& dataset_id);
  // `model`'s ids matched to `previous`'s (new ids from `next` on), and the
  // basis of the match. FailedPrecondition when the versions cannot be
  // compared (another method, unrelated datasets), else CarryStableIds'
  // errors; the message says why, for stable_ids_note.
  struct CarriedIds {
    StableIdMatch match;
    const char* basis;
  };
  absl::StatusOr<CarriedIds> CarryFromPrevious(const LoadedModel& previous,
                                               const FittedModel& model, const std::string& lineage,
                                               int64_t next);
  // The first generation of `dataset_id`'s lineage (itself when it has none
  // or is gone).
  std::string LineageOf(const std::string& dataset_id);
  // Drops removed versions from the cache and removes their artifacts.
  void RemoveFiles(const std::string& name, const std::vector<StoredModel>& removed);
  // The table's entry for `ref`, read from the catalogue when the table
  // does not hold the name or lacks the version or label asked for.
  absl::StatusOr<ModelTable::Entry> Resolve(const v1::ModelRef& ref);
  // Reads `name` from the catalogue into the table (held_only: only if the
  // table holds it) and returns the read. Called after every write to the
  // name and on every notification of one. If the read fails the name is
  // forgotten, so nothing such a change may have touched is served from
  // the table.
  absl::StatusOr<std::vector<StoredModel>> Refresh(const std::string& name,
                                                   bool held_only = false);
  void Reconcile();
  void DropFromCache(const ModelTable::Dropped& dropped);

  ArtifactStore* const artifacts_;
  Catalogue* catalogue_;
  ModelCache cache_;
  ModelTable table_;
  // Last: stopped (its thread joined) before the table and cache go.
  std::unique_ptr<Catalogue::ChangeWatch> watch_;
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_MODELS_MODEL_REGISTRY_H_
