#include "core/tneb/mixture.h"

#include <math.h>  // lgamma_r
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <utility>

#include "Eigen/Cholesky"
#include "Eigen/Eigenvalues"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/cpus.h"
#include "core/common/status_macros.h"

namespace dendro {
namespace {

using Eigen::MatrixXd;
using Eigen::VectorXd;

constexpr int64_t kBlockRows = 512;      // rows per dense block in data passes
constexpr int64_t kGradBlockRows = 256;  // rows per block for density gradients
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kMinDof = 1.0;
constexpr double kMaxDof = 1000.0;
constexpr int kMaxRidgeEscalations = 8;  // ridge x10 each, up to 1e8 x
constexpr int kKMeansMaxIterations = 100;
constexpr int kKMeansInits = 3;            // k-means runs per restart, as the authors' package
constexpr double kKMeansTolerance = 1e-4;  // sklearn's: relative to mean variance
constexpr int kInitRedraws = 5;            // rounds of re-drawing small k-means centres

// Threads worth waking for `flops` of work: each gets at least about a
// millisecond, so small problems stay on one thread (waking an idle OpenMP
// thread on a busy machine can cost more than the work itself).
constexpr double kMinFlopsPerThread = 4e6;
int ThreadsFor(double flops, int max_threads) {
  return static_cast<int>(
      std::clamp(flops / kMinFlopsPerThread, 1.0, static_cast<double>(std::max(1, max_threads))));
}

double LogGamma(double x) {
  int sign = 0;
  return lgamma_r(x, &sign);
}

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t RestartSeed(uint64_t seed, int restart) {
  uint64_t state = seed ^ (0xD1B54A32D192ED03ULL * static_cast<uint64_t>(restart + 1));
  SplitMix64(&state);
  return SplitMix64(&state);
}

// Normalising constant of log f (without the weight).
double LogNormaliser(double dof, int d, double log_det) {
  if (std::isinf(dof)) return -0.5 * d * std::log(2.0 * M_PI) - 0.5 * log_det;
  return LogGamma(0.5 * (dof + d)) - LogGamma(0.5 * dof) - 0.5 * d * std::log(dof * M_PI) -
         0.5 * log_det;
}

// log(1 + delta / nu) for a column of squared Mahalanobis distances, with
// the vectorised log (log1p has no vectorised form in Eigen 3.4).
inline Eigen::ArrayXd Log1pRatio(const Eigen::Ref<const VectorXd>& delta, double nu) {
  return (delta.array() + nu).log() - std::log(nu);
}

// The parameters the density kernels need. mu is d x m (column k = mu_k).
struct KernelParams {
  const MatrixXd* mu = nullptr;
  const std::vector<MatrixXd>* inv_chol_t = nullptr;  // upper U_k = L_k^{-T}
  const std::vector<double>* log_coef = nullptr;
  const std::vector<double>* dof = nullptr;
};

struct KernelScratch {
  MatrixXd diff;  // B x d
  MatrixXd z;     // B x d
};

// logp(i, k) = log w_k + log f_k(x_i), maha(i, k) = delta_ik.
void KernelLogProb(const KernelParams& p, const Eigen::Ref<const MatrixXd>& xb, MatrixXd* logp,
                   MatrixXd* maha, KernelScratch* s) {
  const int64_t b = xb.rows();
  const int d = static_cast<int>(xb.cols());
  const int m = static_cast<int>(p.mu->cols());
  logp->resize(b, m);
  maha->resize(b, m);
  for (int k = 0; k < m; ++k) {
    s->diff.noalias() = xb.rowwise() - p.mu->col(k).transpose();
    s->z.noalias() = s->diff * (*p.inv_chol_t)[k].triangularView<Eigen::Upper>();
    maha->col(k) = s->z.rowwise().squaredNorm();
    const double nu = (*p.dof)[k];
    const double c = (*p.log_coef)[k];
    if (std::isinf(nu)) {
      logp->col(k) = c - 0.5 * maha->col(k).array();
    } else {
      logp->col(k) = c - 0.5 * (nu + d) * Log1pRatio(maha->col(k), nu);
    }
  }
}

// Row-wise log-sum-exp of logp into lse; logp is overwritten with the
// responsibilities exp(logp - lse). Vectorised along the rows.
void RowLogSumExpToResp(MatrixXd* logp, VectorXd* lse) {
  const int64_t m = logp->cols();
  VectorXd mx = logp->rowwise().maxCoeff();
  // A row that is -inf everywhere (impossible for a valid mixture) keeps
  // lse = -inf and NaN responsibilities, which the callers detect.
  mx = mx.array().isFinite().select(mx.array(), 0.0).matrix();
  Eigen::ArrayXd sum = Eigen::ArrayXd::Zero(logp->rows());
  for (int64_t k = 0; k < m; ++k) {
    logp->col(k) = (logp->col(k) - mx).array().exp().matrix();
    sum += logp->col(k).array();
  }
  *lse = mx.array() + sum.log();
  const Eigen::ArrayXd inv = sum.inverse();
  for (int64_t k = 0; k < m; ++k) logp->col(k).array() *= inv;
}

// Splits [0, n) into at most `parts` contiguous chunks (block aligned;
// fewer when n * flops_per_row is small) and runs fn(begin, end, part) for
// each, in parallel when there is more than one.
template <typename Fn>
void ForChunks(int64_t n, int parts, double flops_per_row, Fn fn) {
  parts = std::min(parts, ThreadsFor(static_cast<double>(n) * flops_per_row, parts));
  parts = static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>(parts, (n + kBlockRows - 1) / kBlockRows)));
  const int64_t blocks = (n + kBlockRows - 1) / kBlockRows;
  auto range = [&](int part) {
    const int64_t b0 = blocks * part / parts;
    const int64_t b1 = blocks * (part + 1) / parts;
    return std::make_pair(std::min(n, b0 * kBlockRows), std::min(n, b1 * kBlockRows));
  };
  if (parts == 1) {
    fn(int64_t{0}, n, 0);
    return;
  }
#pragma omp parallel for schedule(static, 1) num_threads(parts)
  for (int part = 0; part < parts; ++part) {
    const auto [begin, end] = range(part);
    fn(begin, end, part);
  }
}

using PassCancel = SharedCancel;

// ---------------------------------------------------------------- k-means

