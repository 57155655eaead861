#include "core/l2h/first_pass.h"

#include <cmath>
#include <cstring>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/io/atomic_file.h"
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

namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the saved pass is little-endian");
constexpr char kMagic[8] = {'D', 'L', '2', 'H', 'F', 'P', '1', '\0'};
constexpr size_t kHeaderBytes = 32;
constexpr int32_t kStateBytes = sizeof(l2h_internal::PointState);

}  // namespace

absl::Status L2hFirstPass::Save(const std::string& path) const {
  if (!complete()) {
    return absl::FailedPreconditionError(absl::StrCat("L2H first pass: only ", rows_added(), " of ",
                                                      rows_, " rows done; nothing saved"));
  }
  char header[kHeaderBytes] = {};
  std::memcpy(header, kMagic, 8);
  std::memcpy(header + 8, &rows_, 8);
  std::memcpy(header + 16, &k_, 4);
  std::memcpy(header + 20, &kStateBytes, 4);
  AtomicFileWriter w;
  DENDRO_RETURN_IF_ERROR(AtomicFileWriter::Open(path, &w));
  DENDRO_RETURN_IF_ERROR(w.Append(std::string_view(header, kHeaderBytes)));
  DENDRO_RETURN_IF_ERROR(w.Append(std::string_view(reinterpret_cast<const char*>(states_.data()),
                                                   states_.size() * kStateBytes)));
  return w.Commit();
}

L2hFirstPass L2hFirstPass::Adopt(int32_t k, std::vector<l2h_internal::PointState> states) {
  L2hFirstPass pass(0, k);
  pass.rows_ = static_cast<int64_t>(states.size());
  pass.states_ = std::move(states);
  return pass;
}

absl::StatusOr<L2hFirstPass> L2hFirstPass::Resume(const std::string& path, int64_t rows,
                                                  int32_t k) {
  std::string bytes;
  DENDRO_RETURN_IF_ERROR(ReadFileToString(path, &bytes));
  int64_t saved_rows = 0;
  int32_t saved_k = 0, state_bytes = 0;
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kMagic, 8) != 0) {
    return absl::DataLossError("saved L2H first pass: not such a file (bad header)");
  }
  std::memcpy(&saved_rows, bytes.data() + 8, 8);
  std::memcpy(&saved_k, bytes.data() + 16, 4);
  std::memcpy(&state_bytes, bytes.data() + 20, 4);
  if (state_bytes != kStateBytes || saved_rows < 1 || saved_k < 2 ||
      (bytes.size() - kHeaderBytes) / kStateBytes != static_cast<uint64_t>(saved_rows) ||
      (bytes.size() - kHeaderBytes) % kStateBytes != 0) {
    return absl::DataLossError(absl::StrCat("saved L2H first pass: header says ", saved_rows,
                                            " rows of ", state_bytes, " bytes, the file holds ",
                                            bytes.size() - kHeaderBytes, " bytes after it"));
  }
  if (saved_k != k || saved_rows > rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("the saved L2H first pass covers ", saved_rows, " rows of ", saved_k,
                     " columns; it cannot start a pass over ", rows, " rows of ", k));
  }
  L2hFirstPass pass(rows, k);
  pass.states_.resize(static_cast<size_t>(saved_rows));
  std::memcpy(pass.states_.data(), bytes.data() + kHeaderBytes,
              static_cast<size_t>(saved_rows) * kStateBytes);
  for (int64_t i = 0; i < saved_rows; ++i) {
    const l2h_internal::PointState& st = pass.states_[i];
    if (st.best < 0 || st.best >= k || st.cluster != st.best || st.second < -1 || st.second >= k ||
        !std::isfinite(st.shift) || !(st.rest >= 0) || !std::isfinite(st.rest)) {
      return absl::DataLossError(
          absl::StrCat("saved L2H first pass: the state of row ", i, " is out of range"));
    }
  }
  return pass;
}

}  // namespace dendro
