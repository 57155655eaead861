// Matrix views shared by every algorithm.
//
// Input data is always a dense, row-major float32 matrix (one row per
// point). Algorithms take a MatrixView: it borrows memory (a memory-mapped
// .npy file, an upload buffer, an Eigen matrix) and never owns it.
#ifndef DENDRO_CORE_MATRIX_MATRIX_H_
#define DENDRO_CORE_MATRIX_MATRIX_H_

#include <cstdint>

#include "Eigen/Core"
#include "absl/status/status.h"

namespace dendro {

using RowMatrixF =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMatrixD =
    Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixView = Eigen::Map<const RowMatrixF>;

// Checks that every entry of `m` is finite. On failure returns
// InvalidArgument naming the first offending row and column (0-based, in
// row-major order), e.g. "row 12, column 3 is NaN".
// `row_offset` is added to reported row numbers (for chunked validation).
absl::Status ValidateFinite(const MatrixView& m, int64_t row_offset = 0);

// Same check on a raw row-major block of `rows` x `cols` floats.
absl::Status ValidateFinite(const float* data, int64_t rows, int64_t cols,
                            int64_t row_offset = 0);

// Checks that every entry of `m` lies in [-limit, limit] (so is finite),
// for algorithms whose float32 arithmetic stays finite only on bounded
// inputs. InvalidArgument naming the first offending row and column and the
// range, e.g. "row 0, column 2 is 3.4e+38; values must lie in [-1e+09, 1e+09]".
absl::Status ValidateMagnitude(const MatrixView& m, float limit, int64_t row_offset = 0);

}  // namespace dendro

#endif  // DENDRO_CORE_MATRIX_MATRIX_H_
