// L2H's first pass on its own: for every row of the logits, its argmax (the
// cluster the point belongs to) and the softmax statistics the merges start
// from.
//
// The first pass reads every logit once and is the part of L2H that grows
// with N x K; the merges after it touch only the points of the lowest
// group at each step. Since a row's statistics depend on that row alone,
// the pass can run on rows in order as they arrive, e.g. while a dataset is
// uploaded, and RunL2h given the finished pass (l2h.h) skips its own and
// returns the same result bit for bit.
#ifndef DENDRO_CORE_L2H_FIRST_PASS_H_
#define DENDRO_CORE_L2H_FIRST_PASS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dendro {
namespace l2h_internal {

// One point's state during L2H (see the top of l2h.cc). After the first
// pass: best = cluster = argmax, second = the runner-up, shift = the largest
// logit, rest = the sum over the other columns of exp(x_c - shift), ref =
// rest. In one half cache line, so that a merge step touching scattered
// points misses once each.
struct PointState {
  double rest = 0.0;
  float shift = 0.0f;
  float ref = 0.0f;
  int32_t best = 0;
  // Runner-up of the last argmax scan (first pass or rescan); -1 once used.
  // While it is outside the point's group it is the masked argmax once the
  // best is masked: the group only grows.
  int32_t second = -1;
  int32_t cluster = 0;  // h(x)
  int32_t unused = 0;
};
static_assert(sizeof(PointState) == 32, "one point per half cache line");

// The first-pass states of n rows (row-major, k columns each) into
// out[0, n); `buf` has room for k doubles. Returns -1, or the index of the
// first row with a NaN or infinite entry, where it stops (out[i] for the
// rows before it are filled).
int64_t FirstPassStates(const float* rows, int64_t n, int32_t k, double* buf, PointState* out);

// The InvalidArgument for the row FirstPassStates stopped at (`index` in
// the whole matrix), naming its first bad column as ValidateFinite does.
absl::Status NonFiniteRowError(const float* row, int32_t k, int64_t index);

}  // namespace l2h_internal

// The first pass over an N x K matrix of logits, fed in row order.
class L2hFirstPass {
 public:
  // For `rows` rows of `k` columns (rows >= 1, 2 <= k <= 2^30).
  L2hFirstPass(int64_t rows, int32_t k);

  // Adds the next `n` rows (row-major, k floats each). InvalidArgument,
  // adding nothing, if that is more rows than announced or a value is not
  // finite (the error names its row and column).
  absl::Status AddRows(const float* rows, int64_t n);

  int64_t rows() const { return rows_; }
  int32_t k() const { return k_; }
  int64_t rows_added() const { return static_cast<int64_t>(states_.size()); }
  bool complete() const { return rows_added() == rows_; }
  // Memory held once complete.
  int64_t bytes() const { return BytesFor(rows_); }
  // Memory held by a complete pass over `rows` rows.
  static int64_t BytesFor(int64_t rows) {
    return rows * static_cast<int64_t>(sizeof(l2h_internal::PointState));
  }

  // One state per row added, in row order.
  const std::vector<l2h_internal::PointState>& states() const { return states_; }

  // Persistence, so that a later fit on the same rows followed by more (a
  // dataset's next generation) passes over the new rows only. The file:
  // a 32-byte header (the 8 bytes "DL2HFP1\0", rows as int64, k as int32,
  // the state size 32 as int32, 8 zero bytes), then one 32-byte state per
  // row in PointState's layout; little-endian throughout.
  // Save writes a complete pass atomically (FailedPrecondition otherwise).
  absl::Status Save(const std::string& path) const;
  // A pass over `rows` rows of `k` columns whose first rows come from the
  // pass saved at `path` (over at most `rows` rows of the same k); AddRows
  // continues after them. InvalidArgument when the saved pass does not fit
  // (more rows, another k); DataLoss when the file is damaged.
  static absl::StatusOr<L2hFirstPass> Resume(const std::string& path, int64_t rows, int32_t k);
  // A complete pass from the states FirstPassStates computed for every row
  // of a matrix with `k` columns, in row order (RunL2h's own pass).
  static L2hFirstPass Adopt(int32_t k, std::vector<l2h_internal::PointState> states);

 private:
  int64_t rows_;
  int32_t k_;
  std::vector<l2h_internal::PointState> states_;
  std::vector<double> buf_;  // k doubles
};

}  // namespace dendro

#endif  // DENDRO_CORE_L2H_FIRST_PASS_H_
