#include "core/tneb/neb.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/common/cpus.h"
#include "core/common/status_macros.h"

namespace dendro {
namespace {

// Cancellation inside the density passes. The passes run in row chunks
// with a poll between them; a chunk holds about kFlopsPerPoll of density
// work (so that many components in many dimensions still poll often), at
// most kMaxPollRows rows, and is a whole multiple of the mixture's row
// blocks (256 rows for gradients, 512 for densities): every block then
// holds the same rows as in one pass over all points, so the results are
// the same bits.
constexpr double kFlopsPerPoll = 5e7;
constexpr int64_t kMaxPollRows = 256 * 64;
constexpr int64_t kGradBlock = 256;     // StudentMixture::LogDensityAndGradient
constexpr int64_t kDensityBlock = 512;  // StudentMixture::LogDensity

// Rows per chunk: a multiple of `block`, in [block, max(block, kMaxPollRows)].
int64_t PollRows(double flops_per_row, int64_t block) {
  const double rows = kFlopsPerPoll / std::max(flops_per_row, 1.0);
  const int64_t blocks = static_cast<int64_t>(
      std::clamp(rows / static_cast<double>(block), 1.0,
                 static_cast<double>(std::max<int64_t>(1, kMaxPollRows / block))));
  return blocks * block;
}

constexpr double kBeta1 = 0.9;
constexpr double kBeta2 = 0.999;
constexpr double kEps = 1e-8;
// Pairs evaluated at once in the final pass (bounds the memory used for
// pairs x eval_points x d doubles).
constexpr int64_t kEvalPointsPerBatch = int64_t{1} << 18;

// Smallest amount of work worth a thread (about a millisecond).
constexpr double kMinFlopsPerThread = 4e6;

// Writes points [q0, q1) of `count` equidistant points of the polyline
// rows [0, l) of `path` into out rows [0, q1 - q0).
template <typename In, typename Out>
void ResampleRange(const In& path, int64_t l, int64_t count, int64_t q0, int64_t q1, Out* out) {
  const int64_t d = path.cols();
  std::vector<double> cum(l, 0.0);
  for (int64_t i = 1; i < l; ++i) {
    cum[i] = cum[i - 1] + (path.row(i) - path.row(i - 1)).norm();
  }
  const double total = cum[l - 1];
  if (!(total > 0.0)) {
    for (int64_t q = q0; q < q1; ++q) out->row(q - q0) = path.row(0);
    return;
  }
  // Targets grow with q, so the segment walk below, started from segment 0
  // at q = 0, reaches for q0 the first segment whose end is not below q0's
  // target (or the last segment): start there directly.
  int64_t seg = 0;
  if (q0 > 0) {
    const double target = total * static_cast<double>(q0) / static_cast<double>(count - 1);
    seg = std::lower_bound(cum.begin() + 1, cum.begin() + (l - 1), target) - (cum.begin() + 1);
  }
  for (int64_t q = q0; q < q1; ++q) {
    if (q == 0) {
      out->row(q - q0) = path.row(0);
      continue;
    }
    if (q == count - 1) {
      out->row(q - q0) = path.row(l - 1);
      continue;
    }
    const double target = total * static_cast<double>(q) / static_cast<double>(count - 1);
    while (seg < l - 2 && cum[seg + 1] < target) ++seg;
    const double len = cum[seg + 1] - cum[seg];
    const double f = len > 0.0 ? std::clamp((target - cum[seg]) / len, 0.0, 1.0) : 0.0;
    for (int64_t j = 0; j < d; ++j) {
      (*out)(q - q0, j) = (1.0 - f) * path(seg, j) + f * path(seg + 1, j);
    }
  }
}

// Writes `count` equidistant points of the polyline rows [0, l) of `path`
// into out rows [0, count).
template <typename In, typename Out>
void Resample(const In& path, int64_t l, int64_t count, Out* out) {
  ResampleRange(path, l, count, 0, count, out);
}

}  // namespace

RowMatrixD ResampleEquidistant(const RowMatrixD& path, int32_t count) {
  RowMatrixD out(count, path.cols());
  Resample(path, path.rows(), count, &out);
  return out;
}

absl::Status ValidateNebOptions(const NebOptions& o) {
  if (o.path_points < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("path_points must be >= 2 (the two end points), got ", o.path_points));
  }
  if (o.path_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat("path_steps must be >= 0, got ", o.path_steps));
  }
  if (!(o.learning_rate > 0.0) || !std::isfinite(o.learning_rate)) {
    return absl::InvalidArgumentError(
        absl::StrCat("learning_rate must be a finite number > 0, got ", o.learning_rate));
  }
  if (o.eval_points < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("eval_points must be >= 2, got ", o.eval_points));
  }
  return absl::OkStatus();
}