// Squared distances of the rows of xb to the rows of c (k x d).
void SquaredDistances(const MatrixXd& xb, const MatrixXd& c, const VectorXd& c_norm,
                      MatrixXd* out) {
  out->noalias() = -2.0 * xb * c.transpose();
  out->colwise() += xb.rowwise().squaredNorm();
  out->rowwise() += c_norm.transpose();
  *out = out->cwiseMax(0.0);
}

MatrixXd RowOf(const MatrixView& x, const FeatureTransform& t, int64_t row) {
  MatrixXd r(1, x.cols());
  LoadRows(x, t, row, &r);
  return r;
}

struct KMeansResult {
  MatrixXd centers;      // m x d
  double inertia = 0.0;  // sum of squared distances in the last assignment
};

// k-means++ seeding (greedy, 2 + floor(ln m) local trials, as scikit-learn)
// then Lloyd iterations.
absl::StatusOr<KMeansResult> KMeansOnce(const MatrixView& x, const FeatureTransform& t, int m,
                                        std::mt19937_64* rng, int threads, double mean_variance,
                                        int64_t min_rows, const RunContext& ctx) {
  const int64_t n = x.rows();
  const int d = static_cast<int>(x.cols());
  MatrixXd centers(m, d);
  // Per row: the squared distance to the nearest center chosen so far.
  std::vector<double> closest(n, std::numeric_limits<double>::infinity());
  std::uniform_real_distribution<double> unif(0.0, 1.0);

  // Every pass over the data below polls once per block of rows (each
  // block is O(d) or O(m d) per row), so a cancel on big inputs is seen
  // within one block per thread rather than after the whole pass.
  PassCancel cancel(ctx);
  const absl::Status cancelled = absl::CancelledError("job cancelled");
  // Lowers `closest` to the distances to a new center (one row); false if
  // cancelled.
  auto add_center = [&](const MatrixXd& center) {
    const VectorXd norm = center.rowwise().squaredNorm();
    ForChunks(n, threads, 4.0 * d, [&](int64_t begin, int64_t end, int) {
      MatrixXd xb, dist;
      for (int64_t b = begin; b < end; b += kBlockRows) {
        if (cancel.Poll()) return;
        xb.resize(std::min(kBlockRows, end - b), d);
        LoadRows(x, t, b, &xb);
        SquaredDistances(xb, center, norm, &dist);
        for (int64_t i = 0; i < xb.rows(); ++i) {
          closest[b + i] = std::min(closest[b + i], dist(i, 0));
        }
      }
    });
    return !cancel.seen();
  };
  std::uniform_int_distribution<int64_t> pick(0, n - 1);
  centers.row(0) = RowOf(x, t, pick(*rng));
  if (!add_center(centers.topRows(1))) return cancelled;
  const int trials = 2 + static_cast<int>(std::log(static_cast<double>(m)));
  std::vector<double> cumulative(n);
  for (int c = 1; c < m; ++c) {
    if (cancel.Poll()) return cancelled;
    double total = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      total += closest[i];
      cumulative[i] = total;
    }
    MatrixXd cand(trials, d);
    for (int j = 0; j < trials; ++j) {
      int64_t idx;
      if (total > 0.0) {
        const double r = unif(*rng) * total;
        idx = std::upper_bound(cumulative.begin(), cumulative.end(), r) - cumulative.begin();
        idx = std::min(idx, n - 1);
      } else {
        idx = pick(*rng);
      }
      cand.row(j) = RowOf(x, t, idx);
    }
    VectorXd cand_norm = cand.rowwise().squaredNorm();
    std::vector<VectorXd> part_pot(threads, VectorXd::Zero(trials));
    ForChunks(n, threads, 4.0 * d * trials, [&](int64_t begin, int64_t end, int part) {
      MatrixXd xb, dist;
      for (int64_t b = begin; b < end; b += kBlockRows) {
        if (cancel.Poll()) return;
        xb.resize(std::min(kBlockRows, end - b), d);
        LoadRows(x, t, b, &xb);
        SquaredDistances(xb, cand, cand_norm, &dist);
        for (int64_t i = 0; i < xb.rows(); ++i) {
          for (int j = 0; j < trials; ++j)
            part_pot[part](j) += std::min(closest[b + i], dist(i, j));
        }
      }
    });
    if (cancel.seen()) return cancelled;
    VectorXd pot = VectorXd::Zero(trials);
    for (const auto& p : part_pot) pot += p;
    int best = 0;
    for (int j = 1; j < trials; ++j) {
      if (pot(j) < pot(best)) best = j;
    }
    centers.row(c) = cand.row(best);
    if (!add_center(cand.row(best))) return cancelled;
  }

  // Lloyd iterations; `count` ends as the rows of each centre in the last
  // assignment.
  std::vector<int32_t> label(n, -1);
  double inertia = 0.0;
  VectorXd count = VectorXd::Zero(m);
  const double tol = kKMeansTolerance * mean_variance;
  auto lloyd = [&]() -> bool {
    for (int iter = 0; iter < kKMeansMaxIterations; ++iter) {
      if (cancel.Poll()) return false;
      VectorXd cn = centers.rowwise().squaredNorm();
      struct Acc {
        MatrixXd sum;
        VectorXd count;
        int64_t changed = 0;
        double far_dist = -1.0;
        int64_t far_row = 0;
        double inertia = 0.0;
      };
      std::vector<Acc> acc(threads);
      ForChunks(n, threads, 4.0 * d * m, [&](int64_t begin, int64_t end, int part) {
        Acc& a = acc[part];
        a.sum = MatrixXd::Zero(m, d);
        a.count = VectorXd::Zero(m);
        MatrixXd xb, dist;
        for (int64_t b = begin; b < end; b += kBlockRows) {
          if (cancel.Poll()) return;
          xb.resize(std::min(kBlockRows, end - b), d);
          LoadRows(x, t, b, &xb);
          SquaredDistances(xb, centers, cn, &dist);
          for (int64_t i = 0; i < xb.rows(); ++i) {
            Eigen::Index k;
            const double dk = dist.row(i).minCoeff(&k);
            if (label[b + i] != k) ++a.changed;
            label[b + i] = static_cast<int32_t>(k);
            a.sum.row(k) += xb.row(i);
            a.count(k) += 1.0;
            a.inertia += dk;
            if (dk > a.far_dist) {
              a.far_dist = dk;
              a.far_row = b + i;
            }
          }
        }
      });
      if (cancel.seen()) return false;
      MatrixXd sum = MatrixXd::Zero(m, d);
      count = VectorXd::Zero(m);
      int64_t changed = 0;
      double far_dist = -1.0;
      int64_t far_row = 0;
      inertia = 0.0;
      for (const Acc& a : acc) {
        if (a.sum.size() == 0) continue;
        sum += a.sum;
        count += a.count;
        changed += a.changed;
        inertia += a.inertia;
        if (a.far_dist > far_dist) {
          far_dist = a.far_dist;
          far_row = a.far_row;
        }
      }
      MatrixXd next(m, d);
      for (int k = 0; k < m; ++k) {
        if (count(k) > 0) {
          next.row(k) = sum.row(k) / count(k);
        } else {  // empty cluster: restart it at the worst-fitted point
          next.row(k) = RowOf(x, t, far_row);
        }
      }
      const double shift = (next - centers).squaredNorm();
      centers = std::move(next);
      if (changed == 0 || shift <= tol) break;
    }
    return true;
  };
  if (!lloyd()) return cancelled;
  // Centres owning fewer than min_rows rows: re-drawn at uniformly drawn
  // rows (which lie where the data are dense, unlike the far rows that
  // k-means++ favours), then Lloyd again.
  for (int round = 0; min_rows > 0 && round < kInitRedraws; ++round) {
    bool redrawn = false;
    for (int k = 0; k < m; ++k) {
      if (count(k) < static_cast<double>(min_rows)) {
        centers.row(k) = RowOf(x, t, pick(*rng));
        redrawn = true;
      }
    }
    if (!redrawn) break;
    std::fill(label.begin(), label.end(), -1);
    if (!lloyd()) return cancelled;
  }
  return KMeansResult{std::move(centers), inertia};
}

