// GCC 12.2 reports false (maybe-)uninitialized warnings inside its own
// AVX-512 intrinsics headers when Eigen is built with -march=native (GCC bug
// 105593, fixed in 12.3/13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "core/tneb/neb.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace dendro {
namespace {

// Rows of path points between cancellation checks within one step (a
// multiple of StudentMixture's 256-row gradient blocks).
constexpr int64_t kCancelCheckRows = 256 * 64;

constexpr double kBeta1 = 0.9;
constexpr double kBeta2 = 0.999;
constexpr double kEps = 1e-8;
// Pairs evaluated at once in the final pass (bounds the memory used for
// pairs x eval_points x d doubles).
constexpr int64_t kEvalPointsPerBatch = int64_t{1} << 18;

int ResolveThreads(int n) { return n > 0 ? n : std::max(1, omp_get_max_threads()); }

// Smallest amount of work worth a thread (about a millisecond).
constexpr double kMinFlopsPerThread = 4e6;

// Writes `count` equidistant points of the polyline rows [0, l) of `path`
// into out rows [0, count).
template <typename In, typename Out>
void Resample(const In& path, int64_t l, int64_t count, Out* out) {
  const int64_t d = path.cols();
  std::vector<double> cum(l, 0.0);
  for (int64_t i = 1; i < l; ++i) {
    cum[i] = cum[i - 1] + (path.row(i) - path.row(i - 1)).norm();
  }
  const double total = cum[l - 1];
  if (!(total > 0.0)) {
    for (int64_t q = 0; q < count; ++q) out->row(q) = path.row(0);
    return;
  }
  int64_t seg = 0;
  for (int64_t q = 0; q < count; ++q) {
    if (q == 0) {
      out->row(q) = path.row(0);
      continue;
    }
    if (q == count - 1) {
      out->row(q) = path.row(l - 1);
      continue;
    }
    const double target = total * static_cast<double>(q) / static_cast<double>(count - 1);
    while (seg < l - 2 && cum[seg + 1] < target) ++seg;
    const double len = cum[seg + 1] - cum[seg];
    const double f = len > 0.0 ? std::clamp((target - cum[seg]) / len, 0.0, 1.0) : 0.0;
    for (int64_t j = 0; j < d; ++j) {
      (*out)(q, j) = (1.0 - f) * path(seg, j) + f * path(seg + 1, j);
    }
  }
}

}  // namespace

RowMatrixD ResampleEquidistant(const RowMatrixD& path, int32_t count) {
  RowMatrixD out(count, path.cols());
  Resample(path, path.rows(), count, &out);
  return out;
}

absl::StatusOr<NebPaths> OptimizePaths(const StudentMixture& mixture,
                                       absl::Span<const std::pair<int32_t, int32_t>> pairs,
                                       const NebOptions& o, RunContext& ctx) {
  if (o.path_points < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("path_points must be >= 2 (the two end points), got ", o.path_points));
  }
  if (o.steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat("path steps must be >= 0, got ", o.steps));
  }
  if (!(o.learning_rate > 0.0) || !std::isfinite(o.learning_rate)) {
    return absl::InvalidArgumentError(
        absl::StrCat("learning_rate must be a finite number > 0, got ", o.learning_rate));
  }
  if (o.eval_points < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("eval_points must be >= 2, got ", o.eval_points));
  }
  const int m = mixture.num_components();
  const int d = mixture.dim();
  for (const auto& [a, b] : pairs) {
    if (a < 0 || b < 0 || a >= m || b >= m || a == b) {
      return absl::InvalidArgumentError(absl::StrCat(
          "path pair (", a, ", ", b, ") is not two distinct components of [0, ", m, ")"));
    }
  }
  const int threads = ResolveThreads(o.num_threads);
  const int64_t np = static_cast<int64_t>(pairs.size());
  const int64_t l = o.path_points;
  NebPaths out;
  if (np == 0) return out;

  // All paths stacked: rows [p * l, (p + 1) * l) are pair p's points.
  Eigen::MatrixXd pts(np * l, d);
  const RowMatrixD& mu = mixture.means();
  for (int64_t p = 0; p < np; ++p) {
    for (int64_t i = 0; i < l; ++i) {
      const double f = static_cast<double>(i) / static_cast<double>(l - 1);
      pts.row(p * l + i) = (1.0 - f) * mu.row(pairs[p].first) + f * mu.row(pairs[p].second);
    }
  }
  Eigen::MatrixXd adam_m = Eigen::MatrixXd::Zero(np * l, d);
  Eigen::MatrixXd adam_v = Eigen::MatrixXd::Zero(np * l, d);
  const std::string stage_prefix = absl::StrCat("NEB paths (", np, " pairs): step ");

  // Paths are independent, so each thread optimises its own contiguous
  // group of pairs for all steps (its points still go through the density
  // in dense blocks). No synchronisation per step: idle OpenMP threads
  // spin-wait at barriers, which costs more than the work on a busy host.
  const double flops = 2.0 * np * l * m * (d + 4.0) * d * std::max(1, o.steps);
  const int groups = static_cast<int>(
      std::min<int64_t>(np, std::clamp(flops / kMinFlopsPerThread, 1.0, 1.0 * threads)));
  std::atomic<bool> cancelled{false};
