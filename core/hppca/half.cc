#include "core/hppca/half.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define DENDRO_HALF_TARGET __attribute__((target("avx2,fma,f16c")))
#endif

#include <cstdlib>

namespace dendro::hppca_internal {

double Gamma(int64_t n) {
  const double nu = static_cast<double>(n) * 0x1p-24;
  return nu / (1.0 - nu);
}

#if defined(__x86_64__)

namespace {

bool CpuHasF16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return false;
  return (c & bit_F16C) != 0;
}

DENDRO_HALF_TARGET inline float Sum8(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 h = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

DENDRO_HALF_TARGET inline __m256 Load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

DENDRO_HALF_TARGET void ToHalfImpl(const float* in, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = _cvtss_sh(in[i], _MM_FROUND_TO_NEAREST_INT);
}

DENDRO_HALF_TARGET void FromHalfImpl(const uint16_t* in, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, Load8(in + i));
  for (; i < n; ++i) out[i] = _cvtsh_ss(in[i]);
}

// Four rows at a time, so each load of x serves four independent sums.
DENDRO_HALF_TARGET void HalfGemvImpl(const uint16_t* v, int64_t rows, int64_t d, const float* x,
                                     float* y) {
  const int64_t d8 = d & ~int64_t{7};
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const uint16_t* v0 = v + r * d;
    const uint16_t* v1 = v0 + d;
    const uint16_t* v2 = v1 + d;
    const uint16_t* v3 = v2 + d;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    for (int64_t i = 0; i < d8; i += 8) {
      const __m256 xv = _mm256_loadu_ps(x + i);
      a0 = _mm256_fmadd_ps(Load8(v0 + i), xv, a0);
      a1 = _mm256_fmadd_ps(Load8(v1 + i), xv, a1);
      a2 = _mm256_fmadd_ps(Load8(v2 + i), xv, a2);
      a3 = _mm256_fmadd_ps(Load8(v3 + i), xv, a3);
    }
    float s0 = Sum8(a0), s1 = Sum8(a1), s2 = Sum8(a2), s3 = Sum8(a3);
    for (int64_t i = d8; i < d; ++i) {
      s0 += x[i] * _cvtsh_ss(v0[i]);
      s1 += x[i] * _cvtsh_ss(v1[i]);
      s2 += x[i] * _cvtsh_ss(v2[i]);
      s3 += x[i] * _cvtsh_ss(v3[i]);
    }
    y[r] = s0;
    y[r + 1] = s1;
    y[r + 2] = s2;
    y[r + 3] = s3;
  }
  for (; r < rows; ++r) {
    const uint16_t* vr = v + r * d;
    __m256 a = _mm256_setzero_ps();
    for (int64_t i = 0; i < d8; i += 8)
      a = _mm256_fmadd_ps(Load8(vr + i), _mm256_loadu_ps(x + i), a);
    float s = Sum8(a);
    for (int64_t i = d8; i < d; ++i) s += x[i] * _cvtsh_ss(vr[i]);
    y[r] = s;
  }
}

// Two basis rows against four rows of x per step: eight sums, each basis
// load converted once for four products.
DENDRO_HALF_TARGET void HalfGemvRowsImpl(const uint16_t* v, int64_t rows, int64_t d, const float* x,
                                         int64_t nx, int64_t ldx, float* y, int64_t ldy) {
  const int64_t d8 = d & ~int64_t{7};
  int64_t j = 0;
  for (; j + 4 <= nx; j += 4) {
    const float* x0 = x + j * ldx;
    const float* x1 = x0 + ldx;
    const float* x2 = x1 + ldx;
    const float* x3 = x2 + ldx;
    int64_t r = 0;
    for (; r + 2 <= rows; r += 2) {
      const uint16_t* va = v + r * d;
      const uint16_t* vb = va + d;
      __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(),
             a3 = _mm256_setzero_ps();
      __m256 b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps(), b2 = _mm256_setzero_ps(),
             b3 = _mm256_setzero_ps();
      for (int64_t i = 0; i < d8; i += 8) {
        const __m256 ha = Load8(va + i), hb = Load8(vb + i);
        __m256 xv = _mm256_loadu_ps(x0 + i);
        a0 = _mm256_fmadd_ps(ha, xv, a0);
        b0 = _mm256_fmadd_ps(hb, xv, b0);
        xv = _mm256_loadu_ps(x1 + i);
        a1 = _mm256_fmadd_ps(ha, xv, a1);
        b1 = _mm256_fmadd_ps(hb, xv, b1);
        xv = _mm256_loadu_ps(x2 + i);
        a2 = _mm256_fmadd_ps(ha, xv, a2);
        b2 = _mm256_fmadd_ps(hb, xv, b2);
        xv = _mm256_loadu_ps(x3 + i);
        a3 = _mm256_fmadd_ps(ha, xv, a3);
        b3 = _mm256_fmadd_ps(hb, xv, b3);
      }
      float s[8] = {Sum8(a0), Sum8(a1), Sum8(a2), Sum8(a3), Sum8(b0), Sum8(b1), Sum8(b2), Sum8(b3)};
      for (int64_t i = d8; i < d; ++i) {
        const float ha = _cvtsh_ss(va[i]), hb = _cvtsh_ss(vb[i]);
        s[0] += x0[i] * ha;
        s[1] += x1[i] * ha;
        s[2] += x2[i] * ha;
        s[3] += x3[i] * ha;
        s[4] += x0[i] * hb;
        s[5] += x1[i] * hb;
        s[6] += x2[i] * hb;
        s[7] += x3[i] * hb;
      }
      for (int q = 0; q < 4; ++q) {
        y[(j + q) * ldy + r] = s[q];
        y[(j + q) * ldy + r + 1] = s[4 + q];
      }
    }
    for (; r < rows; ++r) {
      for (int q = 0; q < 4; ++q)
        HalfGemvImpl(v + r * d, 1, d, x + (j + q) * ldx, y + (j + q) * ldy + r);
    }
  }
  for (; j < nx; ++j) HalfGemvImpl(v, rows, d, x + j * ldx, y + j * ldy);
}

}  // namespace

bool HalfAvailable() {
  static const bool available =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && CpuHasF16c();
  return available;
}

void ToHalf(const float* in, int64_t n, uint16_t* out) { ToHalfImpl(in, n, out); }
void FromHalf(const uint16_t* in, int64_t n, float* out) { FromHalfImpl(in, n, out); }

void HalfGemvRows(const uint16_t* v, int64_t rows, int64_t d, const float* x, int64_t nx,
                  int64_t ldx, float* y, int64_t ldy) {
  HalfGemvRowsImpl(v, rows, d, x, nx, ldx, y, ldy);
}

#else  // not x86-64: never available, never called.

bool HalfAvailable() { return false; }
void ToHalf(const float*, int64_t, uint16_t*) { std::abort(); }
void FromHalf(const uint16_t*, int64_t, float*) { std::abort(); }
void HalfGemvRows(const uint16_t*, int64_t, int64_t, const float*, int64_t, int64_t, float*,
                  int64_t) {
  std::abort();
}

#endif

}  // namespace dendro::hppca_internal
