// UploadValidator: the rules of an upload stream, without its I/O.
//
// A stream is a header (shape, labels or not), then rows x cols float32 data
// bytes, then, if labelled, rows int64 label bytes, all little-endian and
// row-major. Chunk boundaries may fall anywhere, even inside a float.
// DatasetUpload passes every message through a validator before writing a
// byte of it; tests/fuzz/upload_fuzz.cc drives one alone. Every refusal is
// InvalidArgument with a message a client can act on (for a bad float, its
// row and column).
#ifndef DENDRO_SERVER_STORAGE_UPLOAD_VALIDATOR_H_
#define DENDRO_SERVER_STORAGE_UPLOAD_VALIDATOR_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "server/storage/upload_stats.h"

namespace dendro::server {

class UploadValidator {
 public:
  // More elements than this are refused whatever the byte limit; it keeps
  // every size product far from overflow.
  static constexpr int64_t kMaxElements = int64_t{1} << 40;

  // The header: rows, cols >= 1, and data plus labels at most `max_bytes`.
  absl::Status Begin(int64_t rows, int64_t cols, bool has_labels, int64_t max_bytes);
  // The next data chunk: after the header, before any label, within the
  // announced size, every completed float finite.
  absl::Status Data(std::string_view bytes);
  // The next label chunk: after all data, within the announced count.
  absl::Status Labels(std::string_view bytes);
  // The end of the stream: everything announced has arrived.
  absl::Status Finish() const;

  bool begun() const { return begun_; }
  // Data plus label bytes the header announces.
  int64_t total_bytes() const { return expected_data_ + (has_labels_ ? rows_ * 8 : 0); }
  int64_t data_bytes() const { return data_; }
  int64_t label_bytes() const { return labels_; }
  // Statistics of the floats and labels accepted so far (complete once
  // Finish succeeds).
  const UploadStats& stats() const { return stats_; }

 private:
  // InvalidArgument naming the float at `index` (row-major) and its value.
  absl::Status NotFinite(int64_t index, float value) const;

  bool begun_ = false;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  bool has_labels_ = false;
  int64_t expected_data_ = 0;
  int64_t data_ = 0;    // data bytes accepted so far
  int64_t labels_ = 0;  // label bytes accepted so far
  std::string carry_;   // < 4 bytes of a float split across chunks
  std::string label_carry_;  // < 8 bytes of a label split across chunks
  UploadStats stats_;
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_STORAGE_UPLOAD_VALIDATOR_H_
