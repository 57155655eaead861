#include "core/io/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/common/crash_point.h"
#include "core/common/status_macros.h"
#include "core/io/posix_error.h"

namespace dendro {
namespace {

using io_internal::OpenForReading;
using io_internal::PosixError;

constexpr size_t kBufferSize = size_t{1} << 20;
// Linux transfers at most 0x7ffff000 bytes per call; ask for no more.
constexpr size_t kMaxIo = size_t{1} << 30;

std::atomic<uint64_t> g_tmp_counter{0};

// This machine's name, for temporary file names ("host" if unknown).
const std::string& HostName() {
  static const std::string name = [] {
    char buf[256] = {0};
    if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return std::string("host");
    return std::string(buf);
  }();
  return name;
}

absl::Status WriteFully(int fd, std::string_view bytes, const std::string& path) {
  const char* p = bytes.data();
  size_t n = bytes.size();
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min(n, kMaxIo));
    if (w < 0) {
      if (errno == EINTR) continue;
      return PosixError(path, "write", errno);
    }
    if (w == 0) return PosixError(path, "write", EIO);
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::Status PWriteFully(int fd, std::string_view bytes, int64_t offset,
                         const std::string& path) {
  const char* p = bytes.data();
  size_t n = bytes.size();
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, std::min(n, kMaxIo), static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      return PosixError(path, "pwrite", errno);
    }
    if (w == 0) return PosixError(path, "pwrite", EIO);
    p += w;
    n -= static_cast<size_t>(w);
    offset += w;
  }
  return absl::OkStatus();
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

absl::Status WriteFileAtomic(const std::string& path, std::string_view contents) {
  AtomicFileWriter writer;
  absl::Status s = AtomicFileWriter::Open(path, &writer);
  if (!s.ok()) return s;
  s = writer.Append(contents);
  if (!s.ok()) return s;
  return writer.Commit();
}

absl::Status ReadFileToString(const std::string& path, std::string* out) {
  out->clear();
  struct stat st;
  DENDRO_ASSIGN_OR_RETURN(const int fd, OpenForReading(path, &st));
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, not a file"));
  }
  // st_size is a hint only (it is 0 for /proc files); read until EOF.
  size_t capacity = S_ISREG(st.st_mode) ? static_cast<size_t>(st.st_size) + 1 : 4096;
  size_t used = 0;
  out->resize(capacity);
  while (true) {
    if (used == out->size()) out->resize(out->size() * 2);
    const ssize_t r = ::read(fd, &(*out)[used], std::min(out->size() - used, kMaxIo));
    if (r < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      out->clear();
      return PosixError(path, "read", err);
    }
    if (r == 0) break;
    used += static_cast<size_t>(r);
  }
  ::close(fd);
  out->resize(used);
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Open(const std::string& path, AtomicFileWriter* out,
                                    Durability durability) {
  out->Abandon();
  if (path.empty()) return absl::InvalidArgumentError("empty file path");
  if (path.back() == '/') {
    return absl::InvalidArgumentError(absl::StrCat(path, ": names a directory, not a file"));
  }
  // Host and pid: unique among the processes that may share a directory on
  // a network volume.
  const std::string prefix = absl::StrCat(path, ".tmp.", HostName(), ".", ::getpid(), ".");
  // A stale temporary file from an earlier process with the same pid is
  // possible (after a crash); skip over it.
  for (int attempt = 0; attempt < 1000; ++attempt) {
    std::string tmp = absl::StrCat(prefix, g_tmp_counter.fetch_add(1));
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      out->fd_ = fd;
      out->size_ = 0;
      out->flushed_ = 0;
      out->durability_ = durability;
      out->buffer_.clear();
      out->path_ = path;
      out->tmp_path_ = std::move(tmp);
      return absl::OkStatus();
    }
    if (errno == EINTR || errno == EEXIST) continue;
    return PosixError(path, absl::StrCat("create temporary file ", tmp), errno);
  }
  return absl::AlreadyExistsError(
      absl::StrCat(path, ": could not find an unused temporary file name ", prefix, "*"));
}

AtomicFileWriter::~AtomicFileWriter() { Abandon(); }

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      size_(std::exchange(other.size_, 0)),
      flushed_(std::exchange(other.flushed_, 0)),
      durability_(other.durability_),
      buffer_(std::move(other.buffer_)),
      path_(std::move(other.path_)),
      tmp_path_(std::move(other.tmp_path_)) {
  other.buffer_.clear();
  other.path_.clear();
  other.tmp_path_.clear();
}

AtomicFileWriter& AtomicFileWriter::operator=(AtomicFileWriter&& other) noexcept {
  if (this != &other) {
    Abandon();
    fd_ = std::exchange(other.fd_, -1);
    size_ = std::exchange(other.size_, 0);
    flushed_ = std::exchange(other.flushed_, 0);
    durability_ = other.durability_;
    buffer_ = std::move(other.buffer_);
    path_ = std::move(other.path_);
    tmp_path_ = std::move(other.tmp_path_);
    other.buffer_.clear();
    other.path_.clear();
    other.tmp_path_.clear();
  }
  return *this;
}

