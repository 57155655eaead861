// Synthetic labelled data with a two-level class structure, for tests and
// benchmarks of hierarchical classifiers.
//
// G groups ("true super-classes") of C classes each. Group g has a centre
// c_g ~ N(0, group_spread^2 I) and a basis A_g (d x group_rank); class k of
// group g has mean mu_k = c_g + N(0, class_spread^2 I) and its own basis A_k
// (d x class_rank). A point of class k is
//   x = mu_k + A_g z_g + A_k z_k + noise * e,   z, e standard normal,
// where the columns of A are random directions scaled by group_scale /
// class_scale times a decay 1 / sqrt(1 + j) over the column index j. Every
// random quantity of class k is drawn from a generator seeded by (seed, k),
// so classes can be generated independently and in parallel, and Sample()
// with a different seed gives fresh points of the same classes.
#ifndef DENDRO_CORE_HPPCA_SYNTHETIC_H_
#define DENDRO_CORE_HPPCA_SYNTHETIC_H_

#include <cstdint>
#include <vector>

#include "core/matrix/matrix.h"

namespace dendro {

struct TwoLevelSpec {
  int32_t groups = 10;
  int32_t classes_per_group = 10;
  int64_t dim = 64;
  int32_t group_rank = 8;
  int32_t class_rank = 8;
  double group_spread = 3.0;
  double class_spread = 1.0;
  double group_scale = 1.0;
  double class_scale = 0.6;
  double noise = 0.2;
  uint64_t seed = 1;
  // Label of class k is label_offset + label_stride * k.
  int64_t label_offset = 0;
  int64_t label_stride = 1;
};

// The benchmarks' ImageNet-shaped difficulty (d = 640, rank-20 group and
// class subspaces): at K = 1,000 flat PPCA accuracy is about 0.63 and the
// true super-class is among the top 5 for about 99% of rows, as in the
// paper's CLIP experiments. Labels are 100 + 3k.
TwoLevelSpec ImageNetLikeSpec(int32_t groups, int32_t classes_per_group, uint64_t seed = 1);

struct LabelledData {
  RowMatrixF x;                 // rows x dim
  std::vector<int64_t> labels;  // rows
};

class TwoLevelGenerator {
 public:
  explicit TwoLevelGenerator(const TwoLevelSpec& spec);
  int32_t num_classes() const { return spec_.groups * spec_.classes_per_group; }
  int32_t group_of(int32_t k) const { return k / spec_.classes_per_group; }
  int64_t label_of(int32_t k) const { return spec_.label_offset + spec_.label_stride * k; }
  // `per_class` points of each class in [first, last) (all classes by
  // default), rows grouped by class; `seed` selects the draw.
  LabelledData Sample(int32_t per_class, uint64_t seed, int32_t first = 0,
                      int32_t last = -1) const;

 private:
  TwoLevelSpec spec_;
  RowMatrixD centres_;                 // groups x dim
  std::vector<RowMatrixD> group_bases_;  // dim x group_rank each
};

}  // namespace dendro

#endif  // DENDRO_CORE_HPPCA_SYNTHETIC_H_
