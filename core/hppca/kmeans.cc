// Super-class clustering (paper section 4.4 and 5.4).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/hppca/internal.h"

namespace dendro::hppca_internal {
namespace {

using RowMatrixDX = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Samples an index with probability proportional to w (w >= 0, sum > 0).
int64_t SampleProportional(const std::vector<double>& w, std::mt19937_64& rng) {
  double total = 0.0;
  for (double v : w) total += v;
  std::uniform_real_distribution<double> u(0.0, total);
  const double target = u(rng);
  double acc = 0.0;
  int64_t last_positive = -1;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] <= 0.0) continue;
    acc += w[i];
    last_positive = static_cast<int64_t>(i);
    if (acc >= target) return last_positive;
  }
  return last_positive;
}

// Classes in each group, ascending.
std::vector<std::vector<int32_t>> Groups(absl::Span<const int32_t> assignment, int32_t s) {
  std::vector<std::vector<int32_t>> g(s);
  for (size_t i = 0; i < assignment.size(); ++i) {
    g[assignment[i]].push_back(static_cast<int32_t>(i));
  }
  return g;
}

}  // namespace

namespace {

// Each class's Bhattacharyya distance to its nearest seed, updated as seeds
// are added (GreedySeeds). Update(c, cur, out) sets out[i] = min(cur[i],
// B(i, c)) for every class i not yet chosen, exact where it matters: bounds
// first, then exact distances for the classes whose bound is below their
// current minimum.
//
// For pruning: by Cauchy-Schwarz, dmu^T Sigma^{-1} dmu >= |dmu|^4 / dmu^T
// Sigma dmu, and dmu^T Sigma dmu needs only the projections of dmu on both
// bases, which two GEMVs per seed give for all classes at once. The log-det
// term is >= 0.
class SeedDistances {
 public:
  SeedDistances(absl::Span<const GaussianRef> classes, int threads, RunContext* ctx)
      : classes_(classes),
        k_(static_cast<int64_t>(classes.size())),
        threads_(threads),
        ctx_(ctx),
        chosen_(k_, 0),
        need_(k_) {
    const int64_t d = classes[0].dim();
    Eigen::VectorXd center = Eigen::VectorXd::Zero(d);
    for (const GaussianRef& g : classes) center += g.mean;
    center /= static_cast<double>(k_);
    means_.resize(k_, d);
    for (int64_t i = 0; i < k_; ++i) {
      means_.row(i) = (classes[i].mean - center).transpose().cast<float>();
    }
    own_proj_.resize(k_);
    for (int64_t i = 0; i < k_; ++i) own_proj_[i] = classes[i].basis * means_.row(i).transpose();
  }

  bool chosen(int64_t i) const { return chosen_[i] != 0; }
  void Choose(int32_t c) { chosen_[c] = 1; }

  // `only` (optional) restricts the evaluation to the flagged classes.
  absl::Status Update(int32_t c, const std::vector<double>& cur, std::vector<double>* out,
                      const std::vector<char>* only = nullptr);

 private:
  // Whether the bounds pruned enough in the last full update ([0]) and the
  // last update on the candidates' sample ([1]).
  struct BoundsUse {
    bool pays = true;
    int64_t skipped = 0;
  };
  static constexpr double kMinPruned = 0.05;
  static constexpr int64_t kRecheckBounds = 8;

  const absl::Span<const GaussianRef> classes_;
  const int64_t k_;
  const int threads_;
  RunContext* const ctx_;
  RowMatrixF means_;                     // mu_i - center
  std::vector<Eigen::VectorXf> own_proj_;  // V_i (mu_i - center)
  std::vector<char> chosen_;
  std::vector<char> need_;
  BoundsUse bounds_use_[2];
};

absl::Status SeedDistances::Update(int32_t c, const std::vector<double>& cur,
                                   std::vector<double>* out, const std::vector<char>* only) {
  *out = cur;
  (*out)[c] = 0.0;
  const GaussianRef& gc = classes_[c];
  const Eigen::VectorXf mc = means_.row(c).transpose();
  const Eigen::VectorXf bc = gc.basis * mc;
  // V_c (mu_i - center) for every evaluated class: one GEMM over all
  // classes, or one GEMV per flagged class when `only` is given (a
  // candidate is compared on a small sample).
  RowMatrixF b;
  if (only == nullptr) b.noalias() = means_ * gc.basis.transpose();
  auto proj_c = [&](int64_t i) -> Eigen::VectorXd {
    if (only == nullptr) return (b.row(i).transpose() - bc).cast<double>();
    return (gc.basis * means_.row(i).transpose() - bc).cast<double>();
  };
  // Bounds are skipped (every evaluated class is computed exactly, which
  // gives the same minimum) while they do not pay: after an update of the
  // same kind that pruned under kMinPruned of its classes, except on every
  // kRecheckBounds-th update. At K = 10,000 (docs/benchmarks.md) they
  // pruned no class at all.
  BoundsUse& use = bounds_use_[only == nullptr ? 0 : 1];
  const bool bounds = use.pays || ++use.skipped % kRecheckBounds == 0;
  int64_t evaluated = 0;
  DENDRO_RETURN_IF_ERROR(ParallelFor((k_ + 255) / 256, threads_, ctx_, [&](int64_t blk) {
    for (int64_t i = blk * 256; i < std::min(k_, (blk + 1) * 256); ++i) {
      need_[i] = 0;
      if (chosen_[i] || i == c || (only != nullptr && !(*only)[i])) continue;
      if (!bounds) {
        need_[i] = 1;
        continue;
      }
      const GaussianRef& gi = classes_[i];
      const double dist2 = (means_.row(i) - mc.transpose()).cast<double>().squaredNorm();
      double quad = 0.5 * (gi.noise + gc.noise) * dist2;
      const Eigen::VectorXf a = own_proj_[i] - gi.basis * mc;  // V_i (mu_i - mu_c)
      for (int32_t j = 0; j < gi.rank(); ++j) quad += 0.5 * gi.excess[j] * double(a[j]) * a[j];
      const Eigen::VectorXd t = proj_c(i);
      for (int32_t j = 0; j < gc.rank(); ++j) quad += 0.5 * gc.excess[j] * t[j] * t[j];
      double lb = BhattacharyyaLowerBound(gi, gc);
      if (quad > 0.0) lb = std::max(lb, (1.0 - 1e-4) * dist2 * dist2 / (8.0 * quad));
      // Only an exact distance below the current minimum can change it.
      need_[i] = lb < cur[i];
    }
  }));
  std::vector<int64_t> todo;
  for (int64_t i = 0; i < k_; ++i) {
    if (need_[i]) todo.push_back(i);
    if (!chosen_[i] && i != c && (only == nullptr || (*only)[i])) ++evaluated;
  }
  if (bounds) {
    use.pays = static_cast<double>(evaluated - static_cast<int64_t>(todo.size())) >=
               kMinPruned * static_cast<double>(evaluated);
  }
  // Each exact distance forms its own q_i x q_c cross product of the bases
  // (read in place: the class bases are not copied) on the thread that
  // uses it, so the whole step runs on all threads.
  return ParallelFor(static_cast<int64_t>(todo.size()), threads_, ctx_, [&](int64_t t) {
    const int64_t i = todo[t];
    const GaussianRef& gi = classes_[i];
    double v;
    if (gi.rank() > 0 && gc.rank() > 0) {
      const Eigen::MatrixXf cross = gi.basis * gc.basis.transpose();
      const Eigen::VectorXd pi = (own_proj_[i] - gi.basis * mc).cast<double>();
      const double dist2 = (means_.row(i) - mc.transpose()).cast<double>().squaredNorm();
      v = BhattacharyyaFromParts(gi, gc, cross, pi, proj_c(i), dist2);
    } else {
      v = BhattacharyyaDistance(gi, gc);
    }
    (*out)[i] = std::min(cur[i], std::max(v, 0.0));
  });
}

// Up to `trials` distinct unchosen classes drawn with probability
// proportional to their distance to the nearest seed; one drawn uniformly
// among the unchosen when every remaining class coincides with a seed.
std::vector<int32_t> DrawCandidates(const SeedDistances& seeds, const std::vector<double>& mind,
                                    int32_t trials, std::mt19937_64& rng) {
  const int64_t k = static_cast<int64_t>(mind.size());
  std::vector<double> w(k);
  double total = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    w[i] = seeds.chosen(i) ? 0.0 : mind[i];
    total += w[i];
  }
  std::vector<int32_t> cands;
  if (total > 0.0 && std::isfinite(total)) {
    for (int32_t t = 0; t < trials; ++t) {
      const int64_t c = SampleProportional(w, rng);
      if (c >= 0 && !seeds.chosen(c) &&
          std::find(cands.begin(), cands.end(), static_cast<int32_t>(c)) == cands.end()) {
        cands.push_back(static_cast<int32_t>(c));
      }
    }
  }
  if (cands.empty()) {
    std::vector<int32_t> rest;
    for (int64_t i = 0; i < k; ++i) {
      if (!seeds.chosen(i)) rest.push_back(static_cast<int32_t>(i));
    }
    cands.push_back(rest[std::uniform_int_distribution<size_t>(0, rest.size() - 1)(rng)]);
  }
  return cands;
}

