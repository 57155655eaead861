// Crash-safe file replacement.
//
// Every file Dendro persists is written as: create "<path>.tmp.<random>" in
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
absl::Status ReadFileToString(const std::string& path, std::string* out);

// Incremental atomic writer for large files (uploads). Append() any number of
// times, then Commit() to publish or Abandon() (also the destructor's action)
// to delete the temporary file. Not thread-safe.
class AtomicFileWriter {
 public:
  static absl::Status Open(const std::string& path, AtomicFileWriter* out);
  AtomicFileWriter() = default;
  ~AtomicFileWriter();
  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) noexcept;

  absl::Status Append(std::string_view bytes);
  // Overwrites bytes at `offset` (which must already have been written).
  absl::Status WriteAt(int64_t offset, std::string_view bytes);
  int64_t size() const { return size_; }
  absl::Status Commit();
  void Abandon();

 private:
  int fd_ = -1;
  int64_t size_ = 0;
  std::string path_;
  std::string tmp_path_;
};

// Creates `dir` and its parents (like mkdir -p).
absl::Status MakeDirs(const std::string& dir);

}  // namespace dendro

#endif  // DENDRO_CORE_IO_ATOMIC_FILE_H_