// The best (lowest inertia) of kKMeansInits k-means runs; m x d centers.
absl::StatusOr<MatrixXd> KMeans(const MatrixView& x, const FeatureTransform& t, int m,
                                std::mt19937_64* rng, int threads, double mean_variance,
                                int64_t min_rows, const RunContext& ctx) {
  KMeansResult best;
  for (int i = 0; i < kKMeansInits; ++i) {
    DENDRO_ASSIGN_OR_RETURN(KMeansResult r,
                            KMeansOnce(x, t, m, rng, threads, mean_variance, min_rows, ctx));
    if (i == 0 || r.inertia < best.inertia) best = std::move(r);
  }
  return std::move(best.centers);
}

// ---------------------------------------------------------------- EM

struct Stats {
  std::vector<MatrixXd> s2;  // lower triangles of sum r u D D^T
  MatrixXd s1;               // d x m: sum r u D (D = x - mu_old)
  VectorXd s0;               // sum r u
  VectorXd n;                // sum r
  VectorXd dof_stat;         // sum r (log u - u)
  double ll = 0.0;           // sum log p(x_i)

  void Reset(int d, int m) {
    s2.assign(m, MatrixXd::Zero(d, d));
    s1 = MatrixXd::Zero(d, m);
    s0 = VectorXd::Zero(m);
    n = VectorXd::Zero(m);
    dof_stat = VectorXd::Zero(m);
    ll = 0.0;
  }
  void Add(const Stats& o) {
    for (size_t k = 0; k < s2.size(); ++k) s2[k] += o.s2[k];
    s1 += o.s1;
    s0 += o.s0;
    n += o.n;
    dof_stat += o.dof_stat;
    ll += o.ll;
  }
};

struct EmState {
  MatrixXd mu;  // d x m
  std::vector<MatrixXd> scale;
  std::vector<MatrixXd> inv_chol_t;
  std::vector<double> log_det;
  std::vector<double> weight;
  std::vector<double> log_coef;
  std::vector<double> dof;

  KernelParams Kernel() const { return KernelParams{&mu, &inv_chol_t, &log_coef, &dof}; }
};

// Whether an inverse Cholesky factor is usable: finite, and small enough
// that the precision matrix U U^T cannot overflow.
bool UsableInverse(const MatrixXd& inv_chol_t) {
  return inv_chol_t.allFinite() && inv_chol_t.cwiseAbs().maxCoeff() < 1e150;
}

// Cholesky of s (escalating the ridge when needed); fills U = L^{-T} and
// log|s|. Returns false if s stays indefinite. The escalation starts at the
// ridge, or at 1e-12 x the mean data variance when the ridge is 0 (a
// component that collapsed onto a single point has a zero scale matrix).
bool Factor(MatrixXd* s, double ridge, double data_variance, MatrixXd* inv_chol_t,
            double* log_det) {
  const int d = static_cast<int>(s->rows());
  double extra = ridge > 0.0 ? ridge : 1e-12 * std::max(data_variance, 1e-300);
  for (int attempt = 0; attempt <= kMaxRidgeEscalations; ++attempt) {
    if (attempt > 0) {
      s->diagonal().array() += extra * 9.0;  // total added grows x10 per step
      extra *= 10.0;
    }
    if (!s->allFinite()) return false;
    Eigen::LLT<MatrixXd> llt(*s);
    if (llt.info() != Eigen::Success) continue;
    const MatrixXd l = llt.matrixL();
    const VectorXd diag = l.diagonal();
    if ((diag.array() <= 0.0).any() || !diag.allFinite()) continue;
    MatrixXd linv = MatrixXd::Identity(d, d);
    l.triangularView<Eigen::Lower>().solveInPlace(linv);
    *inv_chol_t = linv.transpose();
    *log_det = 2.0 * diag.array().log().sum();
    if (std::isfinite(*log_det) && UsableInverse(*inv_chol_t)) return true;
  }
  return false;
}

// Root of log(nu/2) - psi(nu/2) + c = 0 in [kMinDof, kMaxDof] (clamped).
double SolveDof(double c) {
  auto g = [c](double nu) { return std::log(0.5 * nu) - Digamma(0.5 * nu) + c; };
  if (g(kMinDof) <= 0.0) return kMinDof;
  if (g(kMaxDof) >= 0.0) return kMaxDof;
  double lo = std::log(kMinDof), hi = std::log(kMaxDof);
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (g(std::exp(mid)) > 0.0) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return std::exp(0.5 * (lo + hi));
}

