// Batched PPCA scoring and hierarchical prediction (paper Algorithm 1).
//
// For a block of rows X (centred on the model's centre c) and a run of
// consecutive models m (bases B_m, k x d), one GEMM gives P = X [B_m]^T and
// another G = X [mu_m - c]^T; then for every (row, model)
//   score = (|x|^2 - 2 G + |mu_m|^2 - sum_j w_j (P_j - B_mj . mu_m)^2) / lambda
//           (+ log|Sigma_m| for the eq. 1 score),
// which is eq. 7 with (x - mu) expanded. The hierarchical path does this per
// opened super-class over just the rows that opened it, so its cost is
// S r d + (classes opened) q d multiply-adds per row against K q d for flat.
// Calls of a few rows take another path, screened in binary16 (below,
// "A few rows").
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/common/cpus.h"
#include "core/common/status_macros.h"
#include "core/hppca/half.h"
#include "core/hppca/hppca.h"
#include "core/hppca/internal.h"

namespace dendro {
namespace {

using hppca_internal::Gamma;
using hppca_internal::HalfGemvRows;
using hppca_internal::ScorerBank;

// Classes scored per GEMM (bounds the P buffer at rows x kChunk*q floats).
constexpr int32_t kChunkModels = 64;
// Below this many multiply-adds a block is scored on one thread: waking a
// second thread costs more than it saves (and adds scheduling jitter to
// single-row latency).
constexpr double kParallelMinWork = 4e6;

struct Workspace {
  RowMatrixF p, g;
  std::vector<double> scores;
  RowMatrixF x;
  std::vector<double> xn2;
  // The screened path's scratch (k per model; one per candidate).
  Eigen::ArrayXf aa, dd;
  std::vector<double> upper;
};

// out (R x cnt, row-major) = scores of the R centred rows `x` against models
// [m0, m0 + cnt) of the bank.
void ScoreBlock(const ScorerBank& b, const RowMatrixF& x, const double* xn2, int32_t m0,
                int32_t cnt, double* out, Workspace& ws) {
  const int64_t rows = x.rows(), d = b.d;
  const int32_t k = b.k;
  Eigen::Map<const RowMatrixF> means(b.means.data() + static_cast<int64_t>(m0) * d, cnt, d);
  ws.g.resize(rows, cnt);
  ws.g.noalias() = x * means.transpose();
  if (k > 0) {
    Eigen::Map<const RowMatrixF> v(b.bases + static_cast<int64_t>(m0) * k * d,
                                   static_cast<int64_t>(cnt) * k, d);
    ws.p.resize(rows, static_cast<int64_t>(cnt) * k);
    ws.p.noalias() = x * v.transpose();
  }
  using Span = Eigen::Map<const Eigen::ArrayXf>;
  for (int64_t i = 0; i < rows; ++i) {
    const float* prow = k > 0 ? ws.p.row(i).data() : nullptr;
    for (int32_t c = 0; c < cnt; ++c) {
      const int32_t m = m0 + c;
      float acc = 0.0f;
      if (k > 0) {
        // sum_j w_j (P_j - B_j . mu)^2, vectorised (Eigen's reduction).
        const Span pr(prow + static_cast<int64_t>(c) * k, k);
        const Span w(b.weights.row(m).data(), k), cp(b.proj.row(m).data(), k);
        acc = (w * (pr - cp).square()).sum();
      }
      const double dist2 = xn2[i] - 2.0 * static_cast<double>(ws.g(i, c)) + b.mean_norm2[m];
      out[i * cnt + c] = (dist2 - static_cast<double>(acc)) * b.inv_lambda + b.offset[m];
    }
  }
}

struct Cand {
  double score;
  int32_t id;
};

// What scoring one block of rows needs (one per thread that scores blocks).
struct BlockScratch {
  Workspace main_ws;
  std::vector<Workspace> ws;           // per inner thread
  std::vector<std::vector<Cand>> tmp;  // per inner thread
  std::vector<Cand> cand;
  std::vector<int32_t> cand_n;
  std::vector<double> sup;
  std::vector<int32_t> opened;
};
inline bool Better(const Cand& a, const Cand& b) {
  return a.score < b.score || (a.score == b.score && a.id < b.id);
}

// A list of at most k best candidates, sorted best first.
class TopK {
 public:
  TopK(Cand* slots, int32_t* size, int32_t k) : c_(slots), n_(size), k_(k) {}
  void Offer(double score, int32_t id) {
    const Cand x{score, id};
    if (*n_ == k_ && !Better(x, c_[k_ - 1])) return;
    int32_t pos = *n_ < k_ ? (*n_)++ : k_ - 1;
    while (pos > 0 && Better(x, c_[pos - 1])) {
      c_[pos] = c_[pos - 1];
      --pos;
    }
    c_[pos] = x;
  }
  // Many candidates at once (partial sort for large k).
  void OfferAll(const double* scores, const int32_t* ids, int32_t cnt, std::vector<Cand>& tmp) {
    if (k_ <= 16) {
      for (int32_t c = 0; c < cnt; ++c) Offer(scores[c], ids[c]);
      return;
    }
    tmp.assign(c_, c_ + *n_);
    for (int32_t c = 0; c < cnt; ++c) tmp.push_back({scores[c], ids[c]});
    const int32_t m = std::min<int32_t>(k_, static_cast<int32_t>(tmp.size()));
    std::partial_sort(tmp.begin(), tmp.begin() + m, tmp.end(), Better);
    std::copy(tmp.begin(), tmp.begin() + m, c_);
    *n_ = m;
  }

