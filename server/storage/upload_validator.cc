#include "server/storage/upload_validator.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/matrix/matrix.h"
#include "server/storage/disk_guard.h"

namespace dendro::server {

absl::Status UploadValidator::Begin(int64_t rows, int64_t cols, bool has_labels,
                                    int64_t max_bytes) {
  if (begun_) return absl::InvalidArgumentError("upload: header sent twice");
  if (rows < 1) {
    return absl::InvalidArgumentError(absl::StrCat("upload header: rows must be >= 1, got ", rows));
  }
  if (cols < 1) {
    return absl::InvalidArgumentError(absl::StrCat("upload header: cols must be >= 1, got ", cols));
  }
  if (rows > kMaxElements / cols) {
    return absl::InvalidArgumentError(
        absl::StrCat("upload header: ", rows, " x ", cols, " is too large"));
  }
  const int64_t total = rows * cols * 4 + (has_labels ? rows * 8 : 0);
  if (total > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "upload header: ", rows, " x ", cols, " is ", RoundUpMiB(total),
        " MiB, over this server's limit of ", RoundUpMiB(max_bytes),
        " MiB per dataset (dendrod --max_dataset_mb)"));
  }
  begun_ = true;
  rows_ = rows;
  cols_ = cols;
  has_labels_ = has_labels;
  expected_data_ = rows * cols * 4;
  stats_.Begin(rows, cols, has_labels);
  return absl::OkStatus();
}

absl::Status UploadValidator::NotFinite(int64_t index, float value) const {
  return absl::InvalidArgumentError(absl::StrCat(
      "row ", index / cols_, ", column ", index % cols_, " is ",
      std::isnan(value) ? "NaN" : (value > 0 ? "+inf" : "-inf"), "; all values must be finite"));
}

absl::Status UploadValidator::Data(std::string_view bytes) {
  if (!begun_) return absl::InvalidArgumentError("upload: the first message must be a header");
  if (labels_ > 0) return absl::InvalidArgumentError("upload: data chunk after labels started");
  if (data_ + static_cast<int64_t>(bytes.size()) > expected_data_) {
    return absl::InvalidArgumentError(absl::StrCat("upload: more data than the header's ", rows_,
                                                   " x ", cols_, " float32 (", expected_data_,
                                                   " bytes)"));
  }
  // Complete a float split across the previous chunk boundary.
  size_t pos = 0;
  if (!carry_.empty()) {
    const size_t take = std::min(4 - carry_.size(), bytes.size());
    carry_.append(bytes.data(), take);
    pos = take;
    if (carry_.size() == 4) {
      float f;
      std::memcpy(&f, carry_.data(), 4);
      if (!std::isfinite(f)) return NotFinite(data_ / 4, f);
      stats_.AddFloats(data_ / 4, &f, 1);
      carry_.clear();
    }
  }
  if (carry_.empty()) {
    const size_t whole = (bytes.size() - pos) / 4;
    const int64_t first_index = (data_ + static_cast<int64_t>(pos)) / 4;
    const char* p = bytes.data() + pos;
    // Check aligned float blocks; copy when the chunk is misaligned.
    std::vector<float> buf;
    const float* floats = reinterpret_cast<const float*>(p);
    if (whole > 0 && reinterpret_cast<uintptr_t>(p) % alignof(float) != 0) {
      buf.resize(whole);
      std::memcpy(buf.data(), p, whole * 4);
      floats = buf.data();
    }
    // ValidateFinite is vectorised; find the position only on failure.
    if (!ValidateFinite(floats, 1, static_cast<int64_t>(whole), 0).ok()) {
      for (size_t i = 0; i < whole; ++i) {
        if (!std::isfinite(floats[i])) return NotFinite(first_index + static_cast<int64_t>(i), floats[i]);
      }
    }
    stats_.AddFloats(first_index, floats, static_cast<int64_t>(whole));
    carry_.assign(p + whole * 4, bytes.size() - pos - whole * 4);
  }
  data_ += static_cast<int64_t>(bytes.size());
  return absl::OkStatus();
}

absl::Status UploadValidator::Labels(std::string_view bytes) {
  if (!begun_) return absl::InvalidArgumentError("upload: the first message must be a header");
  if (!has_labels_) {
    return absl::InvalidArgumentError("upload: labels sent but header.has_labels is false");
  }
  if (data_ != expected_data_) {
    return absl::InvalidArgumentError(absl::StrCat("upload: labels sent after only ", data_,
                                                   " of ", expected_data_, " data bytes"));
  }
  if (labels_ + static_cast<int64_t>(bytes.size()) > rows_ * 8) {
    return absl::InvalidArgumentError(absl::StrCat("upload: more than ", rows_, " int64 labels"));
  }
  labels_ += static_cast<int64_t>(bytes.size());
  // Whole labels to the statistics, completing one split across chunks.
  size_t pos = 0;
  if (!label_carry_.empty()) {
    const size_t take = std::min(8 - label_carry_.size(), bytes.size());
    label_carry_.append(bytes.data(), take);
    pos = take;
    if (label_carry_.size() < 8) return absl::OkStatus();
    int64_t label;
    std::memcpy(&label, label_carry_.data(), 8);
    stats_.AddLabels(&label, 1);
    label_carry_.clear();
  }
  const size_t whole = (bytes.size() - pos) / 8;
  std::vector<int64_t> labels(whole);
  if (whole > 0) std::memcpy(labels.data(), bytes.data() + pos, whole * 8);
  stats_.AddLabels(labels.data(), static_cast<int64_t>(whole));
  label_carry_.assign(bytes.data() + pos + whole * 8, bytes.size() - pos - whole * 8);
  return absl::OkStatus();
}

absl::Status UploadValidator::Finish() const {
  if (!begun_) return absl::InvalidArgumentError("upload: empty stream (no header)");
  if (data_ != expected_data_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "upload: shape mismatch: header says ", rows_, " x ", cols_, " float32 = ",
        expected_data_, " bytes, received ", data_));
  }
  if (has_labels_ && labels_ != rows_ * 8) {
    return absl::InvalidArgumentError(absl::StrCat("upload: expected ", rows_, " int64 labels (",
                                                   rows_ * 8, " bytes), received ", labels_,
                                                   " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace dendro::server