// One pass over rows [begin, end): adds the log-likelihood and sufficient
// statistics for the next M-step to `out`. Returns false when cancelled.
bool Pass(const MatrixView& x, const FeatureTransform& t, const EmState& st, bool learn_dof,
          int64_t begin, int64_t end, Stats* out, const RunContext& ctx,
          std::atomic<bool>* cancelled) {
  const int d = static_cast<int>(x.cols());
  const int m = static_cast<int>(st.mu.cols());
  const KernelParams kp = st.Kernel();
  MatrixXd xb, resp, maha, u, w;
  VectorXd lse, ru;
  KernelScratch ks;
  for (int64_t b = begin; b < end; b += kBlockRows) {
    if (cancelled->load(std::memory_order_relaxed)) return false;
    if (ctx.Cancelled()) {
      cancelled->store(true);
      return false;
    }
    const int64_t rows = std::min(kBlockRows, end - b);
    xb.resize(rows, d);
    LoadRows(x, t, b, &xb);
    KernelLogProb(kp, xb, &resp, &maha, &ks);
    RowLogSumExpToResp(&resp, &lse);
    out->ll += lse.sum();
    u.resize(rows, m);
    for (int k = 0; k < m; ++k) {
      const double nu = st.dof[k];
      if (std::isinf(nu)) {
        u.col(k).setOnes();
      } else {
        u.col(k) = (nu + d) / (nu + maha.col(k).array());
      }
    }
    for (int k = 0; k < m; ++k) {
      ru = resp.col(k).cwiseProduct(u.col(k));
      const double sru = ru.sum();
      out->n(k) += resp.col(k).sum();
      if (learn_dof) {
        out->dof_stat(k) +=
            (resp.col(k).array() * (u.col(k).array().log() - u.col(k).array())).sum();
      }
      if (!(sru > 0.0)) continue;
      out->s0(k) += sru;
      ks.diff.noalias() = xb.rowwise() - st.mu.col(k).transpose();
      out->s1.col(k).noalias() += ks.diff.transpose() * ru;
      w = ks.diff.array().colwise() * ru.array().sqrt();
      out->s2[k].selfadjointView<Eigen::Lower>().rankUpdate(w.transpose());
    }
  }
  return true;
}

// M-step from `stats` (computed with state `st`). Returns an empty string
// or the reason the restart failed. Each component costs O(d^3) (Cholesky
// and inverse), so the cancel is polled per component; a cancel sets
// *cancelled and returns an empty string with `st` partly updated.
std::string MStep(const Stats& stats, int64_t n, const MixtureOptions& o, double data_variance,
                  const MatrixXd* prior_scale, EmState* st, const RunContext& ctx,
                  std::atomic<bool>* cancelled) {
  const int d = static_cast<int>(st->mu.rows());
  const int m = static_cast<int>(st->mu.cols());
  for (int k = 0; k < m; ++k) {
    if (cancelled->load(std::memory_order_relaxed)) return "";
    if (ctx.Cancelled()) {
      cancelled->store(true);
      return "";
    }
    const double nk = stats.n(k);
    const double sw = stats.s0(k);
    if (!(nk > 0.0) || !(sw > 1e-300)) {  // no responsibility left
      st->weight[k] = 0.0;
      st->log_coef[k] = -kInf;
      continue;
    }
    const VectorXd delta = stats.s1.col(k) / sw;
    MatrixXd s = stats.s2[k].selfadjointView<Eigen::Lower>();
    s /= sw;
    s.noalias() -= delta * delta.transpose();
    if (prior_scale != nullptr) {  // (sum r u D D^T + p S0) / (sum r u + p)
      const double p = o.scale_prior_rows;
      s = (sw * s + p * *prior_scale) / (sw + p);
    }
    s = 0.5 * (s + s.transpose()).eval();
    s.diagonal().array() += o.ridge;
    st->mu.col(k) += delta;
    st->weight[k] = nk / static_cast<double>(n);
    if (o.learn_dof && !o.gaussian) {
      const double a = 0.5 * (st->dof[k] + d);
      const double c = 1.0 + stats.dof_stat(k) / nk + Digamma(a) - std::log(a);
      st->dof[k] = SolveDof(c);
    }
    if (!Factor(&s, o.ridge, data_variance, &st->inv_chol_t[k], &st->log_det[k])) {
      return absl::StrFormat(
          "the scale matrix of component %d stays singular even with %g x the ridge added to "
          "its diagonal",
          k, std::pow(10.0, kMaxRidgeEscalations));
    }
    st->scale[k] = std::move(s);
    st->log_coef[k] = std::log(st->weight[k]) + LogNormaliser(st->dof[k], d, st->log_det[k]);
    if (!std::isfinite(st->log_coef[k]) || !st->mu.col(k).allFinite()) {
      return absl::StrCat("component ", k, " has non-finite parameters");
    }
  }
  return "";
}

struct RestartResult {
  bool failed = false;
  bool cancelled = false;
  std::string failure;
  bool converged = false;
  int32_t iterations = 0;
  double ll = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> trace;
  EmState state;
};

struct DataMoments {
  VectorXd mean;
  MatrixXd cov;  // population covariance
  double mean_variance = 0.0;
};

class ProgressTracker {
 public:
  ProgressTracker(RunContext& ctx, int restarts, int max_iterations)
      : ctx_(ctx), restarts_(restarts), per_restart_(int64_t{max_iterations} + 2) {}
  void Start() {
    std::lock_guard<std::mutex> lock(mu_);
    ++started_;
    ReportLocked();
  }
  void Step(int64_t units) {
    std::lock_guard<std::mutex> lock(mu_);
    done_ += units;
    ReportLocked();
  }

 private:
  void ReportLocked() {
    const double total = static_cast<double>(restarts_) * per_restart_;
    ctx_.Report(std::min(1.0, done_ / total),
                absl::StrCat("EM restart ", started_, "/", restarts_));
  }
  RunContext& ctx_;
  const int restarts_;
  const int64_t per_restart_;  // 64 bits: max_iterations may be INT_MAX
  std::mutex mu_;
  int started_ = 0;
  int64_t done_ = 0;
};

