#include "core/matrix/matrix.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace dendro {
namespace {

// True if any of the n floats has an all-ones exponent (NaN or +-inf).
// Integer-only so the compiler vectorises it without -ffast-math.
bool AnyNonFinite(const float* data, int64_t n) {
  constexpr uint32_t kExp = 0x7f800000u;
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, data + i, sizeof bits);
    bad |= static_cast<uint32_t>((bits & kExp) == kExp);
  }
  return bad != 0;
}

// True if any of the n floats has |x| > limit (or is NaN). Branch-free so
// the compiler vectorises it.
bool AnyAbove(const float* data, int64_t n, float limit) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad |= static_cast<uint32_t>(!(std::fabs(data[i]) <= limit));
  return bad != 0;
}

}  // namespace

absl::Status ValidateMagnitude(const MatrixView& m, float limit, int64_t row_offset) {
  // NaN and infinities first, in ValidateFinite's words.
  if (absl::Status finite = ValidateFinite(m, row_offset); !finite.ok()) return finite;
  const float* data = m.data();
  const int64_t cols = m.cols();
  const int64_t n = m.rows() * cols;
  constexpr int64_t kBlock = 1 << 16;
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t end = std::min(n, begin + kBlock);
    if (!AnyAbove(data + begin, end - begin, limit)) continue;
    for (int64_t i = begin; i < end; ++i) {
      if (std::fabs(data[i]) <= limit) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          "row ", row_offset + i / cols, ", column ", i % cols, " is ", data[i],
          "; values must lie in [-", limit, ", ", limit, "]"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateFinite(const float* data, int64_t rows, int64_t cols,
                            int64_t row_offset) {
  const int64_t n = rows * cols;
  constexpr int64_t kBlock = 1 << 16;
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t end = std::min(n, begin + kBlock);
    if (!AnyNonFinite(data + begin, end - begin)) continue;
    for (int64_t i = begin; i < end; ++i) {
      if (std::isfinite(data[i])) continue;
      const char* what =
          std::isnan(data[i]) ? "NaN" : (data[i] > 0 ? "+inf" : "-inf");
      return absl::InvalidArgumentError(
          absl::StrCat("row ", row_offset + i / cols, ", column ", i % cols,
                       " is ", what, "; all values must be finite"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateFinite(const MatrixView& m, int64_t row_offset) {
  return ValidateFinite(m.data(), m.rows(), m.cols(), row_offset);
}

}  // namespace dendro
