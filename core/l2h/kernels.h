// Numeric kernels behind RunL2h (internal to core/l2h).
//
// Two concerns drive this file:
//   * Reproducing the reference's tie behaviour. Exact ties between
//     aggregates only survive if both implementations add the same numbers
//     in the same order, so NumpySum reproduces numpy's float64 add-reduce
//     bit for bit.
//   * Speed. ExpInPlace is a branch-free double-precision exp the compiler
//     vectorises; it gives the same bits for a value whether it runs in a
//     vector lane or in the scalar tail, so equal inputs give equal sums.
#ifndef DENDRO_CORE_L2H_KERNELS_H_
#define DENDRO_CORE_L2H_KERNELS_H_

#include <cstdint>

namespace dendro {
namespace l2h_internal {

// numpy's DOUBLE_pairwise_sum: n < 8 sequentially from 0.0; n <= 128 with
// eight interleaved accumulators combined as
// ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)) plus a sequential remainder;
// larger n split at n/2 rounded down to a multiple of 8.
double PairwiseSum(const double* a, int64_t n);

// np.sum / np.add.reduce of a contiguous 1-D float64 array (numpy 1.2x):
// the reduction runs in buffer-sized blocks of 8192 elements, pairwise
// within a block and sequentially across blocks, starting from 0.0.
double NumpySum(const double* a, int64_t n);

// np.mean of the same: NumpySum(a, n) / n. n must be > 0.
inline double NumpyMean(const double* a, int64_t n) {
  return NumpySum(a, n) / static_cast<double>(n);
}

// x[i] <- exp(x[i]) for x[i] <= 709. Inputs below -708 (and -inf) give 0 (the
// true values are < 3.3e-308, negligible next to the softmax maximum 1).
// Relative error about 1e-16.
void ExpInPlace(double* x, int64_t n);
double Exp(double x);

// A column mask is a `penalty` array of n floats: 0 for a column that takes
// part, -inf for one that is masked out; null means no column is masked.
// The finite logits plus 0 are unchanged and plus -inf become -inf.

// The lowest index attaining the largest x[c] over the columns that take
// part and differ from `also_skip` (-1: none). -1 if there is none.
int32_t MaskedArgmax(const float* x, int32_t n, const float* penalty, int32_t also_skip);

// Sum of exp(x[c] - shift) over the same columns, summed with NumpySum over
// all n columns (the others contribute +0.0). `buf` needs room for n
// doubles.
double MaskedExpSum(const float* x, int32_t n, double shift, const float* penalty,
                    int32_t also_skip, double* buf);

}  // namespace l2h_internal
}  // namespace dendro

#endif  // DENDRO_CORE_L2H_KERNELS_H_