// Greedy k-means++ over all of `classes` with the generator `rng`.
absl::StatusOr<std::vector<int32_t>> GreedySeeds(absl::Span<const GaussianRef> classes,
                                                 int32_t s, std::mt19937_64& rng, int threads,
                                                 RunContext* ctx) {
  const int64_t k = static_cast<int64_t>(classes.size());
  SeedDistances distances(classes, threads, ctx);
  // Greedy k-means++ (as in scikit-learn): each step draws 2 + ln(S)
  // candidates with probability proportional to their distance to the
  // nearest seed and keeps the one that lowers the summed distance most.
  // With many classes the candidates are compared on a fixed random sample
  // of kPotentialSample classes; the winner is then evaluated on all.
  const int32_t trials = 2 + static_cast<int32_t>(std::log(static_cast<double>(s)));
  constexpr int64_t kPotentialSample = 256;
  std::vector<char> sample;
  if (k > kPotentialSample) {
    std::vector<int64_t> idx(k);
    std::iota(idx.begin(), idx.end(), 0);
    std::shuffle(idx.begin(), idx.end(), rng);
    sample.assign(k, 0);
    for (int64_t i = 0; i < kPotentialSample; ++i) sample[idx[i]] = 1;
  }
  const std::vector<char>* only = sample.empty() ? nullptr : &sample;
  std::vector<int32_t> seeds;
  std::vector<double> mind(k, std::numeric_limits<double>::infinity()), trial;
  const int32_t first = static_cast<int32_t>(std::uniform_int_distribution<int64_t>(0, k - 1)(rng));
  DENDRO_RETURN_IF_ERROR(distances.Update(first, mind, &trial));
  mind.swap(trial);
  distances.Choose(first);
  seeds.push_back(first);
  while (static_cast<int32_t>(seeds.size()) < s) {
    // A step also costs a K x d by d x q product per candidate outside the
    // polled ParallelFor calls; poll once per seed as well.
    if (ctx != nullptr && ctx->Cancelled()) return absl::CancelledError("job cancelled");
    const std::vector<int32_t> cands = DrawCandidates(distances, mind, trials, rng);
    int32_t best = -1;
    double best_pot = std::numeric_limits<double>::infinity();
    std::vector<double> best_mind;
    for (int32_t c : cands) {
      if (cands.size() == 1) {
        best = c;
        break;
      }
      DENDRO_RETURN_IF_ERROR(distances.Update(c, mind, &trial, only));
      double pot = 0.0;
      for (int64_t i = 0; i < k; ++i) {
        if (!distances.chosen(i) && (only == nullptr || (*only)[i])) pot += trial[i];
      }
      if (best < 0 || pot < best_pot) {
        best = c;
        best_pot = pot;
        best_mind.swap(trial);
      }
    }
    if (only != nullptr || cands.size() == 1) {
      DENDRO_RETURN_IF_ERROR(distances.Update(best, mind, &best_mind));
    }
    mind.swap(best_mind);
    distances.Choose(best);
    seeds.push_back(best);
  }
  return seeds;
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> BhattacharyyaSeeds(absl::Span<const GaussianRef> classes,
                                                        int32_t s, uint64_t seed, int threads,
                                                        RunContext* ctx, int64_t sample) {
  const int64_t k = static_cast<int64_t>(classes.size());
  if (s < 1 || s > k) {
    return absl::InvalidArgumentError(absl::StrCat("cannot seed ", s, " clusters from ", k,
                                                   " classes"));
  }
  sample = sample < 0 ? k : std::clamp<int64_t>(sample, s, k);
  std::mt19937_64 rng(seed);
  if (sample == k) return GreedySeeds(classes, s, rng, threads, ctx);
  // A uniform sample of `sample` classes (a partial Fisher-Yates shuffle),
  // seeded in ascending class order; the seeds map back to class indices.
  std::vector<int32_t> idx(k);
  std::iota(idx.begin(), idx.end(), 0);
  for (int64_t i = 0; i < sample; ++i) {
    const int64_t j = std::uniform_int_distribution<int64_t>(i, k - 1)(rng);
    std::swap(idx[i], idx[j]);
  }
  idx.resize(sample);
  std::sort(idx.begin(), idx.end());
  std::vector<GaussianRef> subset;
  subset.reserve(sample);
  for (int32_t i : idx) subset.push_back(classes[i]);
  DENDRO_ASSIGN_OR_RETURN(std::vector<int32_t> local, GreedySeeds(subset, s, rng, threads, ctx));
  for (int32_t& v : local) v = idx[v];
  return local;
}

namespace {

// Writes the lower triangle of W W^T (W: d x m) to `out`, column by column
// (the same order as the upper triangle row by row), the off-diagonal
// entries multiplied by `off_diagonal`: d (d + 1) / 2 values. The triangle is
// computed in blocks of kPackColumns columns, each one GEMM of the rows at
// and below the block into `scratch` (d x kPackColumns at most), so neither
// the full d x d product nor its upper half is formed: at d = 640, m = 50
// about half the arithmetic and memory traffic of a full GEMM followed by
// packing, 0.48 ms against 0.84 ms on one core (docs/methods.md).
constexpr int64_t kPackColumns = 64;
void PackedGram(const Eigen::MatrixXf& w, float off_diagonal, float* out,
                Eigen::MatrixXf* scratch) {
  const int64_t d = w.rows();
  for (int64_t x0 = 0; x0 < d; x0 += kPackColumns) {
    const int64_t nb = std::min(kPackColumns, d - x0);
    scratch->resize(d - x0, nb);
    scratch->noalias() = w.bottomRows(d - x0) * w.middleRows(x0, nb).transpose();
    for (int64_t x = 0; x < nb; ++x) {
      const float* col = scratch->col(x).data();  // rows x0 .. d - 1
      *out++ = col[x];
      for (int64_t y = x + 1; y < d - x0; ++y) *out++ = off_diagonal * col[y];
    }
  }
}

// The packed inner products of GramCrossTerms are summed in single
// precision over kGramDepth packed entries at a time and the partial sums
// added in double, so each float sum has about as many terms as a basis
// product (d) rather than d (d + 1) / 2.
constexpr int64_t kGramDepth = 1024;

// F(i, j) = <A_j, C_i>_F for every class i and centroid j (see AssignByKl):
// A_j = U_j^T diag(omega_j) U_j from the stacked centroid bases `u` (rows
// off[j] .. off[j + 1]) and C_i = V_i^T diag(e_i) V_i. Both are symmetric,
// so each is packed as one triangle (the centroid side carries the
// factor 2 of the off-diagonal entries) and F is a GEMM of the packed rows,
// classes in chunks of about 32 MB of floats per thread. The packed
// matrices and the GEMM are single precision, like the class bases and the
// basis-product route: at K = 10,000, d = 640 this route forms C_i for every
// class in every round, and in double it took about half of the clustering
// (docs/benchmarks.md). (Chunks of 256 MB ran the product itself faster in
// isolation, but made the K = 1,000 rounds twice as slow: fewer chunks to
// share between the threads, and a fresh buffer per thread and call.)
absl::StatusOr<RowMatrixDX> GramCrossTerms(absl::Span<const GaussianRef> classes,
                                           const RowMatrixDX& u, const Eigen::VectorXd& omega,
                                           const std::vector<int64_t>& off, int threads,
                                           RunContext* ctx) {
  const int64_t k = static_cast<int64_t>(classes.size());
  const int32_t s = static_cast<int32_t>(off.size()) - 1;
  const int64_t d = u.cols();
  const int64_t packed = d * (d + 1) / 2;
  RowMatrixF a(s, packed);
  DENDRO_RETURN_IF_ERROR(ParallelFor(s, threads, ctx, [&](int64_t j) {
    const int64_t r = off[j + 1] - off[j];
    Eigen::MatrixXf scratch;
    if (r > 0) {
      const Eigen::MatrixXf w =
          (u.middleRows(off[j], r).transpose() *
           omega.segment(off[j], r).cwiseMax(0.0).cwiseSqrt().asDiagonal())
              .cast<float>();
      PackedGram(w, 2.0f, a.row(j).data(), &scratch);
    } else {
      a.row(j).setZero();
    }
  }));
  const int64_t chunk = std::clamp<int64_t>((int64_t{8} << 20) / packed, 1, 256);
  const int64_t chunks = (k + chunk - 1) / chunk;
  const int pool = std::max(1, threads);
  std::vector<RowMatrixF> c_buf(pool), f_buf(pool);
  RowMatrixDX f(k, s);
  DENDRO_RETURN_IF_ERROR(ParallelFor(chunks, threads, ctx, [&](int64_t ch) {
    const int64_t i0 = ch * chunk, n = std::min(chunk, k - i0);
    const int slot = omp_get_thread_num() % pool;
    RowMatrixF& c = c_buf[slot];
    RowMatrixF& part = f_buf[slot];
    if (c.rows() != chunk || c.cols() != packed) c.resize(chunk, packed);
    Eigen::MatrixXf scratch;
    // C_i is formed from e_i / max(e_i) and F scaled back in double, so
    // that single precision neither overflows nor underflows whatever the
    // data's scale (omega is in [0, 1] already).
    Eigen::VectorXd class_scale = Eigen::VectorXd::Zero(n);
    for (int64_t t = 0; t < n; ++t) {
      const GaussianRef& p = classes[i0 + t];
      const double e_max = p.rank() > 0 ? p.excess.maxCoeff() : 0.0;
      if (e_max > 0.0) {
        class_scale[t] = e_max;
        const Eigen::MatrixXf w =
            p.basis.transpose() *
            (p.excess / e_max).cwiseMax(0.0).cwiseSqrt().cast<float>().asDiagonal();
        PackedGram(w, 1.0f, c.row(t).data(), &scratch);
      } else {
        c.row(t).setZero();
      }
    }
    auto out = f.middleRows(i0, n);
    out.setZero();
    for (int64_t x0 = 0; x0 < packed; x0 += kGramDepth) {
      const int64_t depth = std::min(kGramDepth, packed - x0);
      part.noalias() = c.topRows(n).middleCols(x0, depth) * a.middleCols(x0, depth).transpose();
      out += part.cast<double>();
    }
    out = class_scale.asDiagonal() * out;
  }));
  return f;
}

// Per centroid Q, the terms of 2 KL(P || Q) = base(P, Q) - F(P, Q) / noise_Q
// that depend on Q alone (AssignByKl has the formula): its basis stacked
// with the others' (rows off[j] .. off[j + 1] of u), the weights omega of
// its directions, and its mean about the centroids' centre.
struct KlCentroidTerms {
  std::vector<int32_t> rank;
  std::vector<int64_t> off;
  RowMatrixDX u;  // stacked centroid bases (double)
  Eigen::VectorXd omega;
  std::vector<double> logdet_q, trinv_q, noise_q, omega_max, mu_norm2;
  std::vector<Eigen::VectorXd> mu_proj;
  Eigen::VectorXd center;
  RowMatrixDX mu_q;
};

KlCentroidTerms CentroidTerms(absl::Span<const LowRankGaussian> centroids, int64_t d) {
  const int32_t s = static_cast<int32_t>(centroids.size());
  KlCentroidTerms q;
  q.rank.resize(s);
  q.off.assign(s + 1, 0);
  for (int32_t j = 0; j < s; ++j) {
    q.rank[j] = static_cast<int32_t>(centroids[j].excess.size());
    q.off[j + 1] = q.off[j] + q.rank[j];
  }
  q.u.resize(q.off[s], d);
  q.omega.resize(q.off[s]);
  q.logdet_q.resize(s);
  q.trinv_q.resize(s);
  q.noise_q.resize(s);
  q.omega_max.resize(s);
  q.mu_norm2.resize(s);
  q.mu_proj.resize(s);
  q.center = Eigen::VectorXd::Zero(d);
  for (int32_t j = 0; j < s; ++j) q.center += centroids[j].mean;
  q.center /= static_cast<double>(s);
  q.mu_q.resize(s, d);
  for (int32_t j = 0; j < s; ++j) {
    const LowRankGaussian& c = centroids[j];
    const GaussianRef g = c.ref();
    const int32_t r = q.rank[j];
    q.logdet_q[j] = LogDet(g);
    q.trinv_q[j] = TraceInverse(g);
    q.noise_q[j] = c.noise;
    q.u.middleRows(q.off[j], r) = c.basis.cast<double>();
    q.omega.segment(q.off[j], r) = c.excess.array() / (c.excess.array() + c.noise);
    q.omega_max[j] = r > 0 ? q.omega.segment(q.off[j], r).maxCoeff() : 0.0;
    q.mu_q.row(j) = (c.mean - q.center).transpose();
    q.mu_norm2[j] = q.mu_q.row(j).squaredNorm();
    q.mu_proj[j] = q.u.middleRows(q.off[j], r) * q.mu_q.row(j).transpose();
  }
  return q;
}

// The bases and weights of the centroids `cols`, stacked (rows off[t] ..
// off[t + 1] for cols[t]): the full stack when `cols` is every centroid, a
// copy of their rows otherwise.
struct ColumnBases {
  std::vector<int64_t> off;
  RowMatrixDX u_copy;
  Eigen::VectorXd omega_copy;
  const RowMatrixDX* u = nullptr;
  const Eigen::VectorXd* omega = nullptr;
};

void StackColumnBases(const KlCentroidTerms& q, const std::vector<int32_t>& cols,
                      ColumnBases* out) {
  const int32_t s = static_cast<int32_t>(q.rank.size());
  const int32_t nc = static_cast<int32_t>(cols.size());
  out->off.assign(nc + 1, 0);
  for (int32_t t = 0; t < nc; ++t) out->off[t + 1] = out->off[t] + q.rank[cols[t]];
  if (nc == s) {
    out->u = &q.u;
    out->omega = &q.omega;
    return;
  }
  out->u_copy.resize(out->off[nc], q.u.cols());
  out->omega_copy.resize(out->off[nc]);
  for (int32_t t = 0; t < nc; ++t) {
    const int32_t j = cols[t];
    out->u_copy.middleRows(out->off[t], q.rank[j]) = q.u.middleRows(q.off[j], q.rank[j]);
    out->omega_copy.segment(out->off[t], q.rank[j]) = q.omega.segment(q.off[j], q.rank[j]);
  }
  out->u = &out->u_copy;
  out->omega = &out->omega_copy;
}

// A centroid a class is compared with exactly: base(P, Q) and, once
// computed, KL(P || Q).
struct KlCandidate {
  int32_t j;
  double base;
  double kl;
};

// Phase 1 of AssignByKl: bounds for every (class, centroid in `cols`); the
// candidates of a class are the centroids whose lower bound beats its best
// upper bound (all of them when `keep_all`).
absl::StatusOr<std::vector<std::vector<KlCandidate>>> BoundCandidates(
    absl::Span<const GaussianRef> classes, const KlCentroidTerms& q,
    const std::vector<int32_t>& cols, const ColumnBases& bases, bool keep_all, int threads,
    RunContext* ctx) {
  const int64_t k = static_cast<int64_t>(classes.size());
  const int32_t s = static_cast<int32_t>(q.rank.size());
  const int32_t nc = static_cast<int32_t>(cols.size());
  const int64_t d = q.u.cols();
  std::vector<std::vector<KlCandidate>> cands(k);
  constexpr int64_t kChunk = 128;
  const int64_t chunks = (k + kChunk - 1) / kChunk;
  DENDRO_RETURN_IF_ERROR(ParallelFor(chunks, threads, ctx, [&](int64_t ch) {
    const int64_t i0 = ch * kChunk, i1 = std::min(k, i0 + kChunk);
    RowMatrixDX mu(i1 - i0, d);
    for (int64_t i = i0; i < i1; ++i) mu.row(i - i0) = (classes[i].mean - q.center).transpose();
    const RowMatrixDX proj = mu * bases.u->transpose();  // classes x sum of cols' ranks
    const RowMatrixDX dots = mu * q.mu_q.transpose();     // classes x s
    std::vector<double> base(s), lower(s);
    for (int64_t i = i0; i < i1; ++i) {
      const GaussianRef& p = classes[i];
      const int64_t row = i - i0;
      const double logdet_p = LogDet(p);
      const double tr_e = p.excess.sum();
      const double mn2 = mu.row(row).squaredNorm();
      double best_ub = std::numeric_limits<double>::infinity();
      for (int32_t t = 0; t < nc; ++t) {
        const int32_t j = cols[t];
        double m = 0.0;
        for (int64_t l = 0; l < q.rank[j]; ++l) {
          const double a = proj(row, bases.off[t] + l) - q.mu_proj[j][l];
          m += q.omega[q.off[j] + l] * a * a;
        }
        const double dist2 = mn2 - 2.0 * dots(row, j) + q.mu_norm2[j];
        const double mahal = (dist2 - m) / q.noise_q[j];
        base[j] = q.logdet_q[j] - logdet_p - static_cast<double>(d) + p.noise * q.trinv_q[j] +
                  tr_e / q.noise_q[j] + mahal;
        lower[j] = base[j] - q.omega_max[j] * tr_e / q.noise_q[j];
        best_ub = std::min(best_ub, base[j]);
      }
      const double slack = 1e-6 * (std::fabs(best_ub) + 1.0);
      for (int32_t j : cols) {
        if (keep_all || lower[j] <= best_ub + slack) cands[i].push_back({j, base[j], 0.0});
      }
    }
  }));
  return cands;
}

// Phase 2 of AssignByKl by basis products: per centroid, GEMMs of its basis
// against the bases of its candidate classes, kPhase2Classes classes at a
// time into per-thread buffers (one buffer for all candidates would be
// K q x d floats per centroid, allocated and zeroed S times a round).
absl::Status KlByBasisProducts(absl::Span<const GaussianRef> classes,
                               absl::Span<const LowRankGaussian> centroids,
                               const KlCentroidTerms& q, int32_t max_rank,
                               int32_t max_centroid_rank,
                               std::vector<std::vector<KlCandidate>>& cands, int threads,
                               RunContext* ctx) {
  const int64_t k = static_cast<int64_t>(classes.size());
  const int32_t s = static_cast<int32_t>(centroids.size());
  const int64_t d = q.u.cols();
  std::vector<std::vector<std::pair<int64_t, size_t>>> by_centroid(s);
  for (int64_t i = 0; i < k; ++i) {
    for (size_t a = 0; a < cands[i].size(); ++a) by_centroid[cands[i][a].j].push_back({i, a});
  }
  constexpr size_t kPhase2Classes = 256;
  struct Item {
    int32_t j;
    size_t begin, end;  // range of by_centroid[j]
  };
  std::vector<Item> items;
  for (int32_t j = 0; j < s; ++j) {
    for (size_t b = 0; b < by_centroid[j].size(); b += kPhase2Classes) {
      items.push_back({j, b, std::min(by_centroid[j].size(), b + kPhase2Classes)});
    }
  }
  const int pool = std::max(1, threads);
  std::vector<RowMatrixF> v_buf(pool), g_buf(pool);
  return ParallelFor(static_cast<int64_t>(items.size()), threads, ctx, [&](int64_t item) {
    const Item& it = items[item];
    const int32_t j = it.j;
    const auto& list = by_centroid[j];
    const size_t n = it.end - it.begin;
    std::vector<int64_t> row0(n + 1, 0);
    for (size_t t = 0; t < n; ++t) {
      row0[t + 1] = row0[t] + classes[list[it.begin + t].first].rank();
    }
    RowMatrixF& v = v_buf[omp_get_thread_num() % pool];
    RowMatrixF& g = g_buf[omp_get_thread_num() % pool];
    if (v.rows() < static_cast<int64_t>(kPhase2Classes) * max_rank || v.cols() != d) {
      v.resize(static_cast<int64_t>(kPhase2Classes) * max_rank, d);
    }
    for (size_t t = 0; t < n; ++t) {
      const GaussianRef& p = classes[list[it.begin + t].first];
      v.middleRows(row0[t], p.rank()) = p.basis;
    }
    const LowRankGaussian& c = centroids[j];
    if (g.rows() < v.rows() || g.cols() < std::max(max_centroid_rank, 1)) {
      g.resize(v.rows(), std::max(max_centroid_rank, 1));
    }
    if (q.rank[j] > 0 && row0.back() > 0) {
      g.topLeftCorner(row0.back(), q.rank[j]).noalias() =
          v.topRows(row0.back()) * c.basis.transpose();
    }
    for (size_t t = 0; t < n; ++t) {
      const GaussianRef& p = classes[list[it.begin + t].first];
      double f = 0.0;
      for (int32_t m = 0; m < p.rank(); ++m) {
        double inner = 0.0;
        for (int32_t l = 0; l < q.rank[j]; ++l) {
          const double x = g(row0[t] + m, l);
          inner += q.omega[q.off[j] + l] * x * x;
        }
        f += p.excess[m] * inner;
      }
      KlCandidate& cand = cands[list[it.begin + t].first][list[it.begin + t].second];
      cand.kl = 0.5 * (cand.base - f / q.noise_q[j]);
    }
  });
}

// Phase 3 of AssignByKl: each class's best centroid (ties to the lower
// index) among its candidates, or among every cached column.
std::vector<int32_t> BestCentroids(const std::vector<std::vector<KlCandidate>>& cands,
                                   const std::vector<int32_t>& cols, int32_t s, KlCache* cache,
                                   std::vector<double>* kl) {
  const int64_t k = static_cast<int64_t>(cands.size());
  std::vector<int32_t> best(k, 0);
  std::vector<double> best_kl(k, 0.0);
  if (cache != nullptr) {
    for (int64_t i = 0; i < k; ++i) {
      for (const KlCandidate& c : cands[i]) cache->values(i, c.j) = c.kl;
    }
    for (int32_t j : cols) cache->valid[j] = 1;
  }
  for (int64_t i = 0; i < k; ++i) {
    double best_val = std::numeric_limits<double>::infinity();
    if (cache != nullptr) {
      for (int32_t j = 0; j < s; ++j) {
        if (cache->values(i, j) < best_val) {
          best_val = cache->values(i, j);
          best[i] = j;
        }
      }
    } else {
      for (const KlCandidate& c : cands[i]) {
        if (c.kl < best_val) {
          best_val = c.kl;
          best[i] = c.j;
        }
      }
    }
    best_kl[i] = best_val;
  }
  if (kl != nullptr) *kl = std::move(best_kl);
  return best;
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> AssignByKl(absl::Span<const GaussianRef> classes,
                                                absl::Span<const LowRankGaussian> centroids,
                                                int threads, RunContext* ctx,
                                                std::vector<double>* kl, KlCrossTerm cross,
                                                KlCache* cache) {
  const int64_t k = static_cast<int64_t>(classes.size());
  const int32_t s = static_cast<int32_t>(centroids.size());
  if (s < 1) return absl::InvalidArgumentError("no centroids to assign to");
  if (cache != nullptr && (cache->values.rows() != k || cache->values.cols() != s ||
                           static_cast<int32_t>(cache->valid.size()) != s)) {
    cache->values.setZero(k, s);
    cache->valid.assign(s, 0);
  }
  // The centroids computed this call: all, or those whose cached column is stale.
  std::vector<int32_t> cols;
  for (int32_t j = 0; j < s; ++j) {
    if (cache == nullptr || !cache->valid[j]) cols.push_back(j);
  }
  const int32_t nc = static_cast<int32_t>(cols.size());
  const int64_t d = classes.empty() ? 0 : classes[0].dim();
  // Per centroid: 2 KL(P || Q) = base(P, Q) - F(P, Q) / noise_Q with
  //   base = log|Q| - log|P| - d + noise_P tr(Q^{-1}) + tr(E_P) / noise_Q + mahal,
  //   0 <= F <= omega_max tr(E_P),
  // so base is an upper bound and base - omega_max tr(E_P) / noise_Q a lower
  // bound. Only centroids whose lower bound beats the best upper bound are
  // evaluated exactly.
  const KlCentroidTerms q = CentroidTerms(centroids, d);
  ColumnBases bases;
  StackColumnBases(q, cols, &bases);
  // Phase 1. With a cache every computed pair is kept (its exact value is
  // stored for later rounds), so nothing is pruned.
  DENDRO_ASSIGN_OR_RETURN(
      std::vector<std::vector<KlCandidate>> cands,
      BoundCandidates(classes, q, cols, bases, /*keep_all=*/cache != nullptr, threads, ctx));
  // Phase 2: 2 KL = base - F / noise_q with F = sum_{l,m} omega_l e_m (u_l . v_m)^2
  // for every surviving (class, centroid) pair. Two exact ways to get F:
  //  * basis products: per centroid, GEMMs of its basis against the bases of
  //    its candidate classes (q r d multiply-adds per pair);
  //  * Gram products: F = <A_Q, C_P>_F with A_Q = U^T diag(omega) U and
  //    C_P = V^T diag(e) V, both d x d and symmetric, so all K x S values
  //    are one GEMM over packed upper triangles (d (d + 1) / 2 per pair, plus
  //    q d^2 / 2 per class to form C_P). Both ways multiply in single
  //    precision and sum F in double (GramCrossTerms has the details).
  int64_t pairs = 0;
  int32_t max_rank = 0, max_centroid_rank = 0;
  for (const auto& c : cands) pairs += static_cast<int64_t>(c.size());
  for (const GaussianRef& p : classes) max_rank = std::max(max_rank, p.rank());
  for (int32_t j : cols) max_centroid_rank = std::max(max_centroid_rank, q.rank[j]);
  const int64_t packed = d * (d + 1) / 2;
  const double basis_ops = static_cast<double>(pairs) * max_rank * max_centroid_rank * d;
  const double gram_ops = static_cast<double>(k) * (static_cast<double>(max_rank) * d * d / 2 +
                                                    static_cast<double>(nc) * packed) +
                          static_cast<double>(nc) * max_centroid_rank * d * d / 2;
  // The packed centroid matrices are held at once: cap them at 512 MB.
  const bool gram_fits = static_cast<double>(nc) * packed * sizeof(double) <= 512.0 * (1 << 20);
  const bool use_gram = cross == KlCrossTerm::kGramProducts ||
                        (cross == KlCrossTerm::kAuto && gram_fits && gram_ops < basis_ops);
  if (use_gram && pairs > 0) {
    // Column t of F is centroid cols[t].
    std::vector<int32_t> pos(s, -1);
    for (int32_t t = 0; t < nc; ++t) pos[cols[t]] = t;
    DENDRO_ASSIGN_OR_RETURN(
        RowMatrixDX f, GramCrossTerms(classes, *bases.u, *bases.omega, bases.off, threads, ctx));
    for (int64_t i = 0; i < k; ++i) {
      for (KlCandidate& c : cands[i]) c.kl = 0.5 * (c.base - f(i, pos[c.j]) / q.noise_q[c.j]);
    }
  } else {
    DENDRO_RETURN_IF_ERROR(KlByBasisProducts(classes, centroids, q, max_rank, max_centroid_rank,
                                             cands, threads, ctx));
  }
  // Phase 3.
  return BestCentroids(cands, cols, s, cache, kl);
}

absl::StatusOr<std::vector<Centroid>> GroupCentroids(absl::Span<const GaussianRef> classes,
                                                     absl::Span<const int32_t> assignment,
                                                     int32_t s, int32_t r, int threads,
                                                     RunContext* ctx) {
  const auto groups = Groups(assignment, s);
  std::vector<Centroid> out(s);
  std::vector<absl::Status> errors(s);
  // Big groups first.
  std::vector<int32_t> order(s);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return groups[a].size() > groups[b].size();
  });
  DENDRO_RETURN_IF_ERROR(ParallelFor(s, threads, ctx, [&](int64_t item) {
    const int32_t j = order[item];
    if (groups[j].empty()) {
      errors[j] = absl::InternalError(absl::StrCat("super-class ", j, " is empty"));
      return;
    }
    std::vector<GaussianRef> members;
    members.reserve(groups[j].size());
    for (int32_t c : groups[j]) members.push_back(classes[c]);
    auto c = TheoremTwoCentroid(members, r);
    if (!c.ok()) {
      errors[j] = c.status();
      return;
    }
    out[j] = *std::move(c);
  }));
  for (const absl::Status& e : errors) DENDRO_RETURN_IF_ERROR(e);
  return out;
}

std::vector<GaussianRef> TopDirections(absl::Span<const GaussianRef> classes, int32_t rank) {
  std::vector<GaussianRef> out;
  out.reserve(classes.size());
  for (const GaussianRef& g : classes) {
    const int32_t kept = rank > 0 ? std::min(rank, g.rank()) : g.rank();
    double dropped = 0.0;
    for (int32_t j = kept; j < g.rank(); ++j) dropped += g.excess[j];
    out.emplace_back(g.mean.data(), g.basis.data(), g.excess.data(), g.dim(), kept,
                     g.noise + dropped / static_cast<double>(g.dim()));
  }
  return out;
}

namespace {

// `seeding`: the classes as the k-means++ seeding sees them (TopDirections).
absl::StatusOr<KMeansResult> GaussianKMeansOnce(absl::Span<const GaussianRef> classes,
                                                absl::Span<const GaussianRef> seeding,
                                                int32_t s, int32_t r, int32_t max_iterations,
                                                uint64_t seed, int threads, Progress progress) {
  const int32_t k = static_cast<int32_t>(classes.size());
  RunContext* ctx = &progress.ctx();
  KMeansResult res;
  progress.Report(0.0);
  const auto t0 = std::chrono::steady_clock::now();
  DENDRO_ASSIGN_OR_RETURN(std::vector<int32_t> seeds,
                          BhattacharyyaSeeds(seeding, s, seed, threads, ctx));
  res.seed_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  progress.Report(0.15);
  // Initial centroids: the seed classes themselves.
  res.centroids.resize(s);
  for (int32_t j = 0; j < s; ++j) {
    if (j % 64 == 63 && ctx->Cancelled()) return absl::CancelledError("job cancelled");
    DENDRO_ASSIGN_OR_RETURN(res.centroids[j], TheoremTwoCentroid({classes[seeds[j]]}, r));
  }
  std::vector<int32_t> prev;
  // Exact divergences to the centroids that did not change since the round
  // that computed them (a centroid is a function of its member set).
  KlCache cache;
  // The members' moments of each centroid (CentroidMoments about the mean of
  // all class means), when the S d x d sums fit in kMomentsBytes; otherwise
  // a changed centroid is recomputed from all its members.
  constexpr double kMomentsBytes = 1024.0 * (1 << 20);
  const int64_t d = classes[0].dim();
  const bool use_moments =
      static_cast<double>(s) * static_cast<double>(d) * static_cast<double>(d) * sizeof(double) <=
      kMomentsBytes;
  Eigen::VectorXd origin = Eigen::VectorXd::Zero(d);
  for (const GaussianRef& g : classes) origin += g.mean;
  origin /= static_cast<double>(k);
  std::vector<std::optional<CentroidMoments>> moments(use_moments ? s : 0);
  for (int32_t it = 0; it < max_iterations; ++it) {
    // Every round polls inside its ParallelFor calls too; this covers the
    // sequential parts between them.
    if (ctx->Cancelled()) return absl::CancelledError("job cancelled");
    std::vector<LowRankGaussian> g(s);
    for (int32_t j = 0; j < s; ++j) g[j] = CentroidGaussian(res.centroids[j]);
    std::vector<double> kl;
    DENDRO_ASSIGN_OR_RETURN(std::vector<int32_t> assign,
                            AssignByKl(classes, g, threads, ctx, &kl, KlCrossTerm::kAuto, &cache));
    ++res.iterations;
    // Re-seed empty super-classes with the class farthest from its centroid
    // (taken from a super-class that keeps at least one other class).
    std::vector<int32_t> size(s, 0);
    for (int32_t a : assign) ++size[a];
    for (int32_t j = 0; j < s; ++j) {
      if (size[j] > 0) continue;
      int32_t far = -1;
      for (int32_t i = 0; i < k; ++i) {
        if (size[assign[i]] < 2) continue;
        if (far < 0 || kl[i] > kl[far]) far = i;
      }
      if (far < 0) break;  // cannot happen while s <= k
      --size[assign[far]];
      assign[far] = j;
      kl[far] = 0.0;
      size[j] = 1;
      ++res.reseeded;
    }
    const bool changed = assign != prev;
    if (!changed) {
      res.converged = true;
      res.assignment = std::move(assign);
      break;
    }
    // Recompute only the centroids whose member set changed: from their
    // moments updated by the classes that joined and left (when that is
    // fewer classes than the members), or from all members.
    std::vector<char> dirty(s, prev.empty() ? 1 : 0);
    std::vector<std::vector<GaussianRef>> joined(s), left(s);
    if (!prev.empty()) {
      for (int32_t i = 0; i < k; ++i) {
        if (assign[i] == prev[i]) continue;
        dirty[assign[i]] = dirty[prev[i]] = 1;
        joined[assign[i]].push_back(classes[i]);
        left[prev[i]].push_back(classes[i]);
      }
    }
    const auto groups = Groups(assign, s);
    std::vector<int32_t> todo;
    for (int32_t j = 0; j < s; ++j) {
      if (dirty[j]) todo.push_back(j);
    }
    std::vector<absl::Status> errors(todo.size());
    DENDRO_RETURN_IF_ERROR(ParallelFor(static_cast<int64_t>(todo.size()), threads, ctx,
                                       [&](int64_t t) {
      const int32_t j = todo[t];
      std::vector<GaussianRef> members;
      const size_t changes = joined[j].size() + left[j].size();
      const bool rebuild = !use_moments || !moments[j].has_value() || changes >= groups[j].size();
      if (rebuild) {
        for (int32_t c : groups[j]) members.push_back(classes[c]);
      }
      if (use_moments && rebuild) {
        moments[j].emplace(origin);
        moments[j]->Add(members);
      } else if (use_moments) {
        moments[j]->Remove(left[j]);
        moments[j]->Add(joined[j]);
      }
      absl::StatusOr<Centroid> c =
          use_moments ? moments[j]->ToCentroid(r) : TheoremTwoCentroid(members, r);
      if (c.ok()) {
        res.centroids[j] = *std::move(c);
      } else {
        errors[t] = c.status();
      }
    }));
    for (const absl::Status& e : errors) DENDRO_RETURN_IF_ERROR(e);
    for (int32_t j : todo) cache.valid[j] = 0;
    prev = std::move(assign);
    res.assignment = prev;
    progress.Report(0.15 + 0.85 * static_cast<double>(it + 1) / max_iterations);
  }
  // The k-means objective for the final centroids: sum_i KL(class_i || centroid).
  std::vector<LowRankGaussian> g(s);
  for (int32_t j = 0; j < s; ++j) g[j] = CentroidGaussian(res.centroids[j]);
  std::vector<double> kl(k);
  DENDRO_RETURN_IF_ERROR(ParallelFor(k, threads, ctx, [&](int64_t i) {
    kl[i] = KlDivergence(classes[i], g[res.assignment[i]].ref());
  }));
  res.objective = 0.0;
  for (double v : kl) res.objective += v;
  progress.Report(1.0);
  return res;
}

}  // namespace

absl::StatusOr<KMeansResult> GaussianKMeans(absl::Span<const GaussianRef> classes, int32_t s,
                                            int32_t r, int32_t max_iterations, int32_t restarts,
                                            int32_t seeding_rank, uint64_t seed, int threads,
                                            Progress progress) {
  const std::vector<GaussianRef> seeding = TopDirections(classes, seeding_rank);
  KMeansResult best;
  const int32_t runs = std::max(restarts, 1);
  for (int32_t run = 0; run < runs; ++run) {
    if (progress.ctx().Cancelled()) return absl::CancelledError("job cancelled");
    const uint64_t run_seed = seed + 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(run);
    DENDRO_ASSIGN_OR_RETURN(
        KMeansResult res,
        GaussianKMeansOnce(classes, seeding, s, r, max_iterations, run_seed, threads,
                           progress.Sub(static_cast<double>(run) / runs,
                                        static_cast<double>(run + 1) / runs, "super-classes")));
    if (run == 0 || res.objective < best.objective) best = std::move(res);
  }
  return best;
}

absl::StatusOr<KMeansResult> RawDataKMeans(absl::Span<const GaussianRef> classes,
                                           const RowMatrixF& samples,
                                           absl::Span<const int32_t> sample_class, int32_t s,
                                           int32_t r, int32_t max_iterations, uint64_t seed,
                                           int threads, Progress progress) {
  const int64_t m = samples.rows(), d = samples.cols();
  const int32_t k = static_cast<int32_t>(classes.size());
  RunContext* ctx = &progress.ctx();
  if (m < s) {
    return absl::InvalidArgumentError(
        absl::StrCat("raw-data clustering: ", m, " samples cannot form ", s, " clusters"));
  }
  progress.Report(0.0);
  // Greedy k-means++ (squared Euclidean) seeding, 2 + ln(S) candidates per step.
  std::mt19937_64 rng(seed);
  const int32_t trials = 2 + static_cast<int32_t>(std::log(static_cast<double>(s)));
  RowMatrixF centers(s, d);
  std::vector<double> mind(m, std::numeric_limits<double>::infinity()), trial(m), best_mind(m);
  auto update = [&](int64_t c, std::vector<double>* out) -> absl::Status {
    const Eigen::VectorXf x = samples.row(c).transpose();
    return ParallelFor((m + 4095) / 4096, threads, ctx, [&](int64_t b) {
      for (int64_t i = b * 4096; i < std::min(m, (b + 1) * 4096); ++i) {
        const double dist = (samples.row(i).transpose() - x).cast<double>().squaredNorm();
        (*out)[i] = std::min(mind[i], dist);
      }
    });
  };
  int64_t pick = std::uniform_int_distribution<int64_t>(0, m - 1)(rng);
  DENDRO_RETURN_IF_ERROR(update(pick, &trial));
  mind.swap(trial);
  centers.row(0) = samples.row(pick);
  for (int32_t j = 1; j < s; ++j) {
    if (ctx->Cancelled()) return absl::CancelledError("job cancelled");
    double total = 0.0;
    for (double v : mind) total += v;
    std::vector<int64_t> cands;
    for (int32_t t = 0; t < trials && total > 0.0; ++t) cands.push_back(SampleProportional(mind, rng));
    if (cands.empty()) cands.push_back(std::uniform_int_distribution<int64_t>(0, m - 1)(rng));
    double best_pot = std::numeric_limits<double>::infinity();
    for (int64_t c : cands) {
      DENDRO_RETURN_IF_ERROR(update(c, &trial));
      double pot = 0.0;
      for (double v : trial) pot += v;
      if (pot < best_pot) {
        best_pot = pot;
        pick = c;
        best_mind.swap(trial);
      }
    }
    mind.swap(best_mind);
    centers.row(j) = samples.row(pick);
  }
  progress.Report(0.2);
  // Lloyd iterations, distances through one GEMM per block.
  std::vector<int32_t> assign(m, -1);
  KMeansResult res;
  for (int32_t it = 0; it < max_iterations; ++it) {
    if (ctx->Cancelled()) return absl::CancelledError("job cancelled");
    const Eigen::VectorXf cn = centers.rowwise().squaredNorm();
    std::atomic<int64_t> moved{0};
    DENDRO_RETURN_IF_ERROR(ParallelFor((m + 1023) / 1024, threads, ctx, [&](int64_t b) {
      const int64_t i0 = b * 1024, i1 = std::min(m, i0 + 1024);
      const RowMatrixF dots = samples.middleRows(i0, i1 - i0) * centers.transpose();
      int64_t local = 0;
      for (int64_t i = i0; i < i1; ++i) {
        int32_t bj = 0;
        float bv = std::numeric_limits<float>::infinity();
        for (int32_t j = 0; j < s; ++j) {
          const float v = cn[j] - 2.0f * dots(i - i0, j);
          if (v < bv) {
            bv = v;
            bj = j;
          }
        }
        if (assign[i] != bj) ++local;
        assign[i] = bj;
      }
      moved.fetch_add(local);
    }));
    ++res.iterations;
    if (moved.load() == 0) {
      res.converged = true;
      break;
    }
    RowMatrixDX sum = RowMatrixDX::Zero(s, d);
    std::vector<int64_t> cnt(s, 0);
    for (int64_t i = 0; i < m; ++i) {
      sum.row(assign[i]) += samples.row(i).cast<double>();
      ++cnt[assign[i]];
    }
    for (int32_t j = 0; j < s; ++j) {
      if (cnt[j] > 0) centers.row(j) = (sum.row(j) / static_cast<double>(cnt[j])).cast<float>();
    }
    progress.Report(0.2 + 0.6 * static_cast<double>(it + 1) / max_iterations);
  }
  // Each class to the cluster holding most of its samples (ties: lower id).
  std::vector<std::vector<int32_t>> votes(k, std::vector<int32_t>(s, 0));
  for (int64_t i = 0; i < m; ++i) ++votes[sample_class[i]][assign[i]];
  std::vector<int32_t> cluster_of(k);
  for (int32_t c = 0; c < k; ++c) {
    cluster_of[c] = static_cast<int32_t>(
        std::max_element(votes[c].begin(), votes[c].end()) - votes[c].begin());
  }
  // Drop clusters no class chose; renumber by first appearance order of id.
  std::vector<int32_t> renum(s, -1);
  int32_t used = 0;
  for (int32_t j = 0; j < s; ++j) {
    if (std::find(cluster_of.begin(), cluster_of.end(), j) != cluster_of.end()) renum[j] = used++;
  }
  res.dropped = s - used;
  res.assignment.resize(k);
  for (int32_t c = 0; c < k; ++c) res.assignment[c] = renum[cluster_of[c]];
  DENDRO_ASSIGN_OR_RETURN(res.centroids,
                          GroupCentroids(classes, res.assignment, used, r, threads, ctx));
  progress.Report(1.0);
  return res;
}

}  // namespace dendro::hppca_internal
