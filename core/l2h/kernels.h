// Numeric kernels behind RunL2h (internal to core/l2h).
//
// Two concerns drive this file:
//   * Reproducing the reference's tie behaviour. Exact ties between
//     aggregates only survive if both implementations add the same numbers
//     in the same order, so NumpySum reproduces numpy's float64 add-reduce
//     bit for bit.
//   * Speed. Exp is a branch-free double-precision exp with an AVX-512
//     version in kernels.cc; it gives the same bits for a value whether it
//     runs in a vector lane or in scalar code, so equal inputs give equal
//     sums.
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
double PairwiseSumOf8OrMore(const double* a, int64_t n);  // n >= 8
inline double PairwiseSum(const double* a, int64_t n) {
  if (n >= 8) return PairwiseSumOf8OrMore(a, n);
  // Inline: L2H's merges sum a few terms per point.
  double res = 0.0;
  for (int64_t i = 0; i < n; ++i) res += a[i];
  return res;
}

// np.sum / np.add.reduce of a contiguous 1-D float64 array (numpy 1.2x):
// the reduction runs in buffer-sized blocks of 8192 elements, pairwise
// within a block and sequentially across blocks, starting from 0.0.
double NumpySum(const double* a, int64_t n);

// np.mean of the same: NumpySum(a, n) / n. n must be > 0.
inline double NumpyMean(const double* a, int64_t n) {
  return NumpySum(a, n) / static_cast<double>(n);
}

// 2^(j/16) for j = 0..15, each correctly rounded (Exp's table).
inline constexpr double kExp2Sixteenths[16] = {
    0x1.0000000000000p+0, 0x1.0b5586cf9890fp+0, 0x1.172b83c7d517bp+0, 0x1.2387a6e756238p+0,
    0x1.306fe0a31b715p+0, 0x1.3dea64c123422p+0, 0x1.4bfdad5362a27p+0, 0x1.5ab07dd485429p+0,
    0x1.6a09e667f3bcdp+0, 0x1.7a11473eb0187p+0, 0x1.8ace5422aa0dbp+0, 0x1.9c49182a3f090p+0,
    0x1.ae89f995ad3adp+0, 0x1.c199bdd85529cp+0, 0x1.d5818dcfba487p+0, 0x1.ea4afa2a490dap+0,
};

// Exp's constants, shared with its vector version (kernels.cc).
inline constexpr double kExpMin = -708.0;  // below: 0
inline constexpr double kExpMax = 709.0;   // inputs are clamped to it
inline constexpr double kExp16Log2e = 16.0 * 1.4426950408889634;
// fdlibm's split of ln 2 (the high part has 21 trailing zero bits), / 16.
inline constexpr double kExpLn2Hi16 = 6.93147180369123816490e-01 / 16.0;
inline constexpr double kExpLn2Lo16 = 1.90821492927058770002e-10 / 16.0;
inline constexpr double kExpShifter = 6755399441055744.0;  // 1.5 * 2^52

// exp(x) for x <= 709; inputs below -708 (and -inf) give 0 (the true
// values are < 3.3e-308, negligible next to the softmax maximum 1). Relative
// error below 2.5e-16.
// exp(x) = 2^k * 2^(j/16) * exp(r) with x = (16k + j) ln2/16 + r,
// |r| <= ln2/32: the table gives 2^(j/16), and exp(r) - 1 is its Taylor
// polynomial of degree 7 (truncation error < 1.3e-18 relative). Every step
// is an explicit fma or a single rounding, and ExpInPlace's vector code
// (kernels.cc) performs the same operations in the same order, so a value
// gets the same bits in a vector lane as here.
inline double Exp(double x) {
  const double xc = std::min(std::max(x, kExpMin), kExpMax);
  const double t = std::fma(xc, kExp16Log2e, kExpShifter);  // 16k + j in the low mantissa bits
  const double n = t - kExpShifter;
  double r = std::fma(-n, kExpLn2Hi16, xc);
  r = std::fma(-n, kExpLn2Lo16, r);
  double p = 1.0 / 5040.0;
  p = std::fma(p, r, 1.0 / 720.0);
  p = std::fma(p, r, 1.0 / 120.0);
  p = std::fma(p, r, 1.0 / 24.0);
  p = std::fma(p, r, 1.0 / 6.0);
  p = std::fma(p, r, 0.5);
  p = std::fma(p, r, 1.0);
  const double q = p * r;  // exp(r) - 1
  uint64_t tb;
  uint64_t sb;
  std::memcpy(&tb, &t, sizeof tb);
  std::memcpy(&sb, &kExpShifter, sizeof sb);
  const int64_t ni = static_cast<int64_t>(tb - sb);  // 16k + j
  const double table = kExp2Sixteenths[ni & 15];
  const double y0 = std::fma(table, q, table);
  // 2^k, k = floor(ni / 16) in [-1022, 1022]
  const uint64_t scale_bits = static_cast<uint64_t>((ni >> 4) + 1023) << 52;
  double scale;
  std::memcpy(&scale, &scale_bits, sizeof scale);
  const double y = y0 * scale;
  const uint64_t keep = 0 - static_cast<uint64_t>(x >= kExpMin);  // all ones or zero
  uint64_t y_bits;
  std::memcpy(&y_bits, &y, sizeof y_bits);
  y_bits &= keep;
  double out;
  std::memcpy(&out, &y_bits, sizeof out);
  return out;
}

// x[i] <- Exp(x[i]); with AVX-512, eight lanes at a time.
void ExpInPlace(double* x, int64_t n);

// out[c] <- Exp((double(x[c]) - shift) + penalty[c]) for c in [0, n), or
// without the penalty term if `penalty` is null; the same bits as that
// scalar expression.
void ExpShifted(const float* x, int32_t n, double shift, const float* penalty, double* out);

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
