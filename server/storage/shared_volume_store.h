// SharedVolumeStore: artifacts as files under a directory that several
// dendrod replicas share (a ReadWriteMany volume: NFS, CephFS, a cloud file
// store), each replica recording its objects in one shared catalogue.
//
// Writes are those of LocalArtifactStore; temporary names carry the host and
// the pid (core/io/atomic_file.h), so replicas never write the same file.
// Two things differ, because another replica may be in the middle of
// something this one cannot see:
//  - An object no catalogue row lists may be another replica's upload or
//    model save not yet recorded, so a sweep removes it only after nothing
//    under it has changed for orphan_grace() (an hour by default, far longer
//    than any write takes to be recorded).
//  - Removal is deferred. A network file system invalidates a file another
//    client deletes (reads fail with ESTALE, a mapping raises SIGBUS), so a
//    replica still reading a model or dataset that a second replica deletes
//    would fail or crash. Remove() renames the object into <root>/trash/ at
//    once, and trash older than the trash grace (ten minutes by default) is
//    deleted by Maintain() and by later removals. A reader that opened the
//    files before the rename keeps reading them.
#ifndef DENDRO_SERVER_STORAGE_SHARED_VOLUME_STORE_H_
#define DENDRO_SERVER_STORAGE_SHARED_VOLUME_STORE_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "core/common/mutex.h"
#include "server/storage/local_artifact_store.h"

namespace dendro::server {

class SharedVolumeStore : public LocalArtifactStore {
 public:
  static constexpr absl::Duration kDefaultOrphanGrace = absl::Hours(1);
  static constexpr absl::Duration kDefaultTrashGrace = absl::Minutes(10);

  explicit SharedVolumeStore(std::string root, absl::Duration orphan_grace = kDefaultOrphanGrace,
                             absl::Duration trash_grace = kDefaultTrashGrace);

  absl::Status Remove(const std::string& key) override;
  absl::Duration orphan_grace() const override { return orphan_grace_; }
  // Deletes trash entries older than the trash grace.
  absl::Status Maintain() ABSL_LOCKS_EXCLUDED(purge_mu_) override;

 private:
  const absl::Duration orphan_grace_;
  const absl::Duration trash_grace_;
  Mutex purge_mu_;  // one purge at a time in this process; guards no member
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_STORAGE_SHARED_VOLUME_STORE_H_