// A warm start's state: `from`'s parameters, factored again (with the
// ridge escalation of Factor). The reason on failure, "" when it worked.
std::string StartFromMixture(const StudentMixture& from, const MixtureOptions& o,
                             const DataMoments& moments, int d, EmState* st) {
  const int m = from.num_components();
  st->mu = from.means().transpose();
  st->weight = from.weights();
  st->dof = o.gaussian ? std::vector<double>(m, kInf) : from.dof();
  st->scale.resize(m);
  st->inv_chol_t.resize(m);
  st->log_det.resize(m);
  st->log_coef.resize(m);
  for (int k = 0; k < m; ++k) {
    st->scale[k] = from.scale(k);
    if (!Factor(&st->scale[k], o.ridge, moments.mean_variance, &st->inv_chol_t[k],
                &st->log_det[k])) {
      return absl::StrCat("the starting mixture's component ", k,
                          " has a scale matrix that is not positive definite");
    }
    st->log_coef[k] = std::log(st->weight[k]) + LogNormaliser(st->dof[k], d, st->log_det[k]);
  }
  return "";
}

// The authors' start: k-means centres, equal weights, every scale the data
// covariance + ridge. The reason on failure, "" when it worked.
std::string StartFromCentres(const MatrixXd& centers, const MixtureOptions& o,
                             const DataMoments& moments, int d, EmState* st) {
  const int m = o.components;
  st->mu = centers.transpose();
  st->weight.assign(m, 1.0 / m);
  st->dof.assign(m, o.gaussian ? kInf : o.dof);
  MatrixXd s0 = moments.cov;
  s0.diagonal().array() += o.ridge;
  MatrixXd u0;
  double ld0 = 0.0;
  if (!Factor(&s0, o.ridge, moments.mean_variance, &u0, &ld0)) {
    return "the data covariance is not positive definite";
  }
  st->scale.assign(m, s0);
  st->inv_chol_t.assign(m, u0);
  st->log_det.assign(m, ld0);
  st->log_coef.resize(m);
  for (int k = 0; k < m; ++k) {
    st->log_coef[k] = std::log(st->weight[k]) + LogNormaliser(st->dof[k], d, ld0);
  }
  return "";
}

RestartResult RunRestart(const MatrixView& x, const FeatureTransform& t, const MixtureOptions& o,
                         int restart, const DataMoments& moments, int threads, RunContext& ctx,
                         ProgressTracker* progress, std::atomic<bool>* cancelled) {
  RestartResult res;
  const int64_t n = x.rows();
  const int d = static_cast<int>(x.cols());
  const int m = o.components;
  progress->Start();
  EmState& st = res.state;
  if (o.start != nullptr) {
    res.failure = StartFromMixture(*o.start, o, moments, d, &st);
  } else {
    std::mt19937_64 rng(RestartSeed(o.seed, restart));
    const int64_t min_rows = std::min<int64_t>(o.init_min_rows, n / m);
    absl::StatusOr<MatrixXd> centers =
        KMeans(x, t, m, &rng, threads, moments.mean_variance, min_rows, ctx);
    if (!centers.ok()) {
      res.cancelled = true;
      cancelled->store(true);
      return res;
    }
    res.failure = StartFromCentres(*centers, o, moments, d, &st);
  }
  progress->Step(1);
  if (!res.failure.empty()) {
    res.failed = true;
    return res;
  }

  // The scale prior's S0 (MixtureOptions::scale_prior_rows).
  MatrixXd prior_scale;
  const MatrixXd* prior_scale_ptr = nullptr;
  if (o.scale_prior_rows > 0.0) {
    prior_scale = moments.cov / std::pow(static_cast<double>(m), 2.0 / d);
    prior_scale_ptr = &prior_scale;
  }
  const int parts = std::max(1, threads);
  std::vector<Stats> part_stats(parts);
  Stats stats;
  double prev = -kInf;
  for (int iter = 0;; ++iter) {
    bool ok = true;
    for (Stats& ps : part_stats) ps.Reset(d, m);
    ForChunks(n, parts, 2.0 * m * (d + 4.0) * d, [&](int64_t begin, int64_t end, int part) {
      if (!Pass(x, t, st, o.learn_dof && !o.gaussian, begin, end, &part_stats[part], ctx,
                cancelled)) {
        ok = false;
      }
    });
    if (!ok || cancelled->load()) {
      res.cancelled = true;
      return res;
    }
    stats.Reset(d, m);
    for (const Stats& ps : part_stats) stats.Add(ps);
    const double ll = stats.ll / static_cast<double>(n);
    res.trace.push_back(ll);
    res.ll = ll;
    res.iterations = iter;
    if (!std::isfinite(ll)) {
      res.failed = true;
      res.failure = "the log-likelihood became non-finite";
      return res;
    }
    if (iter > 0 && std::abs(ll - prev) < o.tolerance) {
      res.converged = true;
      progress->Step(int64_t{o.max_iterations} + 1 - iter);
      break;
    }
    if (iter == o.max_iterations) {
      progress->Step(1);
      break;
    }
    const std::string err =
        MStep(stats, n, o, moments.mean_variance, prior_scale_ptr, &st, ctx, cancelled);
    if (cancelled->load()) {
      res.cancelled = true;
      return res;
    }
    if (!err.empty()) {
      res.failed = true;
      res.failure = err;
      return res;
    }
    prev = ll;
    progress->Step(1);
  }
  return res;
}

// Data mean and covariance. Summed over fixed row chunks in chunk order,
// so the result does not depend on the number of threads. The covariance
// pass costs O(n d^2); both passes poll for a cancel before every block of
// rows (CancelledError).
absl::StatusOr<DataMoments> ComputeMoments(const MatrixView& x, const FeatureTransform& t,
                                           int threads, const RunContext& ctx) {
  PassCancel cancel(ctx);
  constexpr int64_t kChunkRows = 64 * kBlockRows;
  const int64_t n = x.rows();
  const int d = static_cast<int>(x.cols());
  const int64_t chunks = (n + kChunkRows - 1) / kChunkRows;
  std::vector<VectorXd> part_sum(chunks, VectorXd::Zero(d));
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    MatrixXd xb;
    for (int64_t b = c * kChunkRows; b < std::min(n, (c + 1) * kChunkRows); b += kBlockRows) {
      if (cancel.Poll()) break;
      xb.resize(std::min(kBlockRows, n - b), d);
      LoadRows(x, t, b, &xb);
      part_sum[c] += xb.colwise().sum().transpose();
    }
  }
  if (cancel.seen()) return absl::CancelledError("job cancelled");
  DataMoments mom;
  mom.mean = VectorXd::Zero(d);
  for (const auto& s : part_sum) mom.mean += s;
  mom.mean /= static_cast<double>(n);
  std::vector<MatrixXd> part_cov(chunks, MatrixXd::Zero(d, d));
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    MatrixXd xb;
    for (int64_t b = c * kChunkRows; b < std::min(n, (c + 1) * kChunkRows); b += kBlockRows) {
      if (cancel.Poll()) break;
      xb.resize(std::min(kBlockRows, n - b), d);
      LoadRows(x, t, b, &xb);
      xb.rowwise() -= mom.mean.transpose();
      part_cov[c].selfadjointView<Eigen::Lower>().rankUpdate(xb.transpose());
    }
  }
  if (cancel.seen()) return absl::CancelledError("job cancelled");
  MatrixXd lower = MatrixXd::Zero(d, d);
  for (const auto& c : part_cov) lower += c;
  mom.cov = lower.selfadjointView<Eigen::Lower>();
  mom.cov /= static_cast<double>(n);
  mom.mean_variance = mom.cov.diagonal().mean();
  return mom;
}

