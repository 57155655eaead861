#include "core/l2h/kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>

#if defined(__AVX512F__) && defined(__AVX512VL__)
// GCC 12 warns, wrongly, that the undefined source operand of some of these
// intrinsics "may be used uninitialized" where they are inlined; the
// warning's location is in the header.
#if defined(__clang__)
#include <immintrin.h>
#else
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
#endif

namespace dendro {
namespace l2h_internal {
namespace {

constexpr int64_t kPairwiseBlock = 128;     // numpy's PW_BLOCKSIZE
constexpr int64_t kReduceBuffer = 8192;        // numpy's default ufunc buffer size

}  // namespace

double PairwiseSumOf8OrMore(const double* a, int64_t n) {
  if (n <= kPairwiseBlock) {
    double r[8];
    for (int j = 0; j < 8; ++j) r[j] = a[j];
    int64_t i = 8;
    for (; i < n - (n % 8); i += 8) {
      for (int j = 0; j < 8; ++j) r[j] += a[i + j];
    }
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  int64_t n2 = n / 2;
  n2 -= n2 % 8;
  return PairwiseSum(a, n2) + PairwiseSum(a + n2, n - n2);
}

double NumpySum(const double* a, int64_t n) {
  double res = 0.0;
  for (int64_t begin = 0; begin < n; begin += kReduceBuffer) {
    res += PairwiseSum(a + begin, std::min(kReduceBuffer, n - begin));
  }
  return res;
}

#if defined(__AVX512F__) && defined(__AVX512VL__)
namespace {

// Exp (kernels.h) on eight lanes: the same operations in the same order,
// with the table lookup as a two-register permute (it reads the low four
// bits of each index lane, which are j).
class ExpLanes {
 public:
  ExpLanes()
      : table_lo_(_mm512_loadu_pd(kExp2Sixteenths)),
        table_hi_(_mm512_loadu_pd(kExp2Sixteenths + 8)) {}

  __m512d operator()(__m512d x) const {
    const __m512d min = _mm512_set1_pd(kExpMin);
    const __m512d shifter = _mm512_set1_pd(kExpShifter);
    const __m512d xc = _mm512_min_pd(_mm512_max_pd(x, min), _mm512_set1_pd(kExpMax));
    const __m512d t = _mm512_fmadd_pd(xc, _mm512_set1_pd(kExp16Log2e), shifter);
    const __m512d n = _mm512_sub_pd(t, shifter);
    // fma(-n, c, r) as fnmadd(n, c, r): the same single rounding.
    __m512d r = _mm512_fnmadd_pd(n, _mm512_set1_pd(kExpLn2Hi16), xc);
    r = _mm512_fnmadd_pd(n, _mm512_set1_pd(kExpLn2Lo16), r);
    __m512d p = _mm512_set1_pd(1.0 / 5040.0);
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 720.0));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 120.0));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 24.0));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 6.0));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(0.5));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0));
    const __m512d q = _mm512_mul_pd(p, r);
    const __m512i ni = _mm512_sub_epi64(_mm512_castpd_si512(t), _mm512_castpd_si512(shifter));
    const __m512d table = _mm512_permutex2var_pd(table_lo_, ni, table_hi_);
    const __m512d y0 = _mm512_fmadd_pd(table, q, table);
    const __m512i scale = _mm512_slli_epi64(
        _mm512_add_epi64(_mm512_srai_epi64(ni, 4), _mm512_set1_epi64(1023)), 52);
    const __m512d y = _mm512_mul_pd(y0, _mm512_castsi512_pd(scale));
    // x >= -708, false for -inf: those lanes become +0.0.
    return _mm512_maskz_mov_pd(_mm512_cmp_pd_mask(x, min, _CMP_GE_OQ), y);
  }

 private:
  __m512d table_lo_;
  __m512d table_hi_;
};

inline __mmask8 TailMask(int64_t left) {
  return static_cast<__mmask8>((1u << left) - 1u);
}

