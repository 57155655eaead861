// ModelTable: the registry's in-memory view of model names, their versions
// and labels, so that resolving a reference on the serving path (Predict,
// Assign, GetTree...) asks no database.
//
// A name is held once it has been asked for (filled from the catalogue on a
// miss), whole: every version and label of it, read in one catalogue call.
// Who keeps it current (see ModelRegistry):
//   * this process's own writes refresh the name before they are answered,
//     so a version deleted here is never served after the delete returned;
//   * writes by other processes sharing the catalogue (PostgreSQL) arrive
//     as notifications (Catalogue::WatchModelChanges) and refresh the name;
//     a periodic reconciliation re-reads every held name in case one was
//     lost.
//
// Ordering: each refresh takes a ticket before it reads the catalogue, and
// a name keeps the ticket of the read it holds. A refresh whose ticket is
// older than the one held is discarded, so a slow read that started before
// a write can never put back what the write removed. Thread-safe; lookups
// take a shared lock and copy one pointer.
#ifndef DENDRO_SERVER_MODELS_MODEL_TABLE_H_
#define DENDRO_SERVER_MODELS_MODEL_TABLE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/common/mutex.h"
#include "server/catalogue/catalogue.h"

namespace dendro::server {

class ModelTable {
 public:
  using Entry = std::shared_ptr<const StoredModel>;

  // The version `label` (when set) or `version` (0: the newest) of `name`
  // names, or NOT_FOUND worded as the catalogue words it; nullopt when the
  // table does not hold `name` (the caller asks the catalogue).
  std::optional<absl::StatusOr<Entry>> Find(const std::string& name, int64_t version,
                                            const std::string& label) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // A ticket for a read of the catalogue about to start.
  uint64_t NextTicket() ABSL_LOCKS_EXCLUDED(mu_);

  // (name, version) pairs the table held and no longer does.
  using Dropped = std::vector<std::pair<std::string, int64_t>>;

  // Installs what a read with `ticket` found for `name`: every version of it
  // (empty when it has none, which removes the name). Ignored when the table
  // already holds a newer read of the name, or when `held_only` and the name
  // is not held. Returns whether it was installed; adds the versions it
  // dropped to `dropped` (when not null).
  bool Install(const std::string& name, std::vector<StoredModel> versions, uint64_t ticket,
               bool held_only = false, Dropped* dropped = nullptr) ABSL_LOCKS_EXCLUDED(mu_);

  // Installs a read of every model for the names the table holds; held
  // names absent from it are removed.
  void InstallAll(std::vector<StoredModel> all, uint64_t ticket, Dropped* dropped = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Stops holding `name` (the next lookup asks the catalogue), whatever was
  // read for it before `ticket`.
  void Forget(const std::string& name, uint64_t ticket) ABSL_LOCKS_EXCLUDED(mu_);

  // Whether `name` is held now.
  bool Holds(const std::string& name) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Name {
    uint64_t ticket = 0;                 // of the read this came from
    std::map<int64_t, Entry> versions;   // ascending
    absl::flat_hash_map<std::string, int64_t> labels;
  };

  // Whether a read with `ticket` of `name` is newer than what the table
  // knows of it.
  bool NewerLocked(const std::string& name, uint64_t ticket) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void InstallLocked(const std::string& name, std::vector<StoredModel> versions, uint64_t ticket,
                     Dropped* dropped) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<std::string, Name> names_ ABSL_GUARDED_BY(mu_);
  // The newest ticket with which any name was removed: a read older than it
  // may not add a name that is not held (it might be one removed since).
  uint64_t removed_floor_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_MODELS_MODEL_TABLE_H_
