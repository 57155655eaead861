// Per-class PPCA models from one pass over labelled rows (paper section 3.3).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "Eigen/Eigenvalues"
#include "absl/strings/str_cat.h"
#include "core/hppca/internal.h"
#include "core/hppca/top_eigen.h"

namespace dendro::hppca_internal {
namespace {

using RowMatrixDX = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Rows gathered per GEMM when a class is reduced through its d x d scatter.
constexpr int64_t kChunkRows = 4096;

// Copies row `src` of x into `dst` (double); returns the first column
// outside [-kHppcaMaxAbsValue, kHppcaMaxAbsValue] (NaN and infinities
// included) or -1.
int64_t GatherRow(const MatrixView& x, int64_t src, double* dst) {
  const float* p = x.data() + src * x.cols();
  int64_t bad = -1;
  for (int64_t j = 0; j < x.cols(); ++j) {
    if (!(std::fabs(p[j]) <= kHppcaMaxAbsValue) && bad < 0) bad = j;
    dst[j] = p[j];
  }
  return bad;
}

struct ClassWork {
  int64_t bad_row = -1;  // first out-of-range row of the class (original index)
};

// Top `qc` eigenpairs of the sample covariance of the class rows `idx`.
// Writes mean, eigenvalues (q) and basis rows (q x d, float); returns the
// first bad row or -1. A big class costs O(n_c d^2) in the scatter route:
// ctx is polled (PollCancelled) before every chunk of rows after the first,
// and a cancel sets *cancelled and returns -1 with the outputs unfinished.
int64_t FitOneClass(const MatrixView& x, absl::Span<const int64_t> idx, int32_t q,
                    double* mean_out, double* eig_out, float* basis_out, double* tail_out,
                    RunContext* ctx, std::atomic<bool>* cancelled) {
  const int64_t n = static_cast<int64_t>(idx.size());
  const int64_t d = x.cols();
  const int32_t qc = static_cast<int32_t>(std::min<int64_t>(q, n - 1));
  Eigen::Map<Eigen::VectorXd> mean(mean_out, d);
  Eigen::Map<Eigen::VectorXd> eig(eig_out, q);
  Eigen::Map<RowMatrixF> basis(basis_out, q, d);
  eig.setZero();
  basis.setZero();
  *tail_out = 0.0;
  // Mean of the discarded eigenvalues from the total variance tr(C).
  auto set_tail = [&](double total_variance) {
    if (d > qc) *tail_out = std::max(total_variance - eig.sum(), 0.0) / static_cast<double>(d - qc);
  };
  if (n <= d && n <= kChunkRows) {
    // Gram route: the covariance has rank <= n - 1 < d.
    RowMatrixDX xc(n, d);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t bad = GatherRow(x, idx[i], xc.row(i).data());
      if (bad >= 0) return idx[i];
    }
    mean = xc.colwise().sum().transpose() / static_cast<double>(n);
    xc.rowwise() -= mean.transpose();
    const double total = xc.squaredNorm() / static_cast<double>(n - 1);
    if (qc <= 0) {
      set_tail(total);
      return -1;
    }
    // A plain product rather than a selfadjoint rank update: in isolation,
    // at n = 200, d = 640 with AVX-512, Eigen 3.4's rank update took 10 ms
    // and the product 1 ms (docs/benchmarks.md, hierarchical PPCA).
    Eigen::MatrixXd gram(n, n);
    gram.noalias() = xc * xc.transpose();
    Eigen::MatrixXd w(n, qc);
    Eigen::VectorXd f(qc);
    LargestEigenpairs(gram, qc, &f, &w);
    const double fmax = std::max(f[0], 0.0);
    const Eigen::MatrixXd v = xc.transpose() * w;  // d x qc, column l has norm sqrt(f_l)
    for (int32_t l = 0; l < qc; ++l) {
      if (f[l] > 1e-12 * fmax && f[l] > 0.0) {
        eig[l] = f[l] / static_cast<double>(n - 1);
        basis.row(l) = (v.col(l) / std::sqrt(f[l])).transpose().cast<float>();
      }
    }
    set_tail(total);
    return -1;
  }
  // Scatter route, chunked; chunks merged with Chan et al.'s update.
  Eigen::MatrixXd scatter = Eigen::MatrixXd::Zero(d, d);  // lower triangle
  Eigen::VectorXd m = Eigen::VectorXd::Zero(d);
  int64_t count = 0;
  RowMatrixDX block;
  for (int64_t b0 = 0; b0 < n; b0 += kChunkRows) {
    if (b0 > 0 && (cancelled->load(std::memory_order_relaxed) || PollCancelled(ctx))) {
      cancelled->store(true);
      return -1;
    }
    const int64_t nb = std::min(kChunkRows, n - b0);
    block.resize(nb, d);
    for (int64_t i = 0; i < nb; ++i) {
      const int64_t bad = GatherRow(x, idx[b0 + i], block.row(i).data());
      if (bad >= 0) return idx[b0 + i];
    }
    const Eigen::VectorXd mb = block.colwise().sum().transpose() / static_cast<double>(nb);
    block.rowwise() -= mb.transpose();
    scatter.selfadjointView<Eigen::Lower>().rankUpdate(block.transpose());
    if (count > 0) {
      const Eigen::VectorXd delta = mb - m;
      const double w = static_cast<double>(count) * static_cast<double>(nb) /
                       static_cast<double>(count + nb);
      scatter.selfadjointView<Eigen::Lower>().rankUpdate(delta, w);
      m += delta * (static_cast<double>(nb) / static_cast<double>(count + nb));
    } else {
      m = mb;
    }
    count += nb;
  }
  mean = m;
  scatter /= static_cast<double>(n - 1);
  const double total = scatter.diagonal().sum();
  if (qc <= 0) {
    set_tail(total);
    return -1;
  }
  Eigen::VectorXd top;
  Eigen::MatrixXd vecs;
  LargestEigenpairs(scatter, qc, &top, &vecs);
  for (int32_t l = 0; l < qc; ++l) {
    eig[l] = std::max(top[l], 0.0);
    basis.row(l) = vecs.col(l).transpose().cast<float>();
  }
  set_tail(total);
  return -1;
}

}  // namespace