// The terms Exp((x[c] - shift) + penalty[c]) (without the penalty if it is
// null), +0.0 at `skip` (-1: none): ExpShifted's values and MaskedExpSum's
// terms.
class ExpTerms {
 public:
  ExpTerms(const float* x, double shift, const float* penalty, int32_t skip)
      : x_(x), penalty_(penalty), skip_(skip), shift_(_mm512_set1_pd(shift)) {}

  // Terms [c, c + 8) in the lanes of `load`, +0.0 in the others.
  __m512d Lanes(int32_t c, __mmask8 load) const {
    __m512d d = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_maskz_loadu_ps(load, x_ + c)), shift_);
    if (penalty_ != nullptr) {
      d = _mm512_add_pd(d, _mm512_cvtps_pd(_mm256_maskz_loadu_ps(load, penalty_ + c)));
    }
    __mmask8 keep = load;
    if (skip_ >= c && skip_ < c + 8) keep &= static_cast<__mmask8>(~(1u << (skip_ - c)));
    return _mm512_maskz_mov_pd(keep, exp_(d));
  }

  // PairwiseSum (kernels.h) of terms [begin, begin + n), n >= 8.
  double PairwiseSum(int32_t begin, int32_t n) const {
    if (n > kPairwiseBlock) {
      int32_t n2 = n / 2;
      n2 -= n2 % 8;
      return PairwiseSum(begin, n2) + PairwiseSum(begin + n2, n - n2);
    }
    const int32_t full = n - n % 8;
    __m512d acc = Lanes(begin, 0xff);
    for (int32_t c = 8; c < full; c += 8) acc = _mm512_add_pd(acc, Lanes(begin + c, 0xff));
    alignas(64) double r[8];
    _mm512_store_pd(r, acc);
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    if (full < n) {
      alignas(64) double tail[8];
      _mm512_store_pd(tail, Lanes(begin + full, TailMask(n - full)));
      for (int32_t q = 0; q < n - full; ++q) res += tail[q];
    }
    return res;
  }

 private:
  const float* x_;
  const float* penalty_;
  int32_t skip_;
  __m512d shift_;
  ExpLanes exp_;
};

}  // namespace

void ExpInPlace(double* x, int64_t n) {
  const ExpLanes exp;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm512_storeu_pd(x + i, exp(_mm512_loadu_pd(x + i)));
  if (i < n) {
    const __mmask8 m = TailMask(n - i);
    _mm512_mask_storeu_pd(x + i, m, exp(_mm512_maskz_loadu_pd(m, x + i)));
  }
}

void ExpShifted(const float* x, int32_t n, double shift, const float* penalty, double* out) {
  const ExpTerms terms(x, shift, penalty, -1);
  int32_t c = 0;
  for (; c + 8 <= n; c += 8) _mm512_storeu_pd(out + c, terms.Lanes(c, 0xff));
  if (c < n) _mm512_mask_storeu_pd(out + c, TailMask(n - c), terms.Lanes(c, TailMask(n - c)));
}

#else  // no AVX-512: the scalar Exp, which compilers vectorise with gathers

void ExpInPlace(double* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = Exp(x[i]);
}

void ExpShifted(const float* x, int32_t n, double shift, const float* penalty, double* out) {
  if (penalty == nullptr) {
    for (int32_t c = 0; c < n; ++c) out[c] = Exp(static_cast<double>(x[c]) - shift);
  } else {
    for (int32_t c = 0; c < n; ++c) {
      out[c] = Exp((static_cast<double>(x[c]) - shift) + static_cast<double>(penalty[c]));
    }
  }
}

#endif

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// GCC/Clang vector extensions: the plain loops are float max-reductions
// with an index, which compilers do not vectorise without -ffast-math.
using V8f = float __attribute__((vector_size(32)));
using V8i = int32_t __attribute__((vector_size(32)));

// A value/column candidate; "better" = larger value, then lower column.
struct Cand {
  float v = kNegInf;
  int32_t c = -1;
};
inline bool Better(float v, int32_t c, const Cand& than) {
  return c >= 0 && (than.c < 0 || v > than.v || (v == than.v && c < than.c));
}

constexpr int32_t kNoColumn = std::numeric_limits<int32_t>::max();

