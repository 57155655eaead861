#include "core/l2h/first_pass.h"

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/l2h/kernels.h"
#include "core/matrix/matrix.h"

namespace dendro {
namespace l2h_internal {

int64_t FirstPassStates(const float* rows, int64_t n, int32_t k, double* buf, PointState* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float* x = rows + i * static_cast<int64_t>(k);
    // Hardware prefetchers stop at page boundaries; a row is often a page.
    if (i + 2 < n) {
      const float* ahead = x + 2 * static_cast<int64_t>(k);
      for (int32_t col = 0; col < k; col += 16) __builtin_prefetch(ahead + col);
    }
    PointState& st = out[i];
    int32_t runner_up;
    if (!Top2Finite(x, k, &st.best, &runner_up)) return i;
    st.cluster = st.best;
    st.second = runner_up;
    st.shift = x[st.best];
    st.rest = MaskedExpSum(x, k, x[st.best], nullptr, st.best, buf);
    st.ref = static_cast<float>(st.rest);
    st.unused = 0;
  }
  return -1;
}

absl::Status NonFiniteRowError(const float* row, int32_t k, int64_t index) {
  const absl::Status st = ValidateFinite(row, 1, k, index);
  // Never OK (both checks agree), but the caller's states are incomplete.
  return st.ok() ? absl::InvalidArgumentError(absl::StrCat("row ", index, " is not finite")) : st;
}

}  // namespace l2h_internal

L2hFirstPass::L2hFirstPass(int64_t rows, int32_t k) : rows_(rows), k_(k), buf_(k) {
  states_.reserve(static_cast<size_t>(rows));
}

absl::Status L2hFirstPass::AddRows(const float* rows, int64_t n) {
  if (n < 0 || n > rows_ - rows_added()) {
    return absl::InvalidArgumentError(absl::StrCat("L2H first pass: ", n, " more rows after ",
                                                   rows_added(), " of ", rows_));
  }
  const size_t at = states_.size();
  states_.resize(at + static_cast<size_t>(n));
  const int64_t bad = l2h_internal::FirstPassStates(rows, n, k_, buf_.data(), states_.data() + at);
  if (bad >= 0) {
    states_.resize(at);  // nothing of these rows is kept
    return l2h_internal::NonFiniteRowError(rows + bad * static_cast<int64_t>(k_), k_,
                                           rows_added() + bad);
  }
  return absl::OkStatus();
}

}  // namespace dendro
