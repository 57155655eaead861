#include "core/ghhc/synthetic.h"

#include <cmath>

#include "core/ghhc/random.h"

namespace dendro {
namespace {

double Normal(ghhc::Rng& rng) {
  // Box-Muller (one of the pair).
  const double u = rng.Open01(), v = rng.Open01();
  return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
}

}  // namespace

HierarchicalGaussianData GenerateHierarchicalGaussian(const HierarchicalGaussianSpec& spec) {
  const int32_t b0 = spec.branching[0], b1 = spec.branching[1], b2 = spec.branching[2];
  const int64_t d = spec.dim;
  const int64_t leaves = int64_t{b0} * b1 * b2;
  ghhc::Rng rng(ghhc::StreamSeed(spec.seed, 0xC3));
  std::vector<double> top(b0 * d), mid(int64_t{b0} * b1 * d), leaf(leaves * d);
  for (auto& v : top) v = spec.level_scale[0] * Normal(rng);
  for (int64_t c = 0; c < int64_t{b0} * b1; ++c) {
    for (int64_t q = 0; q < d; ++q)
      mid[c * d + q] = top[(c / b1) * d + q] + spec.level_scale[1] * Normal(rng);
  }
  for (int64_t c = 0; c < leaves; ++c) {
    for (int64_t q = 0; q < d; ++q)
      leaf[c * d + q] = mid[(c / b2) * d + q] + spec.level_scale[2] * Normal(rng);
  }
  HierarchicalGaussianData data;
  data.x.resize(spec.n * d);
  data.leaf.resize(spec.n);
  data.top.resize(spec.n);
#pragma omp parallel for schedule(static, 4096)
  for (int64_t i = 0; i < spec.n; ++i) {
    ghhc::Rng r(ghhc::StreamSeed(spec.seed, 0xD4, static_cast<uint64_t>(i)));
    const int64_t c = i % leaves;
    data.leaf[i] = c;
    data.top[i] = c / (int64_t{b1} * b2);
    for (int64_t q = 0; q < d; ++q) {
      data.x[i * d + q] = static_cast<float>(leaf[c * d + q] + spec.point_scale * Normal(r));
    }
  }
  return data;
}

}  // namespace dendro
