// Maximum-density paths between mixture components (t-NEB, Algorithm 2).
//
// For a pair (i, j) of components the path starts as `path_points` equally
// spaced points on the segment mu_i -> mu_j (both ends included). The
// interior points then take `path_steps` Adam steps (beta1 0.9, beta2 0.999,
// eps 1e-8, the given learning rate) on the loss -sum_p log p_mix(p); the
// end points stay at the means. After every step the path, read as a
// polyline, is resampled to `path_points` points at equal arc-length
// spacing (the Adam moments stay with the point index, as in the authors'
// code). Finally the path is resampled to `eval_points` equidistant points
// and the pair's similarity is the minimum log-density among them: the
// lowest "water level" at which the two components are still connected
// along this path. All points of all pairs go through the density and its
// gradient together in blocks (one dense product per component and block).
#ifndef DENDRO_CORE_TNEB_NEB_H_
#define DENDRO_CORE_TNEB_NEB_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/common/run_context.h"
#include "core/matrix/matrix.h"
#include "core/tneb/mixture.h"

namespace dendro {

struct NebOptions {
  int32_t path_points = 100;  // l, end points included (>= 2)
  int32_t path_steps = 200;   // s (>= 0)
  double learning_rate = 0.01;
  int32_t eval_points = 1024;  // final evaluation points (>= 2)
  int num_threads = 0;         // 0: all cores
  bool keep_paths = false;     // return the optimised paths
};

struct NebPaths {
  // Per pair: min over the evaluation points of log p_mix.
  std::vector<double> similarity;
  // Per pair: arc-length fraction in [0, 1] (from the first component)
  // where that minimum lies.
  std::vector<double> argmin_position;
  // With keep_paths: per pair a path_points x d matrix.
  std::vector<RowMatrixD> paths;
};

// InvalidArgument naming the first bad field (path_points < 2, path_steps <
// 0, learning_rate not a finite number > 0, eval_points < 2); the messages
// use the field names t-NEB's options share.
absl::Status ValidateNebOptions(const NebOptions& options);

// Pairs are component indices of `mixture` (a != b); options as
// ValidateNebOptions requires (checked). Reports progress per
// optimisation step; CancelledError if ctx is cancelled (checked every step,
// and within a step and the final evaluation between row chunks of about
// 5e7 flops of density work each).
absl::StatusOr<NebPaths> OptimizePaths(const StudentMixture& mixture,
                                       absl::Span<const std::pair<int32_t, int32_t>> pairs,
                                       const NebOptions& options, RunContext& ctx);

// Resamples the polyline `path` (rows are points, >= 2 rows) to `count`
// points equally spaced by arc length; the end points are kept exactly. A
// path of length 0 yields `count` copies of its first point.
RowMatrixD ResampleEquidistant(const RowMatrixD& path, int32_t count);

}  // namespace dendro

#endif  // DENDRO_CORE_TNEB_NEB_H_
