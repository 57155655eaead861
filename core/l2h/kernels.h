// Numeric kernels behind RunL2h (internal to core/l2h).
//
// Two concerns drive this file:
//   * Reproducing the reference's tie behaviour. Exact ties between
//     aggregates only survive if both implementations add the same numbers
//     in the same order, so NumpySum reproduces numpy's float64 add-reduce
//     bit for bit.
//   * Speed. Exp is a branch-free double-precision exp the compiler
//     vectorises; it gives the same bits for a value whether it runs in a
//     vector lane or in the scalar tail, so equal inputs give equal sums.
#ifndef DENDRO_CORE_L2H_KERNELS_H_
#define DENDRO_CORE_L2H_KERNELS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

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

// exp(x) for x <= 709; inputs below -708 (and -inf) give 0 (the true
// values are < 3.3e-308, negligible next to the softmax maximum 1). Relative
// error about 1e-16.
// exp(x) = 2^k * exp(r), x = k ln2 + r, |r| <= ln2/2, exp(r) by its Taylor
// polynomial of degree 13 (truncation error < 5e-18 relative). Every step
// is an explicit fma or a single rounding, so a loop over Exp gives the
// same bits whether the compiler vectorises it or not.
inline double Exp(double x) {
  constexpr double kLog2e = 1.4426950408889634;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // fdlibm split of ln 2
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  constexpr double kShifter = 6755399441055744.0;  // 1.5 * 2^52
  constexpr double kMin = -708.0;
  constexpr double kMax = 709.0;
  // Branch-free forms (min/max, a bit mask at the end) so that loops over
  // Exp vectorise with AVX2 as well as AVX-512.
  const double xc = std::min(std::max(x, kMin), kMax);
  const double t = std::fma(xc, kLog2e, kShifter);  // k in the low mantissa bits
  const double k = t - kShifter;
  double r = std::fma(-k, kLn2Hi, xc);
  r = std::fma(-k, kLn2Lo, r);
  double p = 1.0 / 6227020800.0;                 // 1/13!
  p = std::fma(p, r, 1.0 / 479001600.0);         // 1/12!
  p = std::fma(p, r, 1.0 / 39916800.0);          // 1/11!
  p = std::fma(p, r, 1.0 / 3628800.0);           // 1/10!
  p = std::fma(p, r, 1.0 / 362880.0);
  p = std::fma(p, r, 1.0 / 40320.0);
  p = std::fma(p, r, 1.0 / 5040.0);
  p = std::fma(p, r, 1.0 / 720.0);
  p = std::fma(p, r, 1.0 / 120.0);
  p = std::fma(p, r, 1.0 / 24.0);
  p = std::fma(p, r, 1.0 / 6.0);
  p = std::fma(p, r, 0.5);
  p = std::fma(p, r, 1.0);
  p = std::fma(p, r, 1.0);
  uint64_t tb;
  uint64_t sb;
  std::memcpy(&tb, &t, sizeof tb);
  std::memcpy(&sb, &kShifter, sizeof sb);
  const uint64_t scale_bits = (tb - sb + 1023u) << 52;  // 2^k, k in [-1021, 1023]
  double scale;
  std::memcpy(&scale, &scale_bits, sizeof scale);
  const double y = p * scale;
  const uint64_t keep = 0 - static_cast<uint64_t>(x >= kMin);  // all ones or zero
  uint64_t y_bits;
  std::memcpy(&y_bits, &y, sizeof y_bits);
  y_bits &= keep;
  double out;
  std::memcpy(&out, &y_bits, sizeof out);
  return out;
}

// x[i] <- Exp(x[i]); vectorised.
void ExpInPlace(double* x, int64_t n);

// A column mask is a `penalty` array of n floats: 0 for a column that takes
// part, -inf for one that is masked out; null means no column is masked.
// The finite logits plus 0 are unchanged and plus -inf become -inf.

// The lowest index attaining the largest x[c] over the columns that take
// part and differ from `also_skip` (-1: none). -1 if there is none.
// Masked columns must be -inf after adding the penalty, so x must have no
// -inf (the caller validates finiteness).
int32_t MaskedArgmax(const float* x, int32_t n, const float* penalty, int32_t also_skip);

// In one pass: *first = MaskedArgmax(x, n, penalty, -1) and
// *second = MaskedArgmax(x, n, penalty, *first) (-1 where none).
void Top2(const float* x, int32_t n, const float* penalty, int32_t* first, int32_t* second);

// Top2 without a mask, over a row that it also checks: false if any x[c] is
// NaN or infinite (*first and *second are then meaningless).
bool Top2Finite(const float* x, int32_t n, int32_t* first, int32_t* second);

// Sum of exp(x[c] - shift) over the same columns, summed with NumpySum over
// all n columns (the others contribute +0.0). `buf` needs room for n
// doubles.
double MaskedExpSum(const float* x, int32_t n, double shift, const float* penalty,
                    int32_t also_skip, double* buf);

}  // namespace l2h_internal
}  // namespace dendro

#endif  // DENDRO_CORE_L2H_KERNELS_H_
