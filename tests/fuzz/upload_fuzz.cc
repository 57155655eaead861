// The upload stream validator on arbitrary streams: a small header, then
// data, label and end-of-stream messages in any order, with chunk boundaries
// anywhere (inside floats too) and arbitrary bytes. Beyond "does not crash",
// its verdicts are checked against a plain re-computation over the bytes it
// accepted:
//  * every accepted data chunk leaves no non-finite float among the floats
//    completed so far;
//  * a refused chunk that names "row r, column c" points at a float that is
//    non-finite, and at the first one;
//  * Finish() succeeds only with exactly the announced data and labels.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "server/storage/upload_validator.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using dendro::fuzz::Check;

// Index of the first non-finite float among the first `n` whole floats of
// `bytes`, or -1.
int64_t FirstNonFinite(const std::string& bytes, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float f;
    std::memcpy(&f, bytes.data() + 4 * i, 4);
    if (!std::isfinite(f)) return i;
  }
  return -1;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const int64_t rows = 1 + data[0] % 48;
  const int64_t cols = 1 + data[1] % 12;
  const bool has_labels = data[2] & 1;
  const bool skip_header = (data[2] & 6) == 6;
  const int64_t max_bytes = int64_t{data[3]} * 32;  // sometimes below the shape's size
  size_t pos = 4;

  dendro::server::UploadValidator v;
  if (!skip_header && !v.Begin(rows, cols, has_labels, max_bytes).ok()) {
    Check(rows * cols * 4 + (has_labels ? rows * 8 : 0) > max_bytes, "a fitting header refused");
    return 0;
  }
  std::string accepted;  // data bytes the validator accepted, in order
  int64_t labels = 0;
  while (pos + 2 <= size) {
    const uint8_t op = data[pos] % 4;
    const size_t len = std::min<size_t>(data[pos + 1], size - pos - 2);
    const std::string_view chunk(reinterpret_cast<const char*>(data) + pos + 2, len);
    pos += 2 + len;
    if (op == 0 || op == 1) {
      const absl::Status s = v.Data(chunk);
      if (s.ok()) {
        accepted.append(chunk);
        Check(v.data_bytes() == static_cast<int64_t>(accepted.size()), "data byte count");
        Check(FirstNonFinite(accepted, static_cast<int64_t>(accepted.size()) / 4) < 0,
              "a non-finite float was accepted");
        continue;
      }
      Check(v.data_bytes() == static_cast<int64_t>(accepted.size()), "refused chunk counted");
      long long r = -1, c = -1;
      if (std::sscanf(std::string(s.message()).c_str(), "row %lld, column %lld", &r, &c) == 2) {
        const std::string all = accepted + std::string(chunk);
        Check(FirstNonFinite(all, static_cast<int64_t>(all.size()) / 4) == r * cols + c,
              "the refusal names the first non-finite float");
      }
      return 0;  // a refused stream ends
    }
    if (op == 2) {
      const absl::Status s = v.Labels(chunk);
      if (!s.ok()) return 0;
      labels += static_cast<int64_t>(len);
      Check(has_labels && v.data_bytes() == rows * cols * 4, "labels accepted out of order");
      continue;
    }
    const absl::Status s = v.Finish();
    const bool complete = !skip_header && static_cast<int64_t>(accepted.size()) == rows * cols * 4 &&
                          labels == (has_labels ? rows * 8 : 0);
    Check(s.ok() == complete, "Finish() agrees with the byte counts");
  }
  return 0;
}
