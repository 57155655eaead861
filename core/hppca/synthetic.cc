#include "core/hppca/synthetic.h"

#include <cmath>
#include <random>

namespace dendro {
namespace {

RowMatrixD Gaussian(int64_t rows, int64_t cols, std::mt19937_64& rng) {
  std::normal_distribution<double> n(0.0, 1.0);
  RowMatrixD m(rows, cols);
  for (int64_t i = 0; i < m.size(); ++i) m.data()[i] = n(rng);
  return m;
}

// d x rank basis: random unit directions scaled by scale / sqrt(1 + j).
RowMatrixD Basis(int64_t d, int32_t rank, double scale, std::mt19937_64& rng) {
  RowMatrixD b = Gaussian(d, rank, rng);
  for (int32_t j = 0; j < rank; ++j) {
    b.col(j) *= scale / std::sqrt(1.0 + j) / b.col(j).norm();
  }
  return b;
}

uint64_t Mix(uint64_t a, uint64_t b) {
  uint64_t x = a * 0x9E3779B97F4A7C15ULL ^ (b + 0x632BE59BD9B4E019ULL + (a << 6) + (a >> 2));
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 29;
  return x;
}

}  // namespace

TwoLevelSpec ImageNetLikeSpec(int32_t groups, int32_t classes_per_group, uint64_t seed) {
  TwoLevelSpec spec;
  spec.groups = groups;
  spec.classes_per_group = classes_per_group;
  spec.dim = 640;
  spec.group_rank = 20;
  spec.class_rank = 20;
  spec.group_spread = 0.02;
  spec.class_spread = 0.018;
  spec.group_scale = 0.3;
  spec.class_scale = 0.3;
  spec.noise = 0.12;
  spec.seed = seed;
  spec.label_offset = 100;
  spec.label_stride = 3;
  return spec;
}

TwoLevelGenerator::TwoLevelGenerator(const TwoLevelSpec& spec) : spec_(spec) {
  std::mt19937_64 rng(Mix(spec.seed, 0xC0FFEE));
  centres_ = Gaussian(spec.groups, spec.dim, rng) * spec.group_spread;
  for (int32_t g = 0; g < spec.groups; ++g) {
    group_bases_.push_back(Basis(spec.dim, spec.group_rank, spec.group_scale, rng));
  }
}

LabelledData TwoLevelGenerator::Sample(int32_t per_class, uint64_t seed, int32_t first,
                                       int32_t last) const {
  if (last < 0) last = num_classes();
  const int64_t d = spec_.dim;
  const int32_t count = last - first;
  LabelledData out;
  out.x.resize(static_cast<int64_t>(count) * per_class, d);
  out.labels.resize(static_cast<int64_t>(count) * per_class);
#pragma omp parallel for schedule(dynamic, 4)
  for (int32_t i = 0; i < count; ++i) {
    const int32_t k = first + i;
    const int32_t g = group_of(k);
    // Class parameters: seeded by (spec seed, class).
    std::mt19937_64 crng(Mix(spec_.seed, 1000003ULL + k));
    const Eigen::VectorXd mu = centres_.row(g).transpose() +
                               Gaussian(d, 1, crng).col(0) * spec_.class_spread;
    const RowMatrixD a = Basis(d, spec_.class_rank, spec_.class_scale, crng);
    // Points: seeded by (draw seed, class).
    std::mt19937_64 prng(Mix(Mix(seed, 77), k));
    const RowMatrixD zg = Gaussian(per_class, spec_.group_rank, prng);
    const RowMatrixD zc = Gaussian(per_class, spec_.class_rank, prng);
    RowMatrixD x = Gaussian(per_class, d, prng) * spec_.noise;
    x += zg * group_bases_[g].transpose() + zc * a.transpose();
    x.rowwise() += mu.transpose();
    const int64_t r0 = static_cast<int64_t>(i) * per_class;
    out.x.middleRows(r0, per_class) = x.cast<float>();
    for (int32_t p = 0; p < per_class; ++p) out.labels[r0 + p] = label_of(k);
  }
  return out;
}

}  // namespace dendro
