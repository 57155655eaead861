#include "server/storage/disk_guard.h"

#include <sys/statvfs.h>

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dendro::server {
namespace {

constexpr int64_t kHeadroomBytes = int64_t{64} << 20;

}  // namespace

int64_t RoundUpMiB(int64_t bytes) { return (bytes + (int64_t{1} << 20) - 1) >> 20; }

absl::StatusOr<MinFreeDisk> ParseMinFreeDisk(const std::string& text) {
  MinFreeDisk min;
  if (text.empty()) return min;
  if (text.back() == '%') {
    if (!absl::SimpleAtod(text.substr(0, text.size() - 1), &min.percent) ||
        !(min.percent >= 0 && min.percent < 100)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--min_free_disk: '", text, "' is not a percentage in [0, 100)"));
    }
    return min;
  }
  int64_t mib = 0;
  if (!absl::SimpleAtoi(text, &mib) || mib < 0 || mib > (int64_t{1} << 43)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--min_free_disk: '", text, "' is neither a size in MiB nor a percentage like 5%"));
  }
  min.bytes = mib << 20;
  return min;
}

std::optional<DiskGuard::Space> DiskGuard::Measure() const {
  struct statvfs fs;
  if (::statvfs(path_.c_str(), &fs) != 0) return std::nullopt;
  const int64_t block = static_cast<int64_t>(fs.f_frsize);
  Space space;
  space.free_bytes = static_cast<int64_t>(fs.f_bavail) * block;
  space.total_bytes = static_cast<int64_t>(fs.f_blocks) * block;
  space.floor_bytes = std::max({kHeadroomBytes, min_.bytes,
                                static_cast<int64_t>(space.total_bytes * (min_.percent / 100.0))});
  return space;
}

absl::Status DiskGuard::Check(int64_t bytes, const std::string& what) const {
  const std::optional<Space> space = Measure();
  if (!space.has_value()) return absl::OkStatus();  // the write will tell
  if (space->free_bytes - bytes >= space->floor_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%s: the server's disk has %d MiB free%s; it keeps at least %d MiB free "
      "(dendrod --min_free_disk); delete datasets or models to free space",
      what, RoundUpMiB(space->free_bytes),
      bytes > 0 ? absl::StrCat(" and this needs ", RoundUpMiB(bytes), " MiB") : std::string(),
      RoundUpMiB(space->floor_bytes)));
}

}  // namespace dendro::server