absl::Status ValidateMixtureOptions(const MixtureOptions& o, int64_t n, int64_t d) {
  if (o.components < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("mixture components must be >= 1, got ", o.components));
  }
  if (n < o.components) {
    return absl::InvalidArgumentError(
        absl::StrCat("the data have ", n, " rows but ", o.components,
                     " mixture components were requested: need at least one row per component"));
  }
  if (d < 1) return absl::InvalidArgumentError("the data have no columns");
  if (!o.gaussian && !(o.dof > 0.0 && std::isfinite(o.dof))) {
    return absl::InvalidArgumentError(
        absl::StrCat("degrees of freedom must be a finite number > 0, got ", o.dof));
  }
  if (!(o.ridge >= 0.0 && std::isfinite(o.ridge))) {
    return absl::InvalidArgumentError(absl::StrCat("ridge must be finite and >= 0, got ", o.ridge));
  }
  if (o.restarts < 1) {
    return absl::InvalidArgumentError(absl::StrCat("restarts must be >= 1, got ", o.restarts));
  }
  if (o.init_min_rows < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("init_min_rows must be >= 0, got ", o.init_min_rows));
  }
  if (!(o.scale_prior_rows >= 0.0 && std::isfinite(o.scale_prior_rows))) {
    return absl::InvalidArgumentError(
        absl::StrCat("scale_prior_rows must be finite and >= 0, got ", o.scale_prior_rows));
  }
  if (o.max_iterations < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_iterations must be >= 1, got ", o.max_iterations));
  }
  if (!(o.tolerance > 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat("tolerance must be > 0, got ", o.tolerance));
  }
  if (o.start != nullptr && (o.start->num_components() != o.components || o.start->dim() != d)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the starting mixture has ", o.start->num_components(), " components of dimension ",
        o.start->dim(), ", the fit asks for ", o.components, " of dimension ", d));
  }
  return absl::OkStatus();
}

}  // namespace

double Digamma(double x) {
  double r = 0.0;
  while (x < 10.0) {
    r -= 1.0 / x;
    x += 1.0;
  }
  const double f = 1.0 / (x * x);
  return r + std::log(x) - 0.5 / x -
         f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f / 132))));
}

absl::StatusOr<FeatureTransform> StandardizationOf(const MatrixView& x) {
  const int64_t n = x.rows();
  const int64_t d = x.cols();
  if (n < 1) return absl::InvalidArgumentError("cannot standardise an empty matrix");
  std::vector<double> mean(d, 0.0), m2(d, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < d; ++j) mean[j] += x(i, j);
  }
  for (int64_t j = 0; j < d; ++j) mean[j] /= static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < d; ++j) {
      const double c = x(i, j) - mean[j];
      m2[j] += c * c;
    }
  }
  FeatureTransform t;
  t.center = mean;
  t.scale.resize(d);
  for (int64_t j = 0; j < d; ++j) {
    t.scale[j] = std::sqrt(m2[j] / static_cast<double>(n));
    if (!(t.scale[j] > 0.0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("column ", j, " is constant (every value is ", x(0, j),
                       "): it cannot be standardised to unit variance; drop it"));
    }
  }
  return t;
}

void LoadRows(const MatrixView& x, const FeatureTransform& t, int64_t begin, Eigen::MatrixXd* out) {
  const int64_t rows = out->rows();
  const int64_t d = x.cols();
  if (t.identity()) {
    out->noalias() = x.middleRows(begin, rows).cast<double>();
    return;
  }
  for (int64_t j = 0; j < d; ++j) {
    const double c = t.center[j];
    const double inv = 1.0 / t.scale[j];
    for (int64_t i = 0; i < rows; ++i) (*out)(i, j) = (x(begin + i, j) - c) * inv;
  }
}

// ---------------------------------------------------------------- StudentMixture