absl::StatusOr<ClassFitResult> FitClasses(const MatrixView& x, absl::Span<const int64_t> labels,
                                          int32_t q, int32_t raw_samples, uint64_t seed,
                                          int threads, Progress progress) {
  const int64_t n = x.rows(), d = x.cols();
  if (n < 1) return absl::InvalidArgumentError("training data has no rows");
  if (d < 1) return absl::InvalidArgumentError("training data has no columns");
  if (static_cast<int64_t>(labels.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat("labels have ", labels.size(),
                                                   " entries but the data has ", n, " rows"));
  }
  ClassFitResult out;
  ClassTable& t = out.table;
  t.d = d;
  t.q = q;
  t.labels.assign(labels.begin(), labels.end());
  std::sort(t.labels.begin(), t.labels.end());
  t.labels.erase(std::unique(t.labels.begin(), t.labels.end()), t.labels.end());
  if (t.labels.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a classifier needs at least 2 classes; every label is ", t.labels[0]));
  }
  if (t.labels.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max() / 2)) {
    return absl::InvalidArgumentError("too many distinct labels");
  }
  const int32_t k = t.size();
  out.point_class.resize(n);
  t.counts.assign(k, 0);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t c = static_cast<int32_t>(
        std::lower_bound(t.labels.begin(), t.labels.end(), labels[i]) - t.labels.begin());
    out.point_class[i] = c;
    ++t.counts[c];
  }
  int32_t singles = 0;
  int64_t first_single = 0;
  for (int32_t c = 0; c < k; ++c) {
    if (t.counts[c] < 2) {
      if (singles++ == 0) first_single = t.labels[c];
    }
  }
  if (singles > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "class label ", first_single,
        " has 1 training point; every class needs at least 2 (a PPCA model needs a "
        "covariance)",
        singles > 1 ? absl::StrCat("; ", singles, " classes have a single point") : ""));
  }
  // Group row indices by class (counting sort keeps row order within a class).
  std::vector<int64_t> offset(k + 1, 0);
  for (int32_t c = 0; c < k; ++c) offset[c + 1] = offset[c] + t.counts[c];
  std::vector<int64_t> order(n);
  {
    std::vector<int64_t> next(offset.begin(), offset.end() - 1);
    for (int64_t i = 0; i < n; ++i) order[next[out.point_class[i]]++] = i;
  }
  t.rank.resize(k);
  t.tail.assign(k, 0.0);
  t.means.resize(k, d);
  t.eigvals.setZero(k, q);
  t.bases.setZero(static_cast<int64_t>(k) * q, d);
  for (int32_t c = 0; c < k; ++c) {
    t.rank[c] = static_cast<int32_t>(std::min<int64_t>(q, t.counts[c] - 1));
    if (t.rank[c] < q) ++out.reduced_rank_classes;
  }
  // Raw-data samples.
  std::vector<int64_t> sample_offset(k + 1, 0);
  if (raw_samples > 0) {
    for (int32_t c = 0; c < k; ++c) {
      sample_offset[c + 1] = sample_offset[c] + std::min<int64_t>(raw_samples, t.counts[c]);
    }
    out.samples.resize(sample_offset[k], d);
    out.sample_class.resize(sample_offset[k]);
  }
  // Largest classes first for load balance.
  std::vector<int32_t> schedule(k);
  std::iota(schedule.begin(), schedule.end(), 0);
  std::stable_sort(schedule.begin(), schedule.end(),
                   [&](int32_t a, int32_t b) { return t.counts[a] > t.counts[b]; });
  std::vector<int64_t> bad_row(k, -1);
  std::atomic<int64_t> rows_done{0};
  std::atomic<bool> cancelled{false};
  absl::Status st = ParallelFor(
      k, threads, &progress.ctx(),
      [&](int64_t item) {
        const int32_t c = schedule[item];
        absl::Span<const int64_t> idx(order.data() + offset[c], t.counts[c]);
        bad_row[c] = FitOneClass(x, idx, q, t.means.row(c).data(), t.eigvals.row(c).data(),
                                 t.bases.data() + static_cast<int64_t>(c) * q * d, &t.tail[c],
                                 &progress.ctx(), &cancelled);
        if (cancelled.load(std::memory_order_relaxed)) return;
        if (raw_samples > 0 && bad_row[c] < 0) {
          std::mt19937_64 rng(seed ^ (0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(c + 1)));
          std::vector<int64_t> pick(idx.begin(), idx.end());
          const int64_t m = sample_offset[c + 1] - sample_offset[c];
          for (int64_t i = 0; i < m; ++i) {
            std::uniform_int_distribution<int64_t> u(i, static_cast<int64_t>(pick.size()) - 1);
            std::swap(pick[i], pick[u(rng)]);
            out.samples.row(sample_offset[c] + i) = x.row(pick[i]);
            out.sample_class[sample_offset[c] + i] = c;
          }
        }
        rows_done.fetch_add(t.counts[c]);
      },
      [&](int64_t) {
        progress.Report(static_cast<double>(rows_done.load()) / static_cast<double>(n));
      });
  if (!st.ok()) return st;
  if (cancelled.load()) return absl::CancelledError("job cancelled");
  int64_t first_bad = -1;
  for (int32_t c = 0; c < k; ++c) {
    if (bad_row[c] >= 0 && (first_bad < 0 || bad_row[c] < first_bad)) first_bad = bad_row[c];
  }
  if (first_bad >= 0) {
    // Reuse the shared wording ("row R, column C is NaN", "... is 3e+09;
    // values must lie in [...]").
    absl::Status bad = ValidateMagnitude(MatrixView(x.data() + first_bad * d, 1, d),
                                         kHppcaMaxAbsValue, first_bad);
    return absl::InvalidArgumentError(absl::StrCat("training data: ", bad.message()));
  }
  progress.Report(1.0);
  return out;
}

}  // namespace dendro::hppca_internal
