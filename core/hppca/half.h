// Half-precision (IEEE binary16) copies of matrices that single-row scoring
// streams from memory.
//
// A single row scored against a bank of PPCA bases reads every basis once and
// does two flops per element read, so its time is the memory it streams, not
// its arithmetic. Stored as binary16 (round to nearest even) those bases are
// half the bytes; they are read back with the F16C instructions and
// multiplied in float32.
//
// Available on x86-64 CPUs with AVX2, FMA and F16C, checked at run time (the
// build may target any x86-64): HalfAvailable() says so, and the other
// functions may be called only when it is true.
#ifndef DENDRO_CORE_HPPCA_HALF_H_
#define DENDRO_CORE_HPPCA_HALF_H_

#include <cstdint>

namespace dendro::hppca_internal {

bool HalfAvailable();

// out[i] = binary16(in[i]) for i < n (round to nearest even; beyond the
// binary16 range becomes infinity).
void ToHalf(const float* in, int64_t n, uint16_t* out);

// out[i] = float(in[i]) for i < n (exact).
void FromHalf(const uint16_t* in, int64_t n, float* out);

// y[j * ldy + r] = sum_i x[j * ldx + i] * float(v[r * d + i]) for r < rows
// and j < nx (rows of x at x + j * ldx), accumulated in float32, each basis
// row read once for all nx rows of x. Whatever the order of the sums,
// |y[j * ldy + r] - exact| <= Gamma(d) * sum_i |x_ji v_ri|.
void HalfGemvRows(const uint16_t* v, int64_t rows, int64_t d, const float* x, int64_t nx,
                  int64_t ldx, float* y, int64_t ldy);

// The classical bound on float32 rounding in a sum of n products,
// n u / (1 - n u) with u = 2^-24.
double Gamma(int64_t n);

}  // namespace dendro::hppca_internal

#endif  // DENDRO_CORE_HPPCA_HALF_H_
