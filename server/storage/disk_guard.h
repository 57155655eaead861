// DiskGuard: keeps a share of the data volume free.
//
// Uploads and fits are refused with RESOURCE_EXHAUSTED while the volume
// holding the data directory has less free space than the floor (or, for an
// upload, would have less once it is written), so a full disk is met at the
// door rather than mid-write. The floor is the larger of a fixed headroom
// (64 MiB, for the catalogue and job outputs) and --min_free_disk, given as
// a percentage of the volume ("5%") or a size in MiB ("2048").
// Thread-safe (stateless after construction).
#ifndef DENDRO_SERVER_STORAGE_DISK_GUARD_H_
#define DENDRO_SERVER_STORAGE_DISK_GUARD_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dendro::server {

struct MinFreeDisk {
  double percent = 0;  // of the volume's size
  int64_t bytes = 0;
};

// `bytes` in MiB, rounded up (for messages).
int64_t RoundUpMiB(int64_t bytes);

// "5%" or "2048" (MiB); "" or "0" for none.
absl::StatusOr<MinFreeDisk> ParseMinFreeDisk(const std::string& text);

class DiskGuard {
 public:
  // The volume's space as statvfs(3) reports it to an unprivileged writer.
  struct Space {
    int64_t free_bytes = 0;   // available (f_bavail)
    int64_t total_bytes = 0;  // the volume's size
    int64_t floor_bytes = 0;  // what Check keeps free: max(headroom, --min_free_disk)
  };

  DiskGuard(std::string path, MinFreeDisk min_free) : path_(std::move(path)), min_(min_free) {}

  // The space now; nullopt when the volume cannot be read.
  std::optional<Space> Measure() const;

  // OK if `bytes` more can be written and the floor still be left free.
  // `what` starts the refusal ("upload", "job").
  absl::Status Check(int64_t bytes, const std::string& what) const;

 private:
  std::string path_;
  MinFreeDisk min_;
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_STORAGE_DISK_GUARD_H_
