// Synthetic data with a known three-level hierarchy, for gHHC's tests and
// benchmark: a Gaussian tree with branching b0 x b1 x b2.
#ifndef DENDRO_CORE_GHHC_SYNTHETIC_H_
#define DENDRO_CORE_GHHC_SYNTHETIC_H_

#include <array>
#include <cstdint>
#include <vector>

namespace dendro {

struct HierarchicalGaussianSpec {
  int64_t n = 10000;
  int32_t dim = 64;
  std::array<int32_t, 3> branching = {4, 5, 5};  // 100 leaf classes
  // Standard deviation per coordinate of each level's offset from its
  // parent's centre (level 0 from the origin), and of the points around their
  // leaf centre.
  std::array<double, 3> level_scale = {1.0, 0.5, 0.25};
  double point_scale = 0.15;
  uint64_t seed = 1;
};

struct HierarchicalGaussianData {
  std::vector<float> x;       // n x dim row-major
  std::vector<int64_t> leaf;  // class at the finest level, in [0, b0 b1 b2)
  std::vector<int64_t> top;   // class at the coarsest level, in [0, b0)
};

// Point i belongs to leaf class i mod (b0 b1 b2) (balanced); leaf class c has
// ancestors c / (b1 b2) (top) and c / b2 (middle). Deterministic in `seed`,
// independent of threads.
HierarchicalGaussianData GenerateHierarchicalGaussian(const HierarchicalGaussianSpec& spec);

}  // namespace dendro

#endif  // DENDRO_CORE_GHHC_SYNTHETIC_H_
