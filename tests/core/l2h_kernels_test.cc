// The numeric kernels behind RunL2h: numpy's summation order (against
// numpy's own results, tests/golden/l2h/numpy_sums.json), the vectorised exp
// (against std::exp) and the masked argmax / exp-sum (against brute force).
#include "core/l2h/kernels.h"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/source_path.h"

// tests/CMakeLists.txt builds this file a second and third time without
// AVX-512, to test the kernels' portable path.
#if defined(DENDRO_PORTABLE_KERNELS) && defined(__AVX512F__)
#error "built to test the portable kernels, but the flags enable AVX-512"
#endif

namespace dendro {
namespace l2h_internal {
namespace {

// The arrays of gen_l2h_goldens.py's numpy_sums(): exact in both languages.
std::vector<double> SumsArray(int64_t n) {
  std::vector<double> a(n);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t h = (static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull) >> 11;
    a[i] = std::ldexp(static_cast<double>(h), -53) * std::ldexp(1.0, static_cast<int>(i % 37) - 18);
  }
  return a;
}

TEST(L2hKernels, NumpySumMatchesNumpyBitForBit) {
  std::ifstream in(SourcePath("tests/golden/l2h/numpy_sums.json"));
  ASSERT_TRUE(in.good());
  const nlohmann::json j = nlohmann::json::parse(in);
  int differs_from_sequential = 0;
  for (const auto& e : j["arrays"]) {
    const int64_t n = e["n"];
    const std::vector<double> a = SumsArray(n);
    const double want_sum = std::strtod(e["sum"].get<std::string>().c_str(), nullptr);
    const double want_mean = std::strtod(e["mean"].get<std::string>().c_str(), nullptr);
    const double seq = std::strtod(e["sequential"].get<std::string>().c_str(), nullptr);
    double my_seq = 0.0;
    for (double v : a) my_seq += v;
    ASSERT_EQ(my_seq, seq) << "array generator differs from the script's, n=" << n;
    EXPECT_EQ(NumpySum(a.data(), n), want_sum) << "n=" << n;
    EXPECT_EQ(NumpyMean(a.data(), n), want_mean) << "n=" << n;
    if (want_sum != seq) ++differs_from_sequential;
  }
  EXPECT_GE(differs_from_sequential, 10);
}

TEST(L2hKernels, PairwiseSumSmallCasesAreSequentialOrBlocked) {
  // n < 8: plain left-to-right from 0.
  const double a[] = {1e16, 1.0, -1e16, 1.0, 3.0};
  EXPECT_EQ(PairwiseSum(a, 5), ((((0.0 + 1e16) + 1.0) + -1e16) + 1.0) + 3.0);
  // n = 9: eight accumulators then the remainder.
  const double b[] = {1e16, 1.0, 1.0, 1.0, -1e16, 1.0, 1.0, 1.0, 1.0};
  const double want = (((1e16 + 1.0) + (1.0 + 1.0)) + ((-1e16 + 1.0) + (1.0 + 1.0))) + 1.0;
  EXPECT_EQ(PairwiseSum(b, 9), want);
  EXPECT_EQ(NumpySum(b, 0), 0.0);
}

TEST(L2hKernels, ExpIsAccurate) {
  double worst = 0.0;
  for (double x = -708.0; x <= 709.0; x += 0.0137) {
    const double want = std::exp(x);
    const double got = Exp(x);
    worst = std::max(worst, std::abs(got - want) / want);
  }
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-40.0, 0.0);
  for (int i = 0; i < 200000; ++i) {
    const double x = u(rng);
    worst = std::max(worst, std::abs(Exp(x) - std::exp(x)) / std::exp(x));
  }
  EXPECT_LT(worst, 1e-15);
  EXPECT_EQ(Exp(0.0), 1.0);
  EXPECT_EQ(Exp(-708.5), 0.0);
  EXPECT_EQ(Exp(-1e300), 0.0);
  EXPECT_EQ(Exp(-std::numeric_limits<double>::infinity()), 0.0);
}

TEST(L2hKernels, VectorisedExpEqualsScalarExp) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(-750.0, 5.0);
  for (int n : {1, 3, 8, 17, 64, 1001}) {
    std::vector<double> v(n);
    for (double& x : v) x = u(rng);
    std::vector<double> w = v;
    ExpInPlace(w.data(), n);
    for (int i = 0; i < n; ++i) ASSERT_EQ(w[i], Exp(v[i])) << "n=" << n << " i=" << i;
  }
  // The edges of the range, in every lane.
  const std::vector<double> edges = {-std::numeric_limits<double>::infinity(),
                                     -708.0000000001, -708.0, -707.9999999999, -0.0, 0.0,
                                     1e-300, 708.9999999, 709.0, -1e-17, 3.0 * std::log(2.0) / 32.0};
  for (size_t lane = 0; lane < 8; ++lane) {
    std::vector<double> v(edges.size() + lane, 1.0);
    std::copy(edges.begin(), edges.end(), v.begin() + lane);
    std::vector<double> w = v;
    ExpInPlace(w.data(), static_cast<int64_t>(w.size()));
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(w[i], Exp(v[i])) << "x=" << v[i];
  }
}

