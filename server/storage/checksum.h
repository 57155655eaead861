// Checksums of stored files: XXH3-64 (Debian's libxxhash) as 16 lowercase
// hex digits. Each dataset and model records one per file in its catalogue
// entry (the `checksums` map of v1::Dataset and v1::Model); they are checked
// when a dataset is first opened, whenever a model is loaded, and by
// `dendrod --verify`, so damaged bytes are reported instead of served.
#ifndef DENDRO_SERVER_STORAGE_CHECKSUM_H_
#define DENDRO_SERVER_STORAGE_CHECKSUM_H_

#include <map>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dendro::server {

// Incremental: Update() any number of times, Hex() at any point.
class Checksum {
 public:
  Checksum();
  ~Checksum();
  Checksum(const Checksum&) = delete;
  Checksum& operator=(const Checksum&) = delete;

  void Update(std::string_view bytes);
  // Of everything passed to Update() so far.
  std::string Hex() const;

 private:
  void* state_;  // XXH3_state_t, kept out of this header
};

// Of one file, read block by block.
absl::StatusOr<std::string> ChecksumFile(const std::string& path);

// File name (relative to the object's directory, '/'-separated) -> checksum.
using ChecksumMap = std::map<std::string, std::string>;

// A recorded map (e.g. v1::Model::checksums()) as a ChecksumMap.
template <typename MapLike>
ChecksumMap ToChecksumMap(const MapLike& recorded) {
  return ChecksumMap(recorded.begin(), recorded.end());
}

// Of every regular file under `dir`.
absl::StatusOr<ChecksumMap> ChecksumTree(const std::string& dir);

// OK if `actual` has exactly the files of `recorded` with the same sums;
// otherwise DataLoss naming `what` and the first file that differs, is
// missing or is extra.
absl::Status CompareChecksums(const ChecksumMap& recorded, const ChecksumMap& actual,
                              std::string_view what);

}  // namespace dendro::server

#endif  // DENDRO_SERVER_STORAGE_CHECKSUM_H_