 private:
  Cand* c_;
  int32_t* n_;
  int32_t k_;
};

// Centres rows [r0, r0 + n) of `rows` into ws.x / ws.xn2.
void CenterRows(const MatrixView& rows, int64_t r0, int64_t n, const Eigen::VectorXf& center,
                Workspace& ws) {
  ws.x.resize(n, rows.cols());
  ws.xn2.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    ws.x.row(i) = rows.row(r0 + i) - center.transpose();
    ws.xn2[i] = ws.x.row(i).cast<double>().squaredNorm();
  }
}

// A score as float32, saturated at the largest finite float (scores are
// finite doubles for rows within kHppcaMaxAbsValue, but may exceed the float
// range for extreme models).
float SaturateToFloat(double score) {
  constexpr double kMax = std::numeric_limits<float>::max();
  return static_cast<float>(std::clamp(score, -kMax, kMax));
}

// Row `row`'s answer: the first `have` of `best` (sorted best first), then
// empty slots (class -1, NaN score) up to kk.
void WriteAnswer(const std::vector<Cand>& best, int32_t have, int64_t row, int32_t kk,
                 const std::vector<int64_t>& labels, HppcaPrediction& out) {
  for (int32_t a = 0; a < kk; ++a) {
    const int64_t o = row * kk + a;
    const int32_t c = a < have ? best[a].id : -1;
    out.classes[o] = c;
    out.labels[o] = c >= 0 ? labels[c] : 0;
    out.scores[o] =
        c >= 0 ? SaturateToFloat(best[a].score) : std::numeric_limits<float>::quiet_NaN();
  }
}

// Super-classes each row opens: `asked` (clamped to S), raised where needed
// until any T super-classes hold at least `top_k` classes, so every row has
// top_k classes scored and no answer slot is ever empty.
int32_t OpenedSuperclasses(const std::vector<std::vector<int32_t>>& members, int32_t asked,
                           int32_t top_k) {
  const int32_t s = static_cast<int32_t>(members.size());
  int32_t t = std::min(asked, s);
  size_t smallest = std::numeric_limits<size_t>::max();
  for (const auto& m : members) smallest = std::min(smallest, m.size());
  if (s == 0 || static_cast<int64_t>(smallest) * t >= top_k) return t;
  std::vector<size_t> sizes(s);
  for (int32_t j = 0; j < s; ++j) sizes[j] = members[j].size();
  std::sort(sizes.begin(), sizes.end());
  int64_t covered = 0;
  for (int32_t j = 0; j < t; ++j) covered += static_cast<int64_t>(sizes[j]);
  while (t < s && covered < top_k) covered += static_cast<int64_t>(sizes[t++]);
  return t;
}

// --- A few rows: screening in binary16, float32 for the contenders ---------
//
// A single row's time is the bases it streams (half.h). Screen() scores a
// centred row against models [m0, m0 + cnt) of a bank from the bank's
// binary16 bases, each score with a bound on its distance from the float32
// score ScoreBlock gives that model; SelectBest() rescores in float32 only
// the models whose lower bound can still reach the best n, and ranks those
// by their float32 scores. The models picked and their scores are those of
// float32 scoring (the bound covers float32's own rounding, so where two
// models tie within it both are rescored and ranked as ScoreBlock ranks
// them).
//
// The bound, for one model with components j (weights w_j, c_j = basis_j .
// mean, a_j = P_j - c_j, |x| the row's norm, u = 2^-24, Gamma as half.h):
//  - |P~_j - P_j| <= |x| s_j, s_j = ScorerBank::half_slack: the two products
//    differ by x . (b~_j - b_j), and each is within Gamma(d) |x| |b| of exact;
//  - a_j's own rounding: d_j = |x| s_j (1 + u) + 2 u |a~_j|;
//  - sum_j w_j a_j^2 moves by at most sum_j w_j (2 |a~_j| d_j + d_j^2), and
//    float32 evaluates it (on either side) within Gamma(k + 2) sum_j w_j
//    (|a~_j| + d_j)^2;
//  - x . mean is within 2 Gamma(d) |x| |mean| of ScoreBlock's, twice in
//    |x - mean|^2.
// The sum, over lambda, is widened by 1% (the bound's own float32 sums) and
// by 1e-12 of the terms' magnitude (the double arithmetic both paths share).
struct Screened {
  double score;  // from the binary16 bases
  double bound;  // |score - float32 score| <= bound
  int32_t model;
};

// Appends the screened scores of a centred row against models [m0, m0 + cnt)
// of a bank, from its products with their binary16 bases (p, cnt * k) and
// with their means (g, cnt).
void ScreenScores(const ScorerBank& b, double xn2, const float* p, const float* g, int32_t m0,
                  int32_t cnt, std::vector<Screened>& out, Workspace& ws) {
  const int32_t k = b.k;
  const float xnorm = static_cast<float>(std::sqrt(xn2));
  const double gamma_d = Gamma(b.d), gamma_k = Gamma(k + 2);
  constexpr float u = 0x1p-24f;
  using Span = Eigen::Map<const Eigen::ArrayXf>;
  for (int32_t c = 0; c < cnt; ++c) {
    const int32_t m = m0 + c;
    const Span pc(p + static_cast<int64_t>(c) * k, k);
    const Span cp(b.proj.row(m).data(), k), w(b.weights.row(m).data(), k);
    const Span slack(b.half_slack.row(m).data(), k);
    Eigen::ArrayXf& aa = ws.aa;
    Eigen::ArrayXf& dd = ws.dd;
    aa = (pc - cp).abs();
    dd = xnorm * (1.0f + u) * slack + 2.0f * u * aa;
    const double acc = (w * aa.square()).sum();
    const double moved = (w * (2.0f * aa * dd + dd.square())).sum();
    const double spread = (w * (aa + dd).square()).sum();
    const double gc = g[c];
    const double dist2 = xn2 - 2.0 * gc + b.mean_norm2[m];
    const double score = (dist2 - acc) * b.inv_lambda + b.offset[m];
    const double mean_term = 4.0 * gamma_d * xnorm * b.mean_norm[m];
    double bound = (mean_term + moved + 2.0 * gamma_k * spread) * b.inv_lambda;
    bound =
        bound * 1.01 + 1e-12 * ((xn2 + 2.0 * std::abs(gc) + b.mean_norm2[m] + acc) * b.inv_lambda +
                                std::abs(b.offset[m]));
    out.push_back({score, bound, m});
  }
}

// ScreenScores for one centred row (1 x d), products included.
void Screen(const ScorerBank& b, const RowMatrixF& x, double xn2, int32_t m0, int32_t cnt,
            std::vector<Screened>& out, Workspace& ws) {
  const int64_t d = b.d;
  ws.p.resize(1, static_cast<int64_t>(cnt) * b.k);
  HalfGemvRows(b.bases_half.data() + static_cast<int64_t>(m0) * b.k * d,
               static_cast<int64_t>(cnt) * b.k, d, x.data(), 1, d, ws.p.data(), 0);
  Eigen::Map<const RowMatrixF> means(b.means.data() + static_cast<int64_t>(m0) * d, cnt, d);
  ws.g.resize(cnt, 1);
  ws.g.noalias() = means * x.row(0).transpose();
  ScreenScores(b, xn2, ws.p.data(), ws.g.data(), m0, cnt, out, ws);
}

// The best n of `cands` by float32 score (ties by id), best first, rescoring
// only the contenders (see above). `id(model)` is the id an answer reports.
template <typename Id>
void SelectBest(const ScorerBank& b, const RowMatrixF& x, double xn2, std::vector<Screened>& cands,
                int32_t n, const Id& id, std::vector<Cand>& best, Workspace& ws) {
  best.clear();
  n = std::min<int32_t>(n, static_cast<int32_t>(cands.size()));
  if (n <= 0) return;
  // tau: the n-th smallest upper bound; at least n models score <= tau.
  std::vector<double>& upper = ws.upper;
  upper.resize(cands.size());
  for (size_t i = 0; i < cands.size(); ++i) upper[i] = cands[i].score + cands[i].bound;
  std::nth_element(upper.begin(), upper.begin() + (n - 1), upper.end());
  const double tau = upper[n - 1];
  for (const Screened& c : cands) {
    if (!(c.score - c.bound <= tau)) continue;
    double exact = 0;
    ScoreBlock(b, x, &xn2, c.model, 1, &exact, ws);
    best.push_back({exact, id(c.model)});
  }
  const int32_t have = std::min<int32_t>(n, static_cast<int32_t>(best.size()));
  std::partial_sort(best.begin(), best.begin() + have, best.end(), Better);
  best.resize(have);
}

// What the screened path reads of a model (HppcaModel::Impl).
struct ScreenedModel {
  const ScorerBank& super_bank;
  const ScorerBank& class_bank;  // slot order
  const std::vector<int32_t>& slot_begin;
  const std::vector<int32_t>& slot_class;
  const std::vector<int64_t>& labels;
  const Eigen::VectorXf& center;
};

// Rows whose level-1 products are computed together (HalfGemvRows reads
// each super-class basis once for all of them).
constexpr int64_t kScreenChunkRows = 8;

// Predict() for a few rows, each screened (see above): the T best
// super-classes, then the kk best classes among theirs. `out` is sized.
void PredictScreened(const ScreenedModel& m, const MatrixView& rows, int32_t t, int32_t kk,
                     int threads, HppcaPrediction& out) {
  const int64_t n = rows.rows();
  const ScorerBank& sup = m.super_bank;
  const int64_t d = sup.d, sup_cols = static_cast<int64_t>(sup.n) * sup.k;
  const double work = static_cast<double>(n) * d *
                      (sup.n * (sup.k + 1.0) +
                       static_cast<double>(t) * m.class_bank.n / sup.n * (m.class_bank.k + 1.0));
  const int64_t chunks = (n + kScreenChunkRows - 1) / kScreenChunkRows;
  const int use = chunks > 1 && work >= kParallelMinWork
                      ? static_cast<int>(std::min<int64_t>(threads, chunks))
                      : 1;
  const Eigen::Map<const RowMatrixF> sup_means(sup.means.data(), sup.n, d);
#pragma omp parallel num_threads(use)
  {
    Workspace ws, one;
    RowMatrixF p1, g1;  // the chunk's level-1 products: bases, means
    std::vector<Screened> cands;
    std::vector<Cand> best;
#pragma omp for schedule(dynamic, 1)
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const int64_t r0 = ch * kScreenChunkRows, nb = std::min(kScreenChunkRows, n - r0);
      CenterRows(rows, r0, nb, m.center, ws);
      // Level 1 for the whole chunk: each super-class basis read once.
      p1.resize(nb, sup_cols);
      HalfGemvRows(sup.bases_half.data(), sup_cols, d, ws.x.data(), nb, d, p1.data(), sup_cols);
      g1.noalias() = ws.x * sup_means.transpose();
      for (int64_t q = 0; q < nb; ++q) {
        const int64_t i = r0 + q;
        one.x = ws.x.row(q);
        const double xn2 = ws.xn2[q];
        cands.clear();
        ScreenScores(sup, xn2, p1.row(q).data(), g1.row(q).data(), 0, sup.n, cands, one);
        SelectBest(
            sup, one.x, xn2, cands, t, [](int32_t j) { return j; }, best, one);
        cands.clear();
        int32_t evaluated = 0;
        for (int32_t a = 0; a < t; ++a) {
          const int32_t j = best[a].id;
          const int32_t s0 = m.slot_begin[j], s1 = m.slot_begin[j + 1];
          out.superclasses[i * t + a] = j;
          evaluated += s1 - s0;
          Screen(m.class_bank, one.x, xn2, s0, s1 - s0, cands, one);
        }
        out.classes_evaluated[i] = evaluated;
        SelectBest(
            m.class_bank, one.x, xn2, cands, kk, [&](int32_t slot) { return m.slot_class[slot]; },
            best, one);
        WriteAnswer(best, static_cast<int32_t>(best.size()), i, kk, m.labels, out);
      }
    }
  }
}