absl::StatusOr<StudentMixture> StudentMixture::Create(std::vector<double> weights, RowMatrixD means,
                                                      std::vector<Eigen::MatrixXd> scales,
                                                      std::vector<double> dof) {
  const int64_t m = means.rows();
  const int64_t d = means.cols();
  if (m < 1 || d < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("mixture: means must be a non-empty m x d matrix, got ", m, " x ", d));
  }
  if (static_cast<int64_t>(weights.size()) != m || static_cast<int64_t>(scales.size()) != m ||
      static_cast<int64_t>(dof.size()) != m) {
    return absl::InvalidArgumentError(
        absl::StrCat("mixture: ", m, " means but ", weights.size(), " weights, ", scales.size(),
                     " scale matrices and ", dof.size(), " degrees of freedom"));
  }
  double wsum = 0.0;
  for (int64_t k = 0; k < m; ++k) {
    if (!(weights[k] >= 0.0) || !std::isfinite(weights[k])) {
      return absl::InvalidArgumentError(
          absl::StrCat("mixture: weight ", k, " is ", weights[k], " (must be finite, >= 0)"));
    }
    wsum += weights[k];
  }
  if (std::abs(wsum - 1.0) > 1e-6) {
    return absl::InvalidArgumentError(absl::StrCat("mixture: weights sum to ", wsum, ", not 1"));
  }
  if (!means.allFinite()) return absl::InvalidArgumentError("mixture: means are not finite");
  StudentMixture mix;
  mix.log_det_.resize(m);
  mix.log_coef_.resize(m);
  mix.inv_chol_t_.resize(m);
  mix.precision_.resize(m);
  for (int64_t k = 0; k < m; ++k) {
    if (!(dof[k] > 0.0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("mixture: degrees of freedom of component ", k, " is ", dof[k]));
    }
    const MatrixXd& s = scales[k];
    if (s.rows() != d || s.cols() != d) {
      return absl::InvalidArgumentError(absl::StrCat("mixture: scale matrix ", k, " is ", s.rows(),
                                                     " x ", s.cols(), ", expected ", d, " x ", d));
    }
    if (!s.allFinite() ||
        (s - s.transpose()).cwiseAbs().maxCoeff() > 1e-9 * std::max(1.0, s.cwiseAbs().maxCoeff())) {
      return absl::InvalidArgumentError(
          absl::StrCat("mixture: scale matrix ", k, " is not finite and symmetric"));
    }
    Eigen::LLT<MatrixXd> llt(s);
    if (llt.info() != Eigen::Success) {
      return absl::InvalidArgumentError(
          absl::StrCat("mixture: scale matrix ", k, " is not positive definite"));
    }
    const MatrixXd l = llt.matrixL();
    MatrixXd linv = MatrixXd::Identity(d, d);
    l.triangularView<Eigen::Lower>().solveInPlace(linv);
    mix.inv_chol_t_[k] = linv.transpose();
    mix.log_det_[k] = 2.0 * l.diagonal().array().log().sum();
    if (!std::isfinite(mix.log_det_[k]) || !UsableInverse(mix.inv_chol_t_[k])) {
      return absl::InvalidArgumentError(
          absl::StrCat("mixture: scale matrix ", k, " is numerically singular"));
    }
    mix.precision_[k] = linv.transpose() * linv;
    mix.log_coef_[k] = (weights[k] > 0.0 ? std::log(weights[k]) : -kInf) +
                       LogNormaliser(dof[k], static_cast<int>(d), mix.log_det_[k]);
  }
  mix.weights_ = std::move(weights);
  mix.means_ = std::move(means);
  mix.mu_t_ = mix.means_.transpose();
  mix.scales_ = std::move(scales);
  mix.dof_ = std::move(dof);
  return mix;
}

void StudentMixture::ComponentLogProb(const Eigen::Ref<const Eigen::MatrixXd>& points,
                                      Eigen::MatrixXd* out) const {
  KernelParams kp{&mu_t_, &inv_chol_t_, &log_coef_, &dof_};
  KernelScratch ks;
  MatrixXd maha;
  KernelLogProb(kp, points, out, &maha, &ks);
}

Eigen::VectorXd StudentMixture::LogDensity(const Eigen::Ref<const Eigen::MatrixXd>& points,
                                           int num_threads) const {
  const int64_t n = points.rows();
  VectorXd out(n);
  const int threads = ThreadsOrDefault(num_threads);
  const double per_row = 2.0 * num_components() * (dim() + 4.0) * dim();
  ForChunks(n, threads, per_row, [&](int64_t begin, int64_t end, int) {
    MatrixXd lp;
    VectorXd lse;
    for (int64_t b = begin; b < end; b += kBlockRows) {
      const int64_t rows = std::min(kBlockRows, end - b);
      ComponentLogProb(points.middleRows(b, rows), &lp);
      RowLogSumExpToResp(&lp, &lse);
      out.segment(b, rows) = lse;
    }
  });
  return out;
}

void StudentMixture::LogDensityAndGradient(const Eigen::Ref<const Eigen::MatrixXd>& points,
                                           Eigen::VectorXd* log_p, Eigen::MatrixXd* grad,
                                           int num_threads) const {
  const int64_t n = points.rows();
  const int d = dim();
  const int m = num_components();
  log_p->resize(n);
  grad->resize(n, d);
  const int64_t blocks = (n + kGradBlockRows - 1) / kGradBlockRows;
  const int threads = static_cast<int>(std::min<int64_t>(
      ThreadsFor(2.0 * n * m * (d + 4.0) * d, ThreadsOrDefault(num_threads)), blocks));
#pragma omp parallel num_threads(std::max(1, threads)) if (threads > 1)
  {
    MatrixXd xb, diff, lp(0, m), a(0, m);
    std::vector<MatrixXd> g(m);
    VectorXd lse, maha;
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t b = blk * kGradBlockRows;
      const int64_t rows = std::min(kGradBlockRows, n - b);
      xb = points.middleRows(b, rows);
      lp.resize(rows, m);
      a.resize(rows, m);
      for (int k = 0; k < m; ++k) {
        diff.noalias() = xb.rowwise() - means_.row(k);
        g[k].noalias() = diff * precision_[k];
        maha = diff.cwiseProduct(g[k]).rowwise().sum().cwiseMax(0.0);
        const double nu = dof_[k];
        if (std::isinf(nu)) {
          lp.col(k) = log_coef_[k] - 0.5 * maha.array();
          a.col(k).setOnes();
        } else {
          lp.col(k) = log_coef_[k] - 0.5 * (nu + d) * Log1pRatio(maha, nu);
          a.col(k) = (nu + d) / (nu + maha.array());
        }
      }
      RowLogSumExpToResp(&lp, &lse);  // lp now holds responsibilities
      log_p->segment(b, rows) = lse;
      auto gb = grad->middleRows(b, rows);
      gb.setZero();
      for (int k = 0; k < m; ++k) {
        gb.noalias() -= (g[k].array().colwise() * (lp.col(k).array() * a.col(k).array())).matrix();
      }
    }
  }
}

std::vector<int32_t> StudentMixture::Assign(const MatrixView& x, const FeatureTransform& t,
                                            int num_threads) const {
  const int64_t n = x.rows();
  const int d = dim();
  std::vector<int32_t> out(n);
  ForChunks(n, ThreadsOrDefault(num_threads), 2.0 * num_components() * (d + 4.0) * d,
            [&](int64_t begin, int64_t end, int) {
              MatrixXd xb, lp;
              for (int64_t b = begin; b < end; b += kBlockRows) {
                const int64_t rows = std::min(kBlockRows, end - b);
                xb.resize(rows, d);
                LoadRows(x, t, b, &xb);
                ComponentLogProb(xb, &lp);
                for (int64_t i = 0; i < rows; ++i) {
                  Eigen::Index k = 0;
                  lp.row(i).maxCoeff(&k);
                  out[b + i] = static_cast<int32_t>(k);
                }
              }
            });
  return out;
}

