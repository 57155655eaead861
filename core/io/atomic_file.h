// Crash-safe file replacement.
//
// Every file Dendro persists is written as: create "<path>.tmp.<host>.<pid>.<n>" in
// the same directory, write, fsync the file, rename over <path>, fsync the
// directory. A reader therefore sees either the old file or the complete new
// one, never a torn write.
#ifndef DENDRO_CORE_IO_ATOMIC_FILE_H_
#define DENDRO_CORE_IO_ATOMIC_FILE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace dendro {

// Writes `contents` to `path` atomically.
absl::Status WriteFileAtomic(const std::string& path, std::string_view contents);
// Replaces *out with the whole file. A directory is InvalidArgument; open and
// read errors map errno (NotFound, PermissionDenied, ...) and name the path.
absl::Status ReadFileToString(const std::string& path, std::string* out);

// How much a committed file must survive.
enum class Durability {
  // fsync the file before the rename and the directory after it: the file
  // survives a power loss once Commit() returns. While writing, dirty pages
  // are handed to the kernel for write-back every few tens of MiB so the
  // final fsync does not start from zero.
  kDurable,
  // No fsync: the rename is still atomic for readers, but a crash may lose
  // the file. For data that does not outlive the process anyway.
  kVolatile,
};

// Incremental atomic writer for large files (uploads). Append() any number of
// times, then Commit() to publish or Abandon() (also the destructor's action)
// to delete the temporary file. Not thread-safe.
//
// Small appends are coalesced in a 1 MiB buffer; large ones go straight to
// the file. Any I/O error abandons the writer (the temporary file is removed
// at once, freeing its space) and is returned; afterwards every call except
// Abandon() returns FailedPrecondition. `path` is not touched before
// Commit(). New files get mode 0666 & ~umask; an existing file at `path` is
// replaced, not modified (its permissions are not carried over).
class AtomicFileWriter {
 public:
  // Creates the temporary file next to `path` (whose directory must exist).
  // A writer already held in *out is abandoned first.
  static absl::Status Open(const std::string& path, AtomicFileWriter* out,
                           Durability durability = Durability::kDurable);
  AtomicFileWriter() = default;
  ~AtomicFileWriter();
  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) noexcept;

  absl::Status Append(std::string_view bytes);
  // Overwrites bytes at `offset` (which must already have been written:
  // offset + bytes.size() <= size(), else OutOfRange).
  absl::Status WriteAt(int64_t offset, std::string_view bytes);
  int64_t size() const { return size_; }
  // Flushes, fsyncs, renames over `path` and fsyncs the directory. On an error
  // before the rename the temporary file is deleted and `path` is untouched.
  absl::Status Commit();
  // Closes and deletes the temporary file; a no-op if there is none.
  void Abandon();

 private:
  absl::Status Flush();
  // Starts asynchronous write-back of what was written since the last call
  // once enough has accumulated (kDurable only).
  void KickWriteback();
  absl::Status Fail(absl::Status status);  // Abandon() and return `status`.
  absl::Status CheckOpen(const char* op) const;

  int fd_ = -1;
  int64_t size_ = 0;     // bytes appended so far (file + buffer_)
  int64_t flushed_ = 0;  // bytes handed to write-back so far
  Durability durability_ = Durability::kDurable;
  std::string buffer_;   // appended bytes not yet written to fd_
  std::string path_;
  std::string tmp_path_;
};

// Creates `dir` and its parents (like mkdir -p).
absl::Status MakeDirs(const std::string& dir);

// fsyncs the directory `dir`, making the creation, rename or removal of its
// entries durable. File systems that cannot fsync a directory are not an
// error.
absl::Status SyncDirectory(const std::string& dir);

}  // namespace dendro

#endif  // DENDRO_CORE_IO_ATOMIC_FILE_H_