#pragma omp parallel num_threads(groups) if (groups > 1)
  {
    const int g = groups > 1 ? omp_get_thread_num() : 0;
    const int64_t p0 = np * g / groups, p1 = np * (g + 1) / groups;
    auto pts_g = pts.middleRows(p0 * l, (p1 - p0) * l);
    auto m_g = adam_m.middleRows(p0 * l, (p1 - p0) * l);
    auto v_g = adam_v.middleRows(p0 * l, (p1 - p0) * l);
    Eigen::VectorXd logp;
    Eigen::MatrixXd grad(pts_g.rows(), d), grad_chunk;
    RowMatrixD path;
    double b1t = 1.0, b2t = 1.0;
    for (int32_t step = 0; step < o.steps; ++step) {
      if (cancelled.load(std::memory_order_relaxed)) break;
      if (ctx.Cancelled()) {
        cancelled.store(true);
        break;
      }
      if (g == 0) {
        ctx.Report(static_cast<double>(step) / (o.steps + 1),
                   absl::StrCat(stage_prefix, step, "/", o.steps));
      }
      // The density pass in row chunks, polling for a cancel between them:
      // one step over long paths can take seconds. Chunks are whole
      // multiples of the mixture's 256-row gradient blocks, so the result is
      // the same as in one pass.
      for (int64_t r0 = 0; r0 < pts_g.rows(); r0 += kCancelCheckRows) {
        if (r0 > 0 && (cancelled.load(std::memory_order_relaxed) || ctx.Cancelled())) {
          cancelled.store(true);
          break;
        }
        const int64_t rn = std::min<int64_t>(kCancelCheckRows, pts_g.rows() - r0);
        mixture.LogDensityAndGradient(pts_g.middleRows(r0, rn), &logp, &grad_chunk, 1);
        grad.middleRows(r0, rn) = grad_chunk;
      }
      if (cancelled.load(std::memory_order_relaxed)) break;
      b1t *= kBeta1;
      b2t *= kBeta2;
      const double lr_t = o.learning_rate * std::sqrt(1.0 - b2t) / (1.0 - b1t);
      const double eps_t = kEps * std::sqrt(1.0 - b2t);
      for (int64_t p = 0; p < p1 - p0; ++p) {
        for (int64_t i = 1; i < l - 1; ++i) {
          const int64_t r = p * l + i;
          for (int j = 0; j < d; ++j) {
            const double gr = -grad(r, j);  // loss = -log p
            double& m1 = m_g(r, j);
            double& v1 = v_g(r, j);
            m1 = kBeta1 * m1 + (1.0 - kBeta1) * gr;
            v1 = kBeta2 * v1 + (1.0 - kBeta2) * gr * gr;
            // Equivalent to lr * m_hat / (sqrt(v_hat) + eps).
            pts_g(r, j) -= lr_t * m1 / (std::sqrt(v1) + eps_t);
          }
        }
        path = pts_g.middleRows(p * l, l);
        auto block = pts_g.middleRows(p * l, l);
        Resample(path, l, l, &block);
      }
    }
  }
  if (cancelled.load() || ctx.Cancelled()) return absl::CancelledError("job cancelled");
  ctx.Report(static_cast<double>(o.steps) / (o.steps + 1),
             absl::StrCat("NEB paths (", np, " pairs): evaluating"));

  // Final evaluation at eval_points equidistant points per path.
  out.similarity.resize(np);
  out.argmin_position.resize(np);
  const int64_t e = o.eval_points;
  const int64_t per_batch = std::max<int64_t>(1, kEvalPointsPerBatch / e);
  Eigen::MatrixXd ev;
  for (int64_t p0 = 0; p0 < np; p0 += per_batch) {
    if (ctx.Cancelled()) return absl::CancelledError("job cancelled");
    const int64_t nb = std::min(per_batch, np - p0);
    ev.resize(nb * e, d);
#pragma omp parallel for schedule(static) num_threads(threads) if (nb * e * d > (1 << 20))
    for (int64_t q = 0; q < nb; ++q) {
      const auto path = pts.middleRows((p0 + q) * l, l);
      auto block = ev.middleRows(q * e, e);
      Resample(path, l, e, &block);
    }
    const Eigen::VectorXd lp = mixture.LogDensity(ev, threads);
    for (int64_t q = 0; q < nb; ++q) {
      Eigen::Index at = 0;
      out.similarity[p0 + q] = lp.segment(q * e, e).minCoeff(&at);
      out.argmin_position[p0 + q] = static_cast<double>(at) / static_cast<double>(e - 1);
    }
  }
  if (o.keep_paths) {
    out.paths.reserve(np);
    for (int64_t p = 0; p < np; ++p) out.paths.emplace_back(pts.middleRows(p * l, l));
  }
  ctx.Report(1.0, "NEB paths done");
  return out;
}

}  // namespace dendro
