#include "server/storage/upload_stats.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace dendro::server {

void UploadStats::Begin(int64_t rows, int64_t cols, bool has_labels) {
  rows_ = rows;
  cols_ = cols;
  has_labels_ = has_labels;
  first_row_.assign(static_cast<size_t>(cols), 0.0f);
  varies_.assign(static_cast<size_t>(cols), 0);
  all_vary_ = false;
  class_rows_.clear();
  too_many_classes_ = false;
}

void UploadStats::AddFloats(int64_t first_index, const float* values, int64_t n) {
  if (all_vary_) return;
  // Walk the run one row segment at a time: each segment is a contiguous
  // column range, which the comparison loop below vectorises.
  int64_t index = first_index;
  const int64_t end = first_index + n;
  while (index < end) {
    const int64_t row = index / cols_;
    const int64_t c0 = index % cols_;
    const int64_t c1 = std::min(cols_, c0 + (end - index));
    const float* v = values + (index - first_index);
    if (row == 0) {
      std::memcpy(first_row_.data() + c0, v, static_cast<size_t>(c1 - c0) * sizeof(float));
    } else {
      const float* f = first_row_.data() + c0;
      uint8_t* d = varies_.data() + c0;
      // Float equality, as the fits test a column (0.0 == -0.0); NaN never
      // arrives (the validator refuses it).
      for (int64_t j = 0; j < c1 - c0; ++j) d[j] |= static_cast<uint8_t>(v[j] != f[j]);
    }
    index += c1 - c0;
  }
  if (first_index + n > cols_) {
    all_vary_ = std::all_of(varies_.begin(), varies_.end(), [](uint8_t v) { return v != 0; });
  }
}

void UploadStats::AddLabels(const int64_t* labels, int64_t n) {
  if (too_many_classes_) return;
  for (int64_t i = 0; i < n; ++i) {
    ++class_rows_[labels[i]];
    if (static_cast<int64_t>(class_rows_.size()) > kMaxClasses) {
      too_many_classes_ = true;
      class_rows_.clear();
      return;
    }
  }
}

v1::DatasetStats UploadStats::ToProto() const {
  v1::DatasetStats s;
  s.set_computed(true);
  if (rows_ > 1) {
    for (int64_t j = 0; j < cols_; ++j) {
      if (varies_[j] != 0) continue;
      s.set_num_constant_columns(s.num_constant_columns() + 1);
      if (s.constant_columns_size() < kMaxListedColumns) {
        s.add_constant_columns(j);
        s.add_constant_values(first_row_[j]);
      }
    }
  }
  if (has_labels_ && !too_many_classes_ && !class_rows_.empty()) {
    s.set_num_classes(static_cast<int64_t>(class_rows_.size()));
    int64_t smallest_label = 0, smallest = std::numeric_limits<int64_t>::max();
    for (const auto& [label, count] : class_rows_) {
      if (count < smallest || (count == smallest && label < smallest_label)) {
        smallest = count;
        smallest_label = label;
      }
    }
    s.set_smallest_class_label(smallest_label);
    s.set_smallest_class_rows(smallest);
  }
  return s;
}

}  // namespace dendro::server