// Horizontal reductions by halving (vector shuffles; GCC and clang spell
// them differently).
#if defined(__clang__)
#define DENDRO_SHUFFLE(v, T, ...) __builtin_shufflevector(v, v, __VA_ARGS__)
#else
#define DENDRO_SHUFFLE(v, T, ...) __builtin_shuffle(v, T{__VA_ARGS__})
#endif
inline float HorizontalMax(V8f v) {
  V8f s = DENDRO_SHUFFLE(v, V8i, 4, 5, 6, 7, 0, 1, 2, 3);
  v = s > v ? s : v;
  s = DENDRO_SHUFFLE(v, V8i, 2, 3, 0, 1, 6, 7, 4, 5);
  v = s > v ? s : v;
  s = DENDRO_SHUFFLE(v, V8i, 1, 0, 3, 2, 5, 4, 7, 6);
  v = s > v ? s : v;
  return v[0];
}
inline int32_t HorizontalMin(V8i v) {
  V8i s = DENDRO_SHUFFLE(v, V8i, 4, 5, 6, 7, 0, 1, 2, 3);
  v = s < v ? s : v;
  s = DENDRO_SHUFFLE(v, V8i, 2, 3, 0, 1, 6, 7, 4, 5);
  v = s < v ? s : v;
  s = DENDRO_SHUFFLE(v, V8i, 1, 0, 3, 2, 5, 4, 7, 6);
  v = s < v ? s : v;
  return v[0];
}

inline V8f Load(const float* x, const float* penalty, int32_t i) {
  V8f v;
  std::memcpy(&v, x + i, sizeof v);
  if (penalty != nullptr) {
    V8f p;
    std::memcpy(&p, penalty + i, sizeof p);
    v += p;
  }
  return v;
}

}  // namespace

namespace {

// Top2, and with kCheck whether every x[c] is finite (x - x is 0 exactly
// for finite x, NaN for NaN and infinities); without kCheck it returns true.
template <bool kCheck>
bool Top2Impl(const float* x, int32_t n, const float* penalty, int32_t* first,
              int32_t* second) {
  // Eight lanes, lane j sees columns j, j+8, ...; each keeps its best two
  // with strict comparisons, so ties keep the lower column, and within a
  // lane the runner-up is the best of the lane's other columns.
  const V8f neg = {kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf};
  const V8i none = {-1, -1, -1, -1, -1, -1, -1, -1};
  V8f m1 = neg;
  V8f m2 = neg;
  V8i i1 = none;
  V8i i2 = none;
  V8i idx = {0, 1, 2, 3, 4, 5, 6, 7};
  const V8i step = {8, 8, 8, 8, 8, 8, 8, 8};
  V8i finite = {-1, -1, -1, -1, -1, -1, -1, -1};  // all ones while finite
  int32_t c = 0;
  for (; c + 8 <= n; c += 8) {
    const V8f v = Load(x, penalty, c);
    if constexpr (kCheck) finite &= (v - v) == 0.0f;
    const V8i gt1 = v > m1;
    const V8i gt2 = v > m2;
    m2 = gt1 ? m1 : (gt2 ? v : m2);
    i2 = gt1 ? i1 : (gt2 ? idx : i2);
    m1 = gt1 ? v : m1;
    i1 = gt1 ? idx : i1;
    idx += step;
  }
  // The overall best is the best lane top; the runner-up is the best of the
  // other lanes' tops and every lane's second (a lane's second never beats
  // its own top, so including the winner's lane is harmless). Lanes that
  // saw only -inf (masked) columns hold -inf and take no part.
  Cand top;
  Cand run;
  const float best = HorizontalMax(m1);
  if (best != kNegInf) {
    const V8i big = {kNoColumn, kNoColumn, kNoColumn, kNoColumn,
                     kNoColumn, kNoColumn, kNoColumn, kNoColumn};
    const int32_t col = HorizontalMin((m1 == best) ? i1 : big);
    top = {best, col};
    const V8f others = (i1 == col) ? neg : m1;
    const float second = HorizontalMax(m2 > others ? m2 : others);
    if (second != kNegInf) {
      const V8i a = (others == second) ? i1 : big;
      const V8i b = (m2 == second) ? i2 : big;
      run = {second, HorizontalMin(b < a ? b : a)};
    }
  }
  // Tail columns come after every column above: strict comparisons.
  bool tail_finite = true;
  for (; c < n; ++c) {
    const float v = penalty != nullptr ? x[c] + penalty[c] : x[c];
    if constexpr (kCheck) tail_finite = tail_finite && std::isfinite(v);
    if (v == kNegInf) continue;
    if (top.c < 0 || v > top.v) {
      run = top;
      top = {v, c};
    } else if (run.c < 0 || v > run.v) {
      run = {v, c};
    }
  }
  *first = top.c;
  *second = run.c;
  if constexpr (kCheck) {
    bool all = tail_finite;
    for (int j = 0; j < 8; ++j) all = all && finite[j] != 0;
    return all;
  }
  return true;
}

}  // namespace

