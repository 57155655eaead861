#include "server/sweep.h"

#include <sys/stat.h>

#include <filesystem>

#include "absl/time/clock.h"

namespace dendro::server {
namespace {

// Modification time of `path` in seconds since the epoch; false if unreadable.
bool MTime(const std::string& path, int64_t* seconds) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return false;
  *seconds = st.st_mtim.tv_sec;
  return true;
}

}  // namespace

bool QuietFor(const std::string& path, absl::Duration grace) {
  if (grace <= absl::ZeroDuration()) return true;
  const int64_t cutoff = absl::ToUnixSeconds(absl::Now() - grace);
  int64_t t = 0;
  if (!MTime(path, &t) || t >= cutoff) return false;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(path, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (!MTime(it->path().string(), &t) || t >= cutoff) return false;
  }
  return !ec;
}

}  // namespace dendro::server