absl::Status CheckRows(const MatrixView& rows, int64_t d) {
  if (rows.cols() != d) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows have ", rows.cols(), " columns; the model expects ", d));
  }
  return ValidateMagnitude(rows, kHppcaMaxAbsValue);
}

}  // namespace

absl::StatusOr<HppcaPrediction> HppcaModel::Predict(const MatrixView& rows,
                                                    const HppcaPredictOptions& opt) const {
  const Impl& m = *impl_;
  DENDRO_RETURN_IF_ERROR(CheckRows(rows, dim()));
  if (opt.top_k < 1) {
    return absl::InvalidArgumentError(absl::StrCat("top_k = ", opt.top_k, " must be >= 1"));
  }
  if (opt.top_t < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_t = ", opt.top_t, " must be >= 0 (0: the model's default)"));
  }
  if (opt.block_rows < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_rows = ", opt.block_rows, " must be >= 0 (0: automatic)"));
  }
  const int32_t k_all = num_classes(), s_all = num_superclasses();
  const bool flat = opt.flat || s_all == 0 || (opt.top_t == 0 && m.default_flat);
  const int32_t kk = std::min(opt.top_k, k_all);
  const int32_t t = flat ? 0 : OpenedSuperclasses(m.members,
                                                  opt.top_t > 0 ? opt.top_t : m.options.default_top_t,
                                                  kk);
  const int threads = ThreadsOrDefault(opt.num_threads);
  const int64_t n = rows.rows();
  int64_t block = opt.block_rows;
  if (block == 0) {
    block = flat ? 1024 : std::clamp<int64_t>(int64_t{256} * s_all / std::max(t, 1), 512, 16384);
  }

  HppcaPrediction out;
  out.rows = n;
  out.top_k = kk;
  out.top_t = t;
  out.classes.resize(n * kk);
  out.labels.resize(n * kk);
  out.scores.resize(n * kk);
  out.superclasses.resize(n * t);
  out.classes_evaluated.resize(n);

  if (!flat && opt.screen_in_half && n <= kHppcaScreenMaxRows && screens_rows()) {
    const ScreenedModel sm{m.super_bank, m.class_bank,     m.slot_begin,
                           m.slot_class, m.classes.labels, m.center};
    PredictScreened(sm, rows, t, kk, threads, out);
    return out;
  }

  const int32_t flat_chunks = (k_all + kChunkModels - 1) / kChunkModels;
  // Candidate lists: per row, `lists` lists of kk.
  const int32_t lists = flat ? flat_chunks : t;
  const double row_work = static_cast<double>(dim()) * (m.classes.q + 1);
  // Rows are independent: with several blocks each thread scores whole
  // blocks (both levels, single-threaded inside); a single block is split
  // across the threads by models (flat) or opened super-classes instead.
  const int64_t blocks = (n + block - 1) / block;
  const int outer =
      blocks > 1 && blocks * block * static_cast<double>(k_all) * row_work >= kParallelMinWork
          ? static_cast<int>(std::min<int64_t>(threads, blocks))
          : 1;
  const int inner_threads = outer > 1 ? 1 : threads;
  std::vector<BlockScratch> scratch(outer);
  for (BlockScratch& sc : scratch) {
    sc.ws.resize(inner_threads);
    sc.tmp.resize(inner_threads);
  }

  const auto score_block = [&](int64_t r0, BlockScratch& sc) {
    const int64_t nb = std::min<int64_t>(block, n - r0);
    CenterRows(rows, r0, nb, m.center, sc.main_ws);
    sc.cand.resize(nb * lists * kk);
    sc.cand_n.assign(nb * lists, 0);
    if (flat) {
      const int use = nb * k_all * row_work < kParallelMinWork ? 1 : inner_threads;
#pragma omp parallel for schedule(dynamic, 1) num_threads(use)
      for (int32_t ch = 0; ch < flat_chunks; ++ch) {
        Workspace& w = sc.ws[omp_get_thread_num()];
        const int32_t m0 = ch * kChunkModels;
        const int32_t cnt = std::min(kChunkModels, k_all - m0);
        w.scores.resize(nb * cnt);
        ScoreBlock(m.class_bank, sc.main_ws.x, sc.main_ws.xn2.data(), m0, cnt, w.scores.data(), w);
        for (int64_t i = 0; i < nb; ++i) {
          TopK top(&sc.cand[(i * lists + ch) * kk], &sc.cand_n[i * lists + ch], kk);
          top.OfferAll(w.scores.data() + i * cnt, m.slot_class.data() + m0, cnt,
                       sc.tmp[omp_get_thread_num()]);
        }
      }
      for (int64_t i = 0; i < nb; ++i) out.classes_evaluated[r0 + i] = k_all;
    } else {
      // Level 1: every super-class for every row, then the T best per row.
      sc.sup.resize(nb * s_all);
      ScoreBlock(m.super_bank, sc.main_ws.x, sc.main_ws.xn2.data(), 0, s_all, sc.sup.data(),
                 sc.main_ws);
      sc.opened.resize(nb * t);
      std::vector<std::vector<std::pair<int32_t, int32_t>>> rows_of(s_all);  // (row, slot t)
      {
        std::vector<Cand> order(s_all);
        for (int64_t i = 0; i < nb; ++i) {
          for (int32_t j = 0; j < s_all; ++j) order[j] = {sc.sup[i * s_all + j], j};
          std::partial_sort(order.begin(), order.begin() + t, order.end(), Better);
          int32_t evaluated = 0;
          for (int32_t a = 0; a < t; ++a) {
            const int32_t j = order[a].id;
            sc.opened[i * t + a] = j;
            out.superclasses[(r0 + i) * t + a] = j;
            rows_of[j].push_back({static_cast<int32_t>(i), a});
            evaluated += static_cast<int32_t>(m.members[j].size());
          }
          out.classes_evaluated[r0 + i] = evaluated;
        }
      }
      // Level 2: per opened super-class, its classes over the rows that opened it.
      std::vector<int32_t> tasks;
      for (int32_t j = 0; j < s_all; ++j) {
        if (!rows_of[j].empty()) tasks.push_back(j);
      }
      std::stable_sort(tasks.begin(), tasks.end(), [&](int32_t a, int32_t b) {
        return rows_of[a].size() * m.members[a].size() > rows_of[b].size() * m.members[b].size();
      });
      double evaluated = 0;
      for (int64_t i = 0; i < nb; ++i) evaluated += out.classes_evaluated[r0 + i];
      const int use = evaluated * row_work < kParallelMinWork ? 1 : inner_threads;
#pragma omp parallel for schedule(dynamic, 1) num_threads(use)
      for (size_t ti = 0; ti < tasks.size(); ++ti) {
        Workspace& w = sc.ws[omp_get_thread_num()];
        const int32_t j = tasks[ti];
        const auto& who = rows_of[j];
        const int64_t rs = static_cast<int64_t>(who.size());
        RowMatrixF xs(rs, dim());
        std::vector<double> xn2(rs);
        for (int64_t a = 0; a < rs; ++a) {
          xs.row(a) = sc.main_ws.x.row(who[a].first);
          xn2[a] = sc.main_ws.xn2[who[a].first];
        }
        const int32_t s0 = m.slot_begin[j], s1 = m.slot_begin[j + 1];
        for (int32_t m0 = s0; m0 < s1; m0 += kChunkModels) {
          const int32_t cnt = std::min(kChunkModels, s1 - m0);
          w.scores.resize(rs * cnt);
          ScoreBlock(m.class_bank, xs, xn2.data(), m0, cnt, w.scores.data(), w);
          for (int64_t a = 0; a < rs; ++a) {
            const int64_t li = static_cast<int64_t>(who[a].first) * lists + who[a].second;
            TopK top(&sc.cand[li * kk], &sc.cand_n[li], kk);
            top.OfferAll(w.scores.data() + a * cnt, m.slot_class.data() + m0, cnt,
                         sc.tmp[omp_get_thread_num()]);
          }
        }
      }
    }
    // Merge each row's lists.
#pragma omp parallel for schedule(static) num_threads(nb* lists* kk < 65536 ? 1 : inner_threads)
    for (int64_t i = 0; i < nb; ++i) {
      std::vector<Cand> best;
      for (int32_t l = 0; l < lists; ++l) {
        const int64_t li = i * lists + l;
        best.insert(best.end(), sc.cand.begin() + li * kk,
                    sc.cand.begin() + li * kk + sc.cand_n[li]);
      }
      const int32_t have = std::min<int32_t>(kk, static_cast<int32_t>(best.size()));
      std::partial_sort(best.begin(), best.begin() + have, best.end(), Better);
      WriteAnswer(best, have, r0 + i, kk, m.classes.labels, out);
    }
  };
#pragma omp parallel for schedule(dynamic, 1) num_threads(outer)
  for (int64_t b = 0; b < blocks; ++b) score_block(b * block, scratch[omp_get_thread_num()]);
  return out;
}

absl::StatusOr<RowMatrixD> HppcaModel::ScoreClasses(const MatrixView& rows) const {
  const Impl& m = *impl_;
  DENDRO_RETURN_IF_ERROR(CheckRows(rows, dim()));
  const int32_t k_all = num_classes();
  RowMatrixD out(rows.rows(), k_all);
  Workspace main_ws;
  const int threads = ThreadsOrDefault(0);
  std::vector<Workspace> ws(threads);
  const int32_t chunks = (k_all + kChunkModels - 1) / kChunkModels;
  for (int64_t r0 = 0; r0 < rows.rows(); r0 += 512) {
    const int64_t nb = std::min<int64_t>(512, rows.rows() - r0);
    CenterRows(rows, r0, nb, m.center, main_ws);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int32_t ch = 0; ch < chunks; ++ch) {
      Workspace& w = ws[omp_get_thread_num()];
      const int32_t m0 = ch * kChunkModels, cnt = std::min(kChunkModels, k_all - m0);
      w.scores.resize(nb * cnt);
      ScoreBlock(m.class_bank, main_ws.x, main_ws.xn2.data(), m0, cnt, w.scores.data(), w);
      for (int64_t i = 0; i < nb; ++i) {
        for (int32_t c = 0; c < cnt; ++c) {
          out(r0 + i, m.slot_class[m0 + c]) = w.scores[i * cnt + c];
        }
      }
    }
  }
  return out;
}

absl::StatusOr<RowMatrixD> HppcaModel::ScoreSuperclasses(const MatrixView& rows) const {
  const Impl& m = *impl_;
  DENDRO_RETURN_IF_ERROR(CheckRows(rows, dim()));
  const int32_t s_all = num_superclasses();
  RowMatrixD out(rows.rows(), s_all);
  if (s_all == 0) return out;
  Workspace w;
  for (int64_t r0 = 0; r0 < rows.rows(); r0 += 512) {
    const int64_t nb = std::min<int64_t>(512, rows.rows() - r0);
    CenterRows(rows, r0, nb, m.center, w);
    std::vector<double> s(nb * s_all);
    ScoreBlock(m.super_bank, w.x, w.xn2.data(), 0, s_all, s.data(), w);
    for (int64_t i = 0; i < nb; ++i) {
      for (int32_t j = 0; j < s_all; ++j) out(r0 + i, j) = s[i * s_all + j];
    }
  }
  return out;
}

}  // namespace dendro
