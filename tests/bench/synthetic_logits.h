// Synthetic logits with a known hierarchy, shared by the L2H benchmarks and
// the serving load generator.
//
// K leaf clusters of a balanced three-level tree, b0 x b1 x b2 = K as even
// as K's divisors allow (10 x 10 x 10 for K = 1000, 4 x 5 x 5 for
// K = 100). A row of leaf y gets, for leaf c,
//   logit = (-1.2 * d(y, c) + noise) * t + 2 * [c == y],
// d = number of levels up to the lowest common ancestor (0..3), noise ~
// approximately N(0, 0.8^2) (sum of four uniforms), t in [0.5, 2] per row.
// Row i draws from SplitMix64(seed + i), so the rows do not depend on how
// many threads fill them.
#ifndef DENDRO_TESTS_BENCH_SYNTHETIC_LOGITS_H_
#define DENDRO_TESTS_BENCH_SYNTHETIC_LOGITS_H_

#include <cmath>
#include <cstdint>
#include <vector>

namespace dendro::bench {

inline uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// d(y, c) for every pair of the k leaves, row-major.
inline std::vector<uint8_t> LeafDistances(int32_t k) {
  auto largest_divisor_at_most = [](int32_t v, double limit) {
    for (int32_t c = static_cast<int32_t>(std::floor(limit + 1e-9)); c > 1; --c) {
      if (v % c == 0) return c;
    }
    return 1;
  };
  const int32_t b0 = largest_divisor_at_most(k, std::cbrt(static_cast<double>(k)));
  const int32_t b1 = largest_divisor_at_most(k / b0, std::sqrt(static_cast<double>(k / b0)));
  const int32_t b2 = k / b0 / b1;
  std::vector<uint8_t> dist(static_cast<size_t>(k) * k);
  for (int32_t y = 0; y < k; ++y) {
    for (int32_t c = 0; c < k; ++c) {
      const bool same1 = y / b2 == c / b2, same0 = y / (b1 * b2) == c / (b1 * b2);
      dist[static_cast<size_t>(y) * k + c] = y == c ? 0 : (same1 ? 1 : (same0 ? 2 : 3));
    }
  }
  return dist;
}

// Writes row `i` (k floats) into `row`; `dist` from LeafDistances(k).
inline void SyntheticLogitRow(int64_t i, int32_t k, uint64_t seed,
                              const std::vector<uint8_t>& dist, float* row) {
  uint64_t state = seed + static_cast<uint64_t>(i);
  const auto y = static_cast<int32_t>(SplitMix64(state) % static_cast<uint64_t>(k));
  const double t = 0.5 + 1.5 * static_cast<double>(SplitMix64(state) >> 11) * 0x1.0p-53;
  const uint8_t* d = dist.data() + static_cast<size_t>(y) * k;
  for (int32_t c = 0; c < k; ++c) {
    const uint64_t r = SplitMix64(state);
    // sum of four U(0,1) from 16-bit slices: mean 2, variance 1/3
    const double u = static_cast<double>(r & 0xffff) + static_cast<double>((r >> 16) & 0xffff) +
                     static_cast<double>((r >> 32) & 0xffff) + static_cast<double>(r >> 48);
    const double noise = (u / 65536.0 - 2.0) * (0.8 * std::sqrt(3.0));
    row[c] = static_cast<float>((-1.2 * d[c] + noise) * t + (c == y ? 2.0 : 0.0));
  }
}

}  // namespace dendro::bench

#endif  // DENDRO_TESTS_BENCH_SYNTHETIC_LOGITS_H_
