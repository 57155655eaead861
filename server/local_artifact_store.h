// LocalArtifactStore: artifacts as files under a directory that one dendrod
// owns (it holds the directory's exclusive lock, see server/server.cc).
//
// A key maps to <root>/<key>. Objects are written by AtomicFileWriter (a
// temporary file, fsync, rename, fsync of the directory); a durable commit
// also fsyncs every directory from the object's up to the root, so a crash
// cannot lose a name the catalogue already points at. Since no other process
// writes under the root, an unlisted object is a crash's leftover and a
// sweep may remove it at once (orphan_grace() is zero), and removal deletes
// the files at once.
#ifndef DENDRO_SERVER_LOCAL_ARTIFACT_STORE_H_
#define DENDRO_SERVER_LOCAL_ARTIFACT_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "server/artifact_store.h"

namespace dendro::server {

class LocalArtifactStore : public ArtifactStore {
 public:
  // `root` need not exist yet: the first write creates it.
  explicit LocalArtifactStore(std::string root);

  absl::StatusOr<std::unique_ptr<ArtifactWriter>> Create(const std::string& key,
                                                         Durability durability) override;
  absl::StatusOr<std::unique_ptr<StagedDirectory>> Stage(const std::string& prefix) override;
  absl::StatusOr<std::string> LocalPath(const std::string& key) override;
  int64_t Bytes(const std::string& key) override;
  absl::Status Remove(const std::string& key) override;
  absl::StatusOr<std::vector<ArtifactEntry>> List(const std::string& prefix) override;
  absl::Duration orphan_grace() const override { return absl::ZeroDuration(); }
  absl::Status Maintain() override { return absl::OkStatus(); }

 protected:
  const std::string& root() const { return root_; }
  std::string PathFor(const std::string& key) const { return root_ + "/" + key; }
  // fsyncs each directory from `dir` up to and including the root.
  absl::Status SyncUpToRoot(const std::string& dir) const;

 private:
  class Writer;
  class Staged;

  const std::string root_;
};

// The newest modification time of `path` or of anything under it; false if
// `path` cannot be read. Shared by the stores' List and by tests.
bool NewestChange(const std::string& path, absl::Time* newest);

}  // namespace dendro::server

#endif  // DENDRO_SERVER_LOCAL_ARTIFACT_STORE_H_
