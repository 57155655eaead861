// ImportRoots: the directories a same-host import may read (--import_dirs).
//
// A client on dendrod's host may name a .npy file instead of sending its
// bytes (DatasetService.ImportDataset). Only files under a directory the
// operator listed are read, and the check cannot be escaped:
//  - each directory is opened once, at start-up, and every file is opened
//    relative to that descriptor with openat2(RESOLVE_BENEATH |
//    RESOLVE_NO_MAGICLINKS), so "..", an absolute symlink or a relative one
//    that climbs out, and /proc's magic links all fail in the kernel's own
//    path walk, whatever the path looks like as text;
//  - a component swapped for a symlink between a check and the open cannot
//    matter: there is no separate check, and everything after the open
//    (type, size, mapping, checksum) goes through the opened descriptor;
//  - the open is non-blocking, so a FIFO or device cannot stall the call,
//    and anything but a regular file is refused after the open.
// A kernel without openat2 (before Linux 5.6) refuses every import, as does
// a server started without --import_dirs.
#ifndef DENDRO_SERVER_STORAGE_IMPORT_ROOTS_H_
#define DENDRO_SERVER_STORAGE_IMPORT_ROOTS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace dendro::server {

// An opened file to import. Owns the descriptor.
class ImportedFile {
 public:
  ImportedFile() = default;
  ImportedFile(int fd, int64_t size) : fd_(fd), size_(size) {}
  ~ImportedFile();
  ImportedFile(ImportedFile&& other) noexcept;
  ImportedFile& operator=(ImportedFile&& other) noexcept;
  ImportedFile(const ImportedFile&) = delete;
  ImportedFile& operator=(const ImportedFile&) = delete;

  int fd() const { return fd_; }
  int64_t size() const { return size_; }

 private:
  int fd_ = -1;
  int64_t size_ = 0;
};

class ImportRoots {
 public:
  // No directories: every import is refused.
  ImportRoots() = default;
  // Opens each of `dirs` (absolute paths to existing directories, resolved
  // to their real paths). Errors name the flag's value, at start-up.
  static absl::StatusOr<ImportRoots> Open(const std::vector<std::string>& dirs);
  ~ImportRoots();
  ImportRoots(ImportRoots&& other) noexcept;
  ImportRoots& operator=(ImportRoots&& other) noexcept;
  ImportRoots(const ImportRoots&) = delete;
  ImportRoots& operator=(const ImportRoots&) = delete;

  bool empty() const { return roots_.empty(); }
  // The directories, as resolved (for the start-up log).
  std::vector<std::string> paths() const;

  // Opens `path`, absolute as the client names it, read-only. Errors name
  // `path` and never a directory of the server's: FailedPrecondition when
  // this server imports nothing, PermissionDenied when `path` is not under
  // one of the directories (or leaves it on the way), NotFound, and
  // InvalidArgument for a path that is not absolute or not a regular file.
  absl::StatusOr<ImportedFile> OpenFile(const std::string& path) const;

 private:
  struct Root {
    std::string path;  // real path, no trailing '/' (except for "/")
    int fd = -1;       // O_PATH | O_DIRECTORY
  };
  void Close();
  std::vector<Root> roots_;
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_STORAGE_IMPORT_ROOTS_H_
