// Small deterministic random number generation for gHHC (internal).
#ifndef DENDRO_CORE_GHHC_RANDOM_H_
#define DENDRO_CORE_GHHC_RANDOM_H_

#include <cmath>
#include <cstdint>

namespace dendro::ghhc {

inline uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A stream identified by (seed, a, b): independent of how work is split
// across threads.
inline uint64_t StreamSeed(uint64_t seed, uint64_t a, uint64_t b = 0) {
  uint64_t s = seed ^ 0x6A09E667F3BCC908ull;
  uint64_t h = SplitMix64(s);
  s = h ^ (a * 0xD1B54A32D192ED03ull);
  h = SplitMix64(s);
  s = h ^ (b * 0x8CB92BA72F3D8DD7ull);
  return SplitMix64(s);
}

// xoshiro256** (Blackman & Vigna).
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t& w : s_) w = SplitMix64(seed);
  }
  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, n) (n >= 1), by Lemire's multiply-shift (bias < n / 2^64).
  uint64_t Below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
  }
  // Uniform in the open interval (0, 1).
  double Open01() { return (static_cast<double>(Next() >> 11) + 0.5) * 0x1.0p-53; }
  // Standard Gumbel: -log(-log(U)).
  double Gumbel() { return -std::log(-std::log(Open01())); }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace dendro::ghhc

#endif  // DENDRO_CORE_GHHC_RANDOM_H_