void Top2(const float* x, int32_t n, const float* penalty, int32_t* first, int32_t* second) {
  Top2Impl<false>(x, n, penalty, first, second);
}

bool Top2Finite(const float* x, int32_t n, int32_t* first, int32_t* second) {
  return Top2Impl<true>(x, n, nullptr, first, second);
}

int32_t MaskedArgmax(const float* x, int32_t n, const float* penalty, int32_t also_skip) {
  if (also_skip >= 0 && also_skip < n) {
    int32_t first;
    int32_t second;
    Top2(x, n, penalty, &first, &second);
    return first == also_skip ? second : first;
  }
  const V8f neg = {kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf};
  const V8i none = {-1, -1, -1, -1, -1, -1, -1, -1};
  V8f m0 = neg;
  V8f m1 = neg;
  V8i i0 = none;
  V8i i1 = none;
  V8i idx = {0, 1, 2, 3, 4, 5, 6, 7};
  const V8i eight = {8, 8, 8, 8, 8, 8, 8, 8};
  const V8i step = {16, 16, 16, 16, 16, 16, 16, 16};
  int32_t c = 0;
  for (; c + 16 <= n; c += 16) {  // two independent lane sets
    const V8f a = Load(x, penalty, c);
    const V8f b = Load(x, penalty, c + 8);
    const V8i ga = a > m0;
    const V8i gb = b > m1;
    m0 = ga ? a : m0;
    i0 = ga ? idx : i0;
    m1 = gb ? b : m1;
    i1 = gb ? idx + eight : i1;
    idx += step;
  }
  Cand top;
  for (int j = 0; j < 8; ++j) {
    if (m0[j] != kNegInf && Better(m0[j], i0[j], top)) top = {m0[j], i0[j]};
    if (m1[j] != kNegInf && Better(m1[j], i1[j], top)) top = {m1[j], i1[j]};
  }
  for (; c < n; ++c) {
    const float v = penalty != nullptr ? x[c] + penalty[c] : x[c];
    if (v != kNegInf && (top.c < 0 || v > top.v)) top = {v, c};
  }
  return top.c;
}

double MaskedExpSum(const float* x, int32_t n, double shift, const float* penalty,
                    int32_t also_skip, double* buf) {
#if defined(__AVX512F__) && defined(__AVX512VL__)
  // The terms are computed eight at a time where NumpySum adds them, so
  // they never go through `buf`: within a pairwise block the eight
  // accumulators of PairwiseSum are the eight lanes. Same operations, same
  // order, same bits as the general path below (a single reduction block).
  if (n >= 8 && n <= kReduceBuffer) {
    const ExpTerms terms(x, shift, penalty, also_skip);
    return 0.0 + terms.PairwiseSum(0, n);  // NumpySum starts from 0.0
  }
#endif
  // -inf maps to exactly +0.0 in Exp.
  ExpShifted(x, n, shift, penalty, buf);
  if (also_skip >= 0 && also_skip < n) buf[also_skip] = 0.0;
  return NumpySum(buf, n);
}

}  // namespace l2h_internal
}  // namespace dendro