absl::Status AtomicFileWriter::CheckOpen(const char* op) const {
  if (fd_ >= 0) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("AtomicFileWriter::", op, "(", path_,
                   "): writer is not open (never opened, committed, abandoned or failed)"));
}

absl::Status AtomicFileWriter::Fail(absl::Status status) {
  Abandon();
  return status;
}

absl::Status AtomicFileWriter::Flush() {
  if (buffer_.empty()) return absl::OkStatus();
  absl::Status s = WriteFully(fd_, buffer_, tmp_path_);
  buffer_.clear();
  return s;
}

absl::Status AtomicFileWriter::Append(std::string_view bytes) {
  if (absl::Status s = CheckOpen("Append"); !s.ok()) return s;
  if (buffer_.size() + bytes.size() <= kBufferSize) {
    if (buffer_.capacity() < kBufferSize) buffer_.reserve(kBufferSize);
    buffer_.append(bytes.data(), bytes.size());
  } else {
    if (absl::Status s = Flush(); !s.ok()) return Fail(std::move(s));
    if (bytes.size() >= kBufferSize) {
      if (absl::Status s = WriteFully(fd_, bytes, tmp_path_); !s.ok()) return Fail(std::move(s));
    } else {
      buffer_.append(bytes.data(), bytes.size());
    }
  }
  size_ += static_cast<int64_t>(bytes.size());
  KickWriteback();
  return absl::OkStatus();
}

void AtomicFileWriter::KickWriteback() {
  constexpr int64_t kWindow = int64_t{32} << 20;
  if (durability_ != Durability::kDurable) return;
  const int64_t on_disk = size_ - static_cast<int64_t>(buffer_.size());
  if (on_disk - flushed_ < kWindow) return;
  // Advisory: start write-back of the new range without waiting for it, so
  // the disk works while more data arrives. Errors surface at fsync.
  ::sync_file_range(fd_, flushed_, on_disk - flushed_, SYNC_FILE_RANGE_WRITE);
  flushed_ = on_disk;
}

absl::Status AtomicFileWriter::WriteAt(int64_t offset, std::string_view bytes) {
  if (absl::Status s = CheckOpen("WriteAt"); !s.ok()) return s;
  if (offset < 0 || offset > size_ || static_cast<int64_t>(bytes.size()) > size_ - offset) {
    return absl::OutOfRangeError(absl::StrCat(
        path_, ": WriteAt(offset ", offset, ", ", bytes.size(),
        " bytes) reaches past the ", size_, " bytes written so far"));
  }
  const int64_t buffer_start = size_ - static_cast<int64_t>(buffer_.size());
  if (offset >= buffer_start) {  // Entirely inside the unwritten buffer.
    std::memcpy(&buffer_[static_cast<size_t>(offset - buffer_start)], bytes.data(),
                bytes.size());
    return absl::OkStatus();
  }
  if (absl::Status s = Flush(); !s.ok()) return Fail(std::move(s));
  if (absl::Status s = PWriteFully(fd_, bytes, offset, tmp_path_); !s.ok()) {
    return Fail(std::move(s));
  }
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() {
  if (absl::Status s = CheckOpen("Commit"); !s.ok()) return s;
  if (absl::Status s = Flush(); !s.ok()) return Fail(std::move(s));
  const bool durable = durability_ == Durability::kDurable;
  if (durable && ::fsync(fd_) != 0) return Fail(PosixError(tmp_path_, "fsync", errno));
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0 && errno != EINTR) {
    return Fail(PosixError(tmp_path_, "close", errno));
  }
  CrashPoint("file.before_rename", path_.substr(path_.rfind('/') + 1));
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    return Fail(PosixError(path_, absl::StrCat("rename ", tmp_path_, " to it"), errno));
  }
  tmp_path_.clear();
  buffer_ = std::string();
  return durable ? SyncDirectory(DirName(path_)) : absl::OkStatus();
}

void AtomicFileWriter::Abandon() {
  if (fd_ >= 0) ::close(std::exchange(fd_, -1));
  if (!tmp_path_.empty()) {
    ::unlink(tmp_path_.c_str());
    tmp_path_.clear();
  }
  buffer_ = std::string();
  size_ = 0;
}

absl::Status SyncDirectory(const std::string& dir) {
  int fd;
  do {
    fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return PosixError(dir, "open directory for fsync", errno);
  int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems cannot fsync a directory; there is nothing more to do.
  if (rc != 0 && err != EINVAL && err != ENOTSUP) {
    return PosixError(dir, "fsync directory", err);
  }
  return absl::OkStatus();
}

absl::Status MakeDirs(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("MakeDirs: empty directory path");
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    const std::string prefix = dir.substr(0, pos);
    if (prefix.empty() || prefix.back() == '/') continue;  // "//" or leading "/"
    if (::mkdir(prefix.c_str(), 0777) == 0) continue;
    const int err = errno;
    struct stat st;
    if (::stat(prefix.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) continue;
      return absl::FailedPreconditionError(
          absl::StrCat(prefix, ": exists and is not a directory (creating ", dir, ")"));
    }
    return PosixError(prefix, absl::StrCat("mkdir (creating ", dir, ")"), err);
  }
  return absl::OkStatus();
}

}  // namespace dendro