absl::StatusOr<NebPaths> OptimizePaths(const StudentMixture& mixture,
                                       absl::Span<const std::pair<int32_t, int32_t>> pairs,
                                       const NebOptions& o, RunContext& ctx) {
  DENDRO_RETURN_IF_ERROR(ValidateNebOptions(o));
  const int m = mixture.num_components();
  const int d = mixture.dim();
  for (const auto& [a, b] : pairs) {
    if (a < 0 || b < 0 || a >= m || b >= m || a == b) {
      return absl::InvalidArgumentError(absl::StrCat(
          "path pair (", a, ", ", b, ") is not two distinct components of [0, ", m, ")"));
    }
  }
  const int threads = ThreadsOrDefault(o.num_threads);
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
  const double flops = 2.0 * np * l * m * (d + 4.0) * d * std::max(1, o.path_steps);
  const int groups = static_cast<int>(
      std::min<int64_t>(np, std::clamp(flops / kMinFlopsPerThread, 1.0, 1.0 * threads)));
  std::atomic<bool> cancelled{false};
  const double flops_per_row = 2.0 * m * (d + 4.0) * d;
  const int64_t grad_poll_rows = PollRows(flops_per_row, kGradBlock);
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
    for (int32_t step = 0; step < o.path_steps; ++step) {
      if (cancelled.load(std::memory_order_relaxed)) break;
      if (ctx.Cancelled()) {
        cancelled.store(true);
        break;
      }
      if (g == 0) {
        ctx.Report(static_cast<double>(step) / (o.path_steps + 1.0),
                   absl::StrCat(stage_prefix, step, "/", o.path_steps));
      }
      // The density pass in row chunks, polling for a cancel between them:
      // one step over long paths can take seconds (see PollRows).
      for (int64_t r0 = 0; r0 < pts_g.rows(); r0 += grad_poll_rows) {
        if (r0 > 0 && (cancelled.load(std::memory_order_relaxed) || ctx.Cancelled())) {
          cancelled.store(true);
          break;
        }
        const int64_t rn = std::min<int64_t>(grad_poll_rows, pts_g.rows() - r0);
        mixture.LogDensityAndGradient(pts_g.middleRows(r0, rn), &logp, &grad_chunk, 1);
        grad.middleRows(r0, rn) = grad_chunk;
      }
      if (cancelled.load(std::memory_order_relaxed)) break;
      b1t *= kBeta1;
      b2t *= kBeta2;
      const double lr_t = o.learning_rate * std::sqrt(1.0 - b2t) / (1.0 - b1t);
      const double eps_t = kEps * std::sqrt(1.0 - b2t);
      int64_t rows_since_poll = 0;
      for (int64_t p = 0; p < p1 - p0; ++p) {
        // The update and resampling are O(l d) per path: poll after every
        // kMaxPollRows rows of them.
        rows_since_poll += l;
        if (rows_since_poll >= kMaxPollRows) {
          rows_since_poll = 0;
          if (cancelled.load(std::memory_order_relaxed) || ctx.Cancelled()) {
            cancelled.store(true);
            break;
          }
        }
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
  ctx.Report(static_cast<double>(o.path_steps) / (o.path_steps + 1.0),
             absl::StrCat("NEB paths (", np, " pairs): evaluating"));

  // Final evaluation at eval_points equidistant points per path, for
  // batches of pairs. The points of a batch are generated and evaluated in
  // row chunks with a poll between them (see PollRows: each chunk's 512-row
  // blocks are those of one pass over the batch), so neither the time to
  // see a cancel nor the memory grows with eval_points. The minimum of each
  // path is folded over its chunks in point order, first index on ties, as
  // minCoeff over the whole path.
  out.similarity.resize(np);
  out.argmin_position.resize(np);
  const int64_t e = o.eval_points;
  const int64_t per_batch = std::max<int64_t>(1, kEvalPointsPerBatch / e);
  const int64_t eval_rows = PollRows(flops_per_row, kDensityBlock);
  std::vector<int64_t> argmin(np, 0);
  Eigen::MatrixXd ev;
  for (int64_t p0 = 0; p0 < np; p0 += per_batch) {
    const int64_t nb = std::min(per_batch, np - p0);
    const int64_t rows = nb * e;
    for (int64_t r0 = 0; r0 < rows; r0 += eval_rows) {
      if (ctx.Cancelled()) return absl::CancelledError("job cancelled");
      const int64_t rn = std::min(eval_rows, rows - r0);
      ev.resize(rn, d);
      // Batch-local pairs [q0, q1) have points in this chunk.
      const int64_t q0 = r0 / e, q1 = (r0 + rn - 1) / e + 1;
#pragma omp parallel for schedule(static) num_threads(threads) \
    if (q1 - q0 > 1 && rn * d > (1 << 20))
      for (int64_t q = q0; q < q1; ++q) {
        const int64_t a = std::max(r0, q * e), b = std::min(r0 + rn, (q + 1) * e);
        const auto path = pts.middleRows((p0 + q) * l, l);
        auto block = ev.middleRows(a - r0, b - a);
        ResampleRange(path, l, e, a - q * e, b - q * e, &block);
      }
      const Eigen::VectorXd lp = mixture.LogDensity(ev, threads);
      for (int64_t q = q0; q < q1; ++q) {
        const int64_t a = std::max(r0, q * e), b = std::min(r0 + rn, (q + 1) * e);
        double& best = out.similarity[p0 + q];
        int64_t& at = argmin[p0 + q];
        for (int64_t r = a; r < b; ++r) {
          const int64_t idx = r - q * e;
          const double v = lp[r - r0];
          if (idx == 0) {
            best = v;
            at = 0;
          } else if (v < best) {
            best = v;
            at = idx;
          }
        }
      }
    }
  }
  for (int64_t p = 0; p < np; ++p) {
    out.argmin_position[p] = static_cast<double>(argmin[p]) / static_cast<double>(e - 1);
  }
  if (o.keep_paths) {
    out.paths.reserve(np);
    for (int64_t p = 0; p < np; ++p) out.paths.emplace_back(pts.middleRows(p * l, l));
  }
  ctx.Report(1.0, "NEB paths done");
  return out;
}

}  // namespace dendro