TEST(L2hKernels, ExpTableIsCorrectlyRounded) {
  // Each entry is the double nearest 2^(j/16): within half an ulp of the
  // long double value (whose own error is 2^-11 of a double ulp).
  for (int j = 0; j < 16; ++j) {
    const long double want = std::exp2l(static_cast<long double>(j) / 16.0L);
    const double got = kExp2Sixteenths[j];
    const long double ulp = std::nextafter(got, 4.0) - got;
    EXPECT_LE(std::fabs(static_cast<long double>(got) - want), 0.5001L * ulp) << "j=" << j;
  }
}

TEST(L2hKernels, ExpShiftedEqualsScalarExp) {
  // Every length up to three vectors and a long row, with and without a
  // mask, including the tails the vector code handles with masked loads.
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(-80.0f, 20.0f);
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  std::vector<int> lengths;
  for (int n = 1; n <= 25; ++n) lengths.push_back(n);
  lengths.push_back(1000);
  for (int n : lengths) {
    std::vector<float> x(n);
    std::vector<float> penalty(n);
    for (int c = 0; c < n; ++c) {
      x[c] = u(rng);
      penalty[c] = rng() % 3 == 0 ? kMasked : 0.0f;
    }
    const double shift = x[rng() % n];
    std::vector<double> out(n + 1, -1.0);  // out[n] must stay untouched
    ExpShifted(x.data(), n, shift, nullptr, out.data());
    for (int c = 0; c < n; ++c) {
      ASSERT_EQ(out[c], Exp(static_cast<double>(x[c]) - shift)) << "n=" << n << " c=" << c;
    }
    ASSERT_EQ(out[n], -1.0) << "n=" << n;
    ExpShifted(x.data(), n, shift, penalty.data(), out.data());
    for (int c = 0; c < n; ++c) {
      const double want =
          Exp((static_cast<double>(x[c]) - shift) + static_cast<double>(penalty[c]));
      ASSERT_EQ(out[c], want) << "masked n=" << n << " c=" << c;
      if (penalty[c] == kMasked) {
        ASSERT_EQ(out[c], 0.0);
      }
    }
    ASSERT_EQ(out[n], -1.0) << "n=" << n;
  }
}

TEST(L2hKernels, MaskedArgmaxMatchesBruteForce) {
  std::mt19937_64 rng(11);
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 70);
    std::vector<float> x(n);
    std::vector<float> pen(n, 0.0f);
    // few distinct values so that ties are common
    for (float& v : x) v = static_cast<float>(static_cast<int>(rng() % 5)) - 2.0f;
    for (float& p : pen) p = (rng() % 3 == 0) ? kMasked : 0.0f;
    const int also = (rng() % 2) ? static_cast<int>(rng() % n) : -1;
    const float* with_mask = pen.data();
    for (const float* penalty : {static_cast<const float*>(nullptr), with_mask}) {
      int want = -1;
      for (int c = 0; c < n; ++c) {
        if (c == also || (penalty != nullptr && penalty[c] != 0.0f)) continue;
        if (want < 0 || x[c] > x[want]) want = c;
      }
      ASSERT_EQ(MaskedArgmax(x.data(), n, penalty, also), want) << "trial " << trial;
    }
  }
}

TEST(L2hKernels, Top2MatchesBruteForce) {
  std::mt19937_64 rng(13);
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  for (int trial = 0; trial < 5000; ++trial) {
    // Several vectors and a tail; every fourth row is longer.
    const int n = 1 + static_cast<int>(rng() % (trial % 4 == 0 ? 300 : 90));
    std::vector<float> x(n);
    std::vector<float> pen(n, 0.0f);
    const int distinct = 1 + static_cast<int>(rng() % 6);  // ties are common
    for (float& v : x) v = static_cast<float>(static_cast<int>(rng() % distinct)) - 2.0f;
    for (float& p : pen) p = (rng() % 3 == 0) ? kMasked : 0.0f;
    const float* with_mask = pen.data();
    for (const float* penalty : {static_cast<const float*>(nullptr), with_mask}) {
      auto argmax_except = [&](int skip) {
        int best = -1;
        for (int c = 0; c < n; ++c) {
          if (c == skip || (penalty != nullptr && penalty[c] != 0.0f)) continue;
          if (best < 0 || x[c] > x[best]) best = c;
        }
        return best;
      };
      const int want_first = argmax_except(-1);
      const int want_second = want_first < 0 ? -1 : argmax_except(want_first);
      int first = -2;
      int second = -2;
      Top2(x.data(), n, penalty, &first, &second);
      ASSERT_EQ(first, want_first) << "trial " << trial << " n=" << n;
      ASSERT_EQ(second, want_second) << "trial " << trial << " n=" << n;
    }
  }
}

