#include "core/tneb/graph.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <utility>

#include "Eigen/Core"

namespace dendro {

std::vector<int64_t> GraphSampleRows(int64_t n, int64_t max_rows) {
  const int64_t stride = std::max<int64_t>(1, (n + max_rows - 1) / max_rows);
  std::vector<int64_t> rows;
  rows.reserve(n / stride + 1);
  for (int64_t i = 0; i < n; i += stride) rows.push_back(i);
  return rows;
}

namespace {
constexpr int64_t kQueryBlock = 256;
}  // namespace

int64_t GraphPeakBytes(int64_t n, int64_t d) {
  const int64_t s = std::min(n, kGraphMaxRows);
  return s * d * 8 + s * kGraphNeighbors * 4 + s * 8 + kQueryBlock * s * 8 * 2;
}

absl::StatusOr<std::vector<int32_t>> NearestNeighborGraph(const MatrixView& x,
                                                          const FeatureTransform& t,
                                                          absl::Span<const int64_t> rows, int32_t k,
                                                          int num_threads,
                                                          const std::function<bool()>& cancelled) {
  const int64_t s = static_cast<int64_t>(rows.size());
  const int64_t d = x.cols();
  k = static_cast<int32_t>(std::clamp<int64_t>(k, 0, std::max<int64_t>(0, s - 1)));
  std::vector<int32_t> out(static_cast<size_t>(s * k));
  if (k == 0) return out;
  // Sampled rows, transformed, as columns (d x s).
  Eigen::MatrixXd pts(d, s);
  {
    Eigen::MatrixXd one(1, d);
    for (int64_t r = 0; r < s; ++r) {
      LoadRows(MatrixView(x.data() + rows[r] * d, 1, d), t, 0, &one);
      pts.col(r) = one.row(0).transpose();
    }
  }
  const Eigen::VectorXd norm = pts.colwise().squaredNorm().transpose();
  const int64_t blocks = (s + kQueryBlock - 1) / kQueryBlock;
  std::atomic<bool> stop{false};
  const int threads = std::max(1, num_threads);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t b = 0; b < blocks; ++b) {
    if (stop.load(std::memory_order_relaxed)) continue;
    if (cancelled && cancelled()) {
      stop.store(true);
      continue;
    }
    const int64_t q0 = b * kQueryBlock;
    const int64_t qn = std::min(kQueryBlock, s - q0);
    // dist(j, i) = |p_j|^2 - 2 p_j . q_i  (+ |q_i|^2, constant per query).
    Eigen::MatrixXd dist = -2.0 * (pts.transpose() * pts.middleCols(q0, qn));
    dist.colwise() += norm;
    std::vector<std::pair<double, int32_t>> cand(static_cast<size_t>(s));
    for (int64_t i = 0; i < qn; ++i) {
      const int64_t q = q0 + i;
      for (int64_t j = 0; j < s; ++j) {
        cand[j] = {j == q ? std::numeric_limits<double>::infinity() : dist(j, i),
                   static_cast<int32_t>(j)};
      }
      std::partial_sort(cand.begin(), cand.begin() + k, cand.end());
      for (int32_t c = 0; c < k; ++c) out[q * k + c] = cand[c].second;
    }
  }
  if (stop.load()) return absl::CancelledError("job cancelled");
  return out;
}

std::vector<SimilarityEdge> GraphSimilarities(int32_t num_leaves,
                                              absl::Span<const int32_t> leaf_of_row,
                                              absl::Span<const int32_t> neighbors, int32_t k,
                                              const RowMatrixD& means) {
  const int32_t l = num_leaves;
  std::vector<double> cut(static_cast<size_t>(l) * l, 0.0);
  std::vector<double> vol(l, 0.0);
  const int64_t s = static_cast<int64_t>(leaf_of_row.size());
  for (int64_t r = 0; r < s && k > 0; ++r) {
    const int32_t a = leaf_of_row[r];
    for (int32_t c = 0; c < k; ++c) {
      const int32_t b = leaf_of_row[neighbors[r * k + c]];
      vol[a] += 1.0;
      if (a != b) cut[static_cast<size_t>(std::min(a, b)) * l + std::max(a, b)] += 1.0;
    }
  }
  double max_dist = 0.0;
  for (int32_t a = 0; a < l; ++a) {
    for (int32_t b = a + 1; b < l; ++b) {
      max_dist = std::max(max_dist, (means.row(a) - means.row(b)).norm());
    }
  }
  std::vector<SimilarityEdge> edges;
  edges.reserve(static_cast<size_t>(l) * (l - 1) / 2);
  for (int32_t a = 0; a < l; ++a) {
    for (int32_t b = a + 1; b < l; ++b) {
      const double c = cut[static_cast<size_t>(a) * l + b];
      const double v = std::min(vol[a], vol[b]);
      double sim;
      if (c > 0.0 && v > 0.0) {
        sim = std::min(1.0, c / v);
      } else {
        sim = -(means.row(a) - means.row(b)).norm() / (1.0 + max_dist);
      }
      edges.push_back(SimilarityEdge{a, b, sim});
    }
  }
  return edges;
}

}  // namespace dendro
