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

absl::Status DiskGuard::Check(int64_t bytes, const std::string& what) const {
  struct statvfs fs;
  if (::statvfs(path_.c_str(), &fs) != 0) return absl::OkStatus();  // the write will tell
  const int64_t block = static_cast<int64_t>(fs.f_frsize);
  const int64_t free_bytes = static_cast<int64_t>(fs.f_bavail) * block;
  const int64_t total = static_cast<int64_t>(fs.f_blocks) * block;
  const int64_t floor = std::max({kHeadroomBytes, min_.bytes,
                                  static_cast<int64_t>(total * (min_.percent / 100.0))});
  if (free_bytes - bytes >= floor) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%s: the server's disk has %d MiB free%s; it keeps at least %d MiB free "
      "(dendrod --min_free_disk); delete datasets or models to free space",
      what, RoundUpMiB(free_bytes),
      bytes > 0 ? absl::StrCat(" and this needs ", RoundUpMiB(bytes), " MiB") : std::string(),
      RoundUpMiB(floor)));
}

}  // namespace dendro::server