// Top2Finite: Top2's answer on finite rows (extremes included), false as
// soon as one entry anywhere in the row, vector part or tail, is not finite.
TEST(L2hKernels, Top2FiniteChecksEveryColumn) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::mt19937_64 rng(17);
  for (int n : {1, 3, 7, 8, 9, 17, 100, 1001}) {
    std::vector<float> x(n);
    for (float& v : x) v = static_cast<float>(static_cast<int>(rng() % 11)) - 5.0f;
    x[rng() % n] = std::numeric_limits<float>::max();
    x[rng() % n] = std::numeric_limits<float>::lowest();
    int want_first = -2, want_second = -2, first = -2, second = -2;
    Top2(x.data(), n, nullptr, &want_first, &want_second);
    ASSERT_TRUE(Top2Finite(x.data(), n, &first, &second)) << "n=" << n;
    EXPECT_EQ(first, want_first) << "n=" << n;
    EXPECT_EQ(second, want_second) << "n=" << n;
    for (int c = 0; c < n; ++c) {
      for (float bad : {std::numeric_limits<float>::quiet_NaN(), kInf, -kInf}) {
        std::vector<float> y = x;
        y[c] = bad;
        EXPECT_FALSE(Top2Finite(y.data(), n, &first, &second))
            << "n=" << n << " column " << c << " = " << bad;
      }
    }
  }
}

TEST(L2hKernels, MaskedExpSumMatchesBruteForce) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> g(0.0f, 3.0f);
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  for (int trial = 0; trial < 500; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 300);
    std::vector<float> x(n);
    std::vector<float> pen(n, 0.0f);
    for (float& v : x) v = g(rng);
    for (float& p : pen) p = (rng() % 4 == 0) ? kMasked : 0.0f;
    const int also = static_cast<int>(rng() % n);
    const double shift = 1.5;
    std::vector<double> buf(n);
    double want = 0.0;
    for (int c = 0; c < n; ++c) {
      if (c != also && pen[c] == 0.0f) want += std::exp(static_cast<double>(x[c]) - shift);
    }
    const double got = MaskedExpSum(x.data(), n, shift, pen.data(), also, buf.data());
    ASSERT_NEAR(got, want, 1e-14 * want + 1e-300) << "trial " << trial;
  }
}

TEST(L2hKernels, MaskedExpSumIsExpThenNumpySum) {
  // Bit for bit the definition (kernels.h): Exp per column, +0.0 at the
  // skipped column, NumpySum over all n. Every n to past one pairwise block
  // (128), lengths that split into blocks, and both sides of numpy's
  // reduction buffer (8192); with and without a mask.
  std::mt19937_64 rng(9);
  std::normal_distribution<float> g(0.0f, 4.0f);
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  std::vector<int> lengths;
  for (int n = 1; n <= 140; ++n) lengths.push_back(n);
  for (int n : {255, 256, 257, 1000, 1001, 4099, 8192, 8193}) lengths.push_back(n);
  for (int n : lengths) {
    for (int trial = 0; trial < 6; ++trial) {
      std::vector<float> x(n);
      std::vector<float> pen(n, 0.0f);
      for (float& v : x) v = g(rng);
      for (float& p : pen) p = (rng() % 4 == 0) ? kMasked : 0.0f;
      const int also = trial == 0 ? -1 : (trial == 1 ? n - 1 : static_cast<int>(rng() % n));
      const double shift = x[rng() % n];
      const float* const penalties[] = {nullptr, pen.data()};
      for (const float* penalty : penalties) {
        std::vector<double> want(n);
        ExpShifted(x.data(), n, shift, penalty, want.data());
        if (also >= 0) want[also] = 0.0;
        std::vector<double> buf(n);
        const double got = MaskedExpSum(x.data(), n, shift, penalty, also, buf.data());
        ASSERT_EQ(got, NumpySum(want.data(), n))
            << "n=" << n << " skip=" << also << (penalty ? " masked" : "");
      }
    }
  }
}

}  // namespace
}  // namespace l2h_internal
}  // namespace dendro
