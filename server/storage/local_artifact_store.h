// LocalArtifactStore: artifacts as files under a directory that one dendrod
// owns (it holds the directory's exclusive lock, see server/server.cc).
//
// A key maps to <root>/<key>. Objects are written by AtomicFileWriter (a
// temporary file, fsync, rename, fsync of the directory); a durable commit
// also fsyncs every directory from the object's up to the root, so a crash
// cannot lose a name the catalogue already points at. Since no other process
// writes under the root, an unlisted object is a crash's leftover and a
// sweep may remove it at once (orphan_grace() is zero).
//
// Remove() renames the object into <root>/trash/, which takes it off its key,
// out of List() and Bytes() at once, and a background thread deletes it
// there. Deleting a file of gigabytes drops its cached pages, which takes a
// good part of a second (0.3 s for 5 GB here) that a job ending on a
// transient dataset, or a DeleteDataset call, should not wait for. Trash a
// crash left behind is emptied by Maintain() at the next start. The
// destructor waits for the deletions queued so far.
#ifndef DENDRO_SERVER_STORAGE_LOCAL_ARTIFACT_STORE_H_
#define DENDRO_SERVER_STORAGE_LOCAL_ARTIFACT_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/storage/artifact_store.h"

namespace dendro::server {

class LocalArtifactStore : public ArtifactStore {
 public:
  // `root` need not exist yet: the first write creates it.
  explicit LocalArtifactStore(std::string root);
  ~LocalArtifactStore() override;

  absl::StatusOr<std::unique_ptr<ArtifactWriter>> Create(const std::string& key,
                                                         Durability durability) override;
  // A hard link from a temporary name beside the key, renamed onto it at
  // Commit().
  absl::StatusOr<std::unique_ptr<ArtifactWriter>> Link(const std::string& key, int fd) override;
  absl::StatusOr<std::unique_ptr<StagedDirectory>> Stage(const std::string& prefix) override;
  absl::StatusOr<std::string> LocalPath(const std::string& key) override;
  int64_t Bytes(const std::string& key) override;
  absl::Status Remove(const std::string& key) override;
  absl::StatusOr<std::vector<ArtifactEntry>> List(const std::string& prefix) override;
  absl::Duration orphan_grace() const override { return absl::ZeroDuration(); }
  // Empties the trash.
  absl::Status Maintain() override;

 protected:
  // The directory removed objects are moved into, and whether a key is in it.
  static constexpr char kTrash[] = "trash";
  static bool IsTrashKey(const std::string& key);
  // When a trash entry was made, from its name; false for a name that is not
  // a trash name.
  static bool RemovedAt(const std::string& name, absl::Time* when);

  const std::string& root() const { return root_; }
  std::string PathFor(const std::string& key) const { return root_ + "/" + key; }
  // fsyncs each directory from `dir` up to and including the root.
  absl::Status SyncUpToRoot(const std::string& dir) const;
  // Renames `key` into the trash under a new name ("<unix seconds>-<random
  // id>-<key with '/' as '+'>", so an entry's age comes from its name: a
  // rename does not change file times). Returns the entry's path, or "" if
  // there was nothing at `key`.
  absl::StatusOr<std::string> MoveToTrash(const std::string& key);
  // Deletes a path, trash entry or not, at once.
  absl::Status RemoveNow(const std::string& key);

 private:
  class Writer;
  class LinkWriter;
  class Staged;
  class Purger;

  const std::string root_;
  const std::unique_ptr<Purger> purger_;
};

// The newest modification time of `path` or of anything under it; false if
// `path` cannot be read. Shared by the stores' List and by tests.
bool NewestChange(const std::string& path, absl::Time* newest);

}  // namespace dendro::server

#endif  // DENDRO_SERVER_STORAGE_LOCAL_ARTIFACT_STORE_H_
