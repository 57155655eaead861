// ArtifactStore: where the bytes of datasets and models live.
//
// Objects are named by keys: relative, '/'-separated paths such as
// "datasets/ds-1a2b3c4d5e6f/X.npy". A key that ends a path component early
// ("models/digits/m-3c4d") names everything under it, a prefix. The
// catalogue records keys, never absolute paths, and it records an object
// only after the store has made it durable.
//
// Every implementation keeps these invariants:
//  - a new object appears under its key only when its writer commits, and
//    then complete: a reader never sees a torn object;
//  - an object committed with Durability::kDurable survives a crash once
//    Commit() (or Publish()) returns, including the names that lead to it;
//  - a writer or staged directory destroyed before committing leaves nothing;
//  - Remove() is idempotent, and a removed object is never listed again.
//
// Methods save and load a model as a directory of files (FittedModel::Save,
// Method::Load). The store hands them a local directory to fill (Stage,
// then Publish) and a local path to read (LocalPath), so a store whose
// objects are not local files, an object store for instance, can copy them
// out and in without the methods or the services knowing.
//
// Two implementations: LocalArtifactStore (a directory one dendrod owns) and
// SharedVolumeStore (a directory that replicas share over NFS, CephFS or a
// cloud file store). Both are thread-safe.
#ifndef DENDRO_SERVER_STORAGE_ARTIFACT_STORE_H_
#define DENDRO_SERVER_STORAGE_ARTIFACT_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/io/atomic_file.h"

namespace dendro::server {

// A new object being streamed in. Not thread-safe.
class ArtifactWriter {
 public:
  virtual ~ArtifactWriter() = default;  // abandons the object unless committed
  virtual absl::Status Append(std::string_view bytes) = 0;
  // Bytes appended so far, and their checksum (server/storage/checksum.h).
  virtual int64_t size() const = 0;
  virtual std::string checksum() const = 0;
  // Publishes the object under its key. On an error nothing is published.
  virtual absl::Status Commit() = 0;
};

// A prefix being written as a directory of files. Not thread-safe.
class StagedDirectory {
 public:
  virtual ~StagedDirectory() = default;  // removes it unless published
  // A local directory, existing and empty, to write the files into.
  virtual const std::string& path() const = 0;
  // Makes the files durable under the prefix. On an error nothing is
  // published.
  virtual absl::Status Publish() = 0;
};

// One child of a listed prefix.
struct ArtifactEntry {
  std::string key;
  // The newest change anywhere under it, for sweeps (see orphan_grace()).
  absl::Time modified;
};

class ArtifactStore {
 public:
  virtual ~ArtifactStore() = default;

  // Starts a new object at `key`, which must not exist yet.
  virtual absl::StatusOr<std::unique_ptr<ArtifactWriter>> Create(const std::string& key,
                                                                 Durability durability) = 0;
  // Starts an object at `key` that is the open file `fd` itself, linked
  // under the key rather than copied: no bytes are written. Append() takes
  // the file's own bytes, front to back, only to count them (the checksum
  // is of the file itself, and may be computed beside the caller's work);
  // Commit() publishes the link, never durably (for transient objects). The
  // file must not change while the object exists. Unimplemented where the
  // store cannot link (the default); FailedPrecondition when this file
  // cannot be linked (another file system, or the kernel refuses): the
  // caller copies it instead.
  virtual absl::StatusOr<std::unique_ptr<ArtifactWriter>> Link(const std::string& key, int fd);
  // Starts a new prefix, written as a directory of files.
  virtual absl::StatusOr<std::unique_ptr<StagedDirectory>> Stage(const std::string& prefix) = 0;
  // A local file (for an object) or directory (for a prefix) holding the
  // committed bytes, readable until the key is removed.
  virtual absl::StatusOr<std::string> LocalPath(const std::string& key) = 0;
  // Total bytes under `key` (0 if absent).
  virtual int64_t Bytes(const std::string& key) = 0;
  // Removes an object or everything under a prefix.
  virtual absl::Status Remove(const std::string& key) = 0;
  // The children of `prefix` (e.g. "datasets" lists "datasets/ds-..."),
  // in no particular order; empty if there are none.
  virtual absl::StatusOr<std::vector<ArtifactEntry>> List(const std::string& prefix) = 0;

  // How long an object the catalogue does not list must have stayed
  // unchanged before a sweep may remove it: zero where only this process
  // writes, long where another replica may be writing one it has not
  // recorded yet.
  virtual absl::Duration orphan_grace() const = 0;
  // Housekeeping at start-up and now and then (e.g. emptying deferred
  // deletions). Never touches a listed object.
  virtual absl::Status Maintain() = 0;
};

// Keys are relative paths of [A-Za-z0-9._-] components, none of them "." or
// "..", without a leading or trailing '/'. Everything a store is given is
// checked against this.
absl::Status ValidateArtifactKey(std::string_view key);

}  // namespace dendro::server

#endif  // DENDRO_SERVER_STORAGE_ARTIFACT_STORE_H_