absl::StatusOr<StudentMixture> StudentMixture::Subset(absl::Span<const int32_t> keep) const {
  if (keep.empty()) return absl::InvalidArgumentError("mixture subset: no components kept");
  std::vector<double> w;
  RowMatrixD mu(keep.size(), dim());
  std::vector<MatrixXd> sc;
  std::vector<double> nu;
  double total = 0.0;
  for (size_t i = 0; i < keep.size(); ++i) {
    const int32_t k = keep[i];
    if (k < 0 || k >= num_components()) {
      return absl::InvalidArgumentError(
          absl::StrCat("mixture subset: component ", k, " is outside [0, ", num_components(), ")"));
    }
    w.push_back(weights_[k]);
    total += weights_[k];
    mu.row(i) = means_.row(k);
    sc.push_back(scales_[k]);
    nu.push_back(dof_[k]);
  }
  if (!(total > 0.0)) {
    return absl::InvalidArgumentError("mixture subset: the kept components have zero weight");
  }
  for (double& v : w) v /= total;
  return Create(std::move(w), std::move(mu), std::move(sc), std::move(nu));
}

std::vector<double> StudentMixture::Elongations() const {
  std::vector<double> out(num_components());
  for (int k = 0; k < num_components(); ++k) {
    Eigen::SelfAdjointEigenSolver<MatrixXd> es(scales_[k], Eigen::EigenvaluesOnly);
    const double lo = es.eigenvalues().minCoeff();
    const double hi = es.eigenvalues().maxCoeff();
    out[k] = lo > 0.0 ? hi / lo : kInf;
  }
  return out;
}

// ---------------------------------------------------------------- fitting

absl::StatusOr<MixtureFit> FitStudentMixture(const MatrixView& x, const FeatureTransform& t,
                                             const MixtureOptions& options, RunContext& ctx) {
  DENDRO_RETURN_IF_ERROR(ValidateMixtureOptions(options, x.rows(), x.cols()));
  if (!t.identity() && (static_cast<int64_t>(t.center.size()) != x.cols() ||
                        static_cast<int64_t>(t.scale.size()) != x.cols())) {
    return absl::InvalidArgumentError("feature transform does not match the data's columns");
  }
  const int threads = ThreadsOrDefault(options.num_threads);
  const int restarts = options.restarts;
  DENDRO_ASSIGN_OR_RETURN(DataMoments moments, ComputeMoments(x, t, threads, ctx));
  if (!moments.cov.allFinite()) {
    return absl::InvalidArgumentError("the data covariance is not finite (NaN or huge values?)");
  }

  ProgressTracker progress(ctx, restarts, options.max_iterations);
  std::atomic<bool> cancelled{false};
  std::vector<RestartResult> results(restarts);
  if (restarts >= 2 && threads >= 2) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(std::min(threads, restarts))
    for (int r = 0; r < restarts; ++r) {
      if (cancelled.load()) continue;
      results[r] = RunRestart(x, t, options, r, moments, 1, ctx, &progress, &cancelled);
    }
  } else {
    for (int r = 0; r < restarts && !cancelled.load(); ++r) {
      results[r] = RunRestart(x, t, options, r, moments, threads, ctx, &progress, &cancelled);
    }
  }
  if (cancelled.load() || ctx.Cancelled()) return absl::CancelledError("job cancelled");

  // The mixture of a restart that did not fail, weights normalised.
  auto mixture_of = [](const RestartResult& rr) -> absl::StatusOr<StudentMixture> {
    RowMatrixD means = rr.state.mu.transpose();
    std::vector<double> w = rr.state.weight;
    double wsum = 0.0;
    for (double v : w) wsum += v;
    for (double& v : w) v /= wsum;
    absl::StatusOr<StudentMixture> mix =
        StudentMixture::Create(std::move(w), std::move(means), rr.state.scale, rr.state.dof);
    if (!mix.ok()) {
      return absl::InternalError(
          absl::StrCat("EM produced an invalid mixture: ", mix.status().message()));
    }
    return mix;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> score(restarts, nan);
  for (int r = 0; r < restarts; ++r) {
    if (results[r].failed) continue;
    if (!options.restart_score) {
      score[r] = results[r].ll;
      continue;
    }
    DENDRO_ASSIGN_OR_RETURN(const StudentMixture mix, mixture_of(results[r]));
    DENDRO_ASSIGN_OR_RETURN(score[r], options.restart_score(mix));
    if (ctx.Cancelled()) return absl::CancelledError("job cancelled");
  }

  int best = -1;
  bool best_converged = false;
  int converged = 0, failed = 0;
  int64_t total_iter = 0;
  std::string first_failure;
  for (int r = 0; r < restarts; ++r) {
    const RestartResult& rr = results[r];
    total_iter += rr.iterations;
    if (rr.failed) {
      ++failed;
      if (first_failure.empty()) first_failure = rr.failure;
      continue;
    }
    if (rr.converged) ++converged;
    const bool better = best < 0 || (rr.converged && !best_converged) ||
                        (rr.converged == best_converged && score[r] > score[best]);
    if (better) {
      best = r;
      best_converged = rr.converged;
    }
  }
  if (best < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("all ", restarts, " EM restarts failed numerically (first: ", first_failure,
                     "); try a larger ridge or fewer components"));
  }
  const RestartResult& br = results[best];
  DENDRO_ASSIGN_OR_RETURN(StudentMixture mix, mixture_of(br));
  MixtureFit fit{std::move(mix), 0.0, -1, 0, false, 0, 0, 0, {}, {}, {}, {}, {}};
  fit.log_likelihood = br.ll;
  fit.best_restart = best;
  fit.iterations = br.iterations;
  fit.converged = br.converged;
  fit.converged_restarts = converged;
  fit.failed_restarts = failed;
  fit.total_iterations = total_iter;
  fit.trace = br.trace;
  for (const RestartResult& rr : results) {
    fit.restart_log_likelihood.push_back(rr.failed ? nan : rr.ll);
    fit.restart_iterations.push_back(rr.iterations);
    fit.restart_converged.push_back(rr.converged);
  }
  if (options.restart_score) fit.restart_score = std::move(score);
  return fit;
}

}  // namespace dendro
