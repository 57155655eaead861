#include "core/l2h/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace dendro {
namespace l2h_internal {
namespace {

constexpr int64_t kPairwiseBlock = 128;     // numpy's PW_BLOCKSIZE
constexpr int64_t kReduceBuffer = 8192;        // numpy's default ufunc buffer size

// exp(x) = 2^k * exp(r), x = k ln2 + r, |r| <= ln2/2, exp(r) by its Taylor
// polynomial of degree 13 (truncation error < 5e-18 relative). Every step
// is an explicit fma or a single rounding, so the scalar and vectorised
// forms of the loop give identical bits.
inline double ExpKernel(double x) {
  constexpr double kLog2e = 1.4426950408889634;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // fdlibm split of ln 2
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  constexpr double kShifter = 6755399441055744.0;  // 1.5 * 2^52
  constexpr double kMin = -708.0;
  constexpr double kMax = 709.0;
  const double xc = x < kMin ? kMin : (x > kMax ? kMax : x);
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
  return x < kMin ? 0.0 : y;
}

}  // namespace

double PairwiseSum(const double* a, int64_t n) {
  if (n < 8) {
    double res = 0.0;
    for (int64_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
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

void ExpInPlace(double* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = ExpKernel(x[i]);
}

double Exp(double x) { return ExpKernel(x); }

namespace {

using V8f = float __attribute__((vector_size(32)));

// Maximum of x[c] + penalty[c] over c in [0, n) (penalty may be null;
// -inf if n == 0). Two vector accumulators; GCC/Clang vector extensions
// because the plain loop is a float max-reduction that the compiler will
// not vectorise without -ffast-math.
float RangeMax(const float* x, int32_t n, const float* penalty) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const V8f neg = {kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf};
  V8f lane0 = neg;
  V8f lane1 = neg;
  int32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    V8f a;
    V8f b;
    std::memcpy(&a, x + i, sizeof a);
    std::memcpy(&b, x + i + 8, sizeof b);
    if (penalty != nullptr) {
      V8f pa;
      V8f pb;
      std::memcpy(&pa, penalty + i, sizeof pa);
      std::memcpy(&pb, penalty + i + 8, sizeof pb);
      a += pa;
      b += pb;
    }
    lane0 = a > lane0 ? a : lane0;
    lane1 = b > lane1 ? b : lane1;
  }
  lane0 = lane1 > lane0 ? lane1 : lane0;
  float m = kNegInf;
  for (int j = 0; j < 8; ++j) m = lane0[j] > m ? lane0[j] : m;
  for (; i < n; ++i) {
    const float v = penalty != nullptr ? x[i] + penalty[i] : x[i];
    m = v > m ? v : m;
  }
  return m;
}

}  // namespace

int32_t MaskedArgmax(const float* x, int32_t n, const float* penalty, int32_t also_skip) {
  float m;
  if (also_skip >= 0 && also_skip < n) {
    const int32_t a = also_skip;
    m = std::max(RangeMax(x, a, penalty),
                 RangeMax(x + a + 1, n - a - 1, penalty == nullptr ? nullptr : penalty + a + 1));
  } else {
    m = RangeMax(x, n, penalty);
  }
  if (m == -std::numeric_limits<float>::infinity()) return -1;
  for (int32_t c = 0; c < n; ++c) {
    if (x[c] == m && c != also_skip && (penalty == nullptr || penalty[c] == 0.0f)) return c;
  }
  return -1;
}

double MaskedExpSum(const float* x, int32_t n, double shift, const float* penalty,
                    int32_t also_skip, double* buf) {
  // -inf maps to exactly +0.0 in ExpKernel.
  if (penalty == nullptr) {
    for (int32_t c = 0; c < n; ++c) buf[c] = static_cast<double>(x[c]) - shift;
  } else {
    for (int32_t c = 0; c < n; ++c) {
      buf[c] = (static_cast<double>(x[c]) - shift) + static_cast<double>(penalty[c]);
    }
  }
  if (also_skip >= 0 && also_skip < n) {
    buf[also_skip] = -std::numeric_limits<double>::infinity();
  }
  ExpInPlace(buf, n);
  return NumpySum(buf, n);
}

}  // namespace l2h_internal
}  // namespace dendro
