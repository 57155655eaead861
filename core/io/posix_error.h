// Internal to core/io: failed POSIX calls as absl::Status, and the open-and-stat
// that the readers share.
#ifndef DENDRO_CORE_IO_POSIX_ERROR_H_
#define DENDRO_CORE_IO_POSIX_ERROR_H_

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace dendro {
namespace io_internal {

// This Abseil's absl::string_view is not std::string_view; StrCat and friends
// need the conversion spelled out.
inline absl::string_view ToAbsl(std::string_view s) { return {s.data(), s.size()}; }

// "<path>: <what>: <strerror(err)>" with the status code that matches `err`
// (ENOENT -> NotFound, EACCES/EPERM -> PermissionDenied, ENOSPC ->
// ResourceExhausted, ...; see absl::ErrnoToStatusCode).
inline absl::Status PosixError(std::string_view path, std::string_view what, int err) {
  return absl::Status(absl::ErrnoToStatusCode(err),
                      absl::StrCat(ToAbsl(path), ": ", ToAbsl(what), ": ", std::strerror(err)));
}

// Opens `path` read-only (retrying on EINTR) and fills *st from the open
// descriptor: the descriptor, which the caller closes, or the open's or
// the stat's error (nothing is left open).
inline absl::StatusOr<int> OpenForReading(const std::string& path, struct stat* st) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return PosixError(path, "open", errno);
  if (::fstat(fd, st) != 0) {
    const int err = errno;
    ::close(fd);
    return PosixError(path, "stat", err);
  }
  return fd;
}

}  // namespace io_internal
}  // namespace dendro

#endif  // DENDRO_CORE_IO_POSIX_ERROR_H_
