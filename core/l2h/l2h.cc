// L2H in O(N K) time and O(N) extra memory.
//
// The reference (paper appendix A) recomputes a masked softmax over the
// points of the lowest-scoring group at every step. Here each point keeps a
// small state that is brought up to date only when its own group is the
// lowest-scoring one, which is the only time the algorithm looks at it:
//
//   best   h^m(x; G): the argmax over the columns outside x's group
//   shift  a logit value >= every column outside the group
//   rest   sum over columns outside the group, other than best, of
//          exp(x_c - shift)
//   ref    `rest` when it was last computed directly
//
// so g^m(x; G) = e / (e + rest) with e = exp(x_best - shift). When the group
// grows, the newly masked columns are subtracted from `rest`; `best` is
// rescanned only when it has been masked. A subtraction that cancels (rest
// falls below 1e-3 of ref, bounding the relative error by ~1e-12) or a best
// far below the shift triggers a direct recomputation with shift = x_best.
// All points of one cluster share their group history, so the columns that
// are new to a point are read off the group's cluster list (see Coverage).
//
// Every sum that feeds a comparison (cluster means, group scores, rp per
// cluster and the per-group mean of rp) is summed in the order numpy uses,
// so values that are exactly equal in the reference are exactly equal here
// as long as they come from identical arithmetic (see kernels.h). Results do
// not depend on the number of threads.
#include "core/l2h/l2h.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/common/cpus.h"
#include "core/common/status_macros.h"
#include "core/l2h/kernels.h"
#include "core/l2h/worker_pool.h"

namespace dendro {
namespace {

using l2h_internal::Exp;
using l2h_internal::MaskedArgmax;
using l2h_internal::MaskedExpSum;
using l2h_internal::NumpyMean;
using l2h_internal::NumpySum;

constexpr double kCancelRatio = 1e-3;    // recompute `rest` below this fraction of ref
constexpr double kMaxShiftDrift = 64.0;  // recompute when x_best < shift - this
constexpr int64_t kWorkPerBlock = int64_t{1} << 18;  // logit values per chunk
// Below these a loop runs on the calling thread: on a busy machine every
// fork/join of a parallel region can cost a scheduler time slice.
constexpr int64_t kMinParallelWork = int64_t{1} << 21;  // logit values
constexpr int64_t kMinParallelPoints = 256;  // points of a lowest group
constexpr int64_t kMinChunkPoints = 32;
constexpr int64_t kPrefetchDistance = 6;       // points ahead
constexpr int32_t kMaxPrefetchColumns = 64;
constexpr int kBatch = 16;                     // points per batch of updates
constexpr int64_t kMinBatchCapacity = 1024;    // doubles
constexpr double kFirstPassShare = 0.5;  // progress fraction of the first pass
constexpr float kMasked = -std::numeric_limits<float>::infinity();
constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

// Runs body(begin, end, thread) over [0, n) in chunks of `chunk` items, on
// the pool's threads if `parallel` (small ranges run inline). Only the
// calling thread (thread 0) talks to the RunContext: before each of its
// chunks it polls Cancelled() and calls on_progress(items done). Returns
// false if cancelled (the remaining chunks are then skipped).
template <typename Body, typename Progress>
bool ParallelChunks(l2h_internal::WorkerPool& pool, bool parallel, int64_t n, int64_t chunk,
                    RunContext& ctx, Body&& body, Progress&& on_progress) {
  const int64_t num_chunks = (n + chunk - 1) / chunk;
  if (!parallel || pool.num_threads() <= 1 || num_chunks <= 1) {
    for (int64_t b = 0; b < num_chunks; ++b) {
      if (ctx.Cancelled()) return false;
      on_progress(b * chunk);
      body(b * chunk, std::min(n, (b + 1) * chunk), 0);
    }
    return true;
  }
  std::atomic<bool> stop{false};
  std::atomic<int64_t> done{0};
  pool.Run(num_chunks, [&](int64_t b, int thread) {
    if (stop.load(std::memory_order_relaxed)) return;
    if (thread == 0) {
      if (ctx.Cancelled()) {
        stop.store(true, std::memory_order_relaxed);
        return;
      }
      on_progress(done.load(std::memory_order_relaxed));
    }
    const int64_t end = std::min(n, (b + 1) * chunk);
    body(b * chunk, end, thread);
    done.fetch_add(end - b * chunk, std::memory_order_relaxed);
  });
  return !stop.load();
}

// Sum of exp(x[c] - shift) over the listed columns other than `skip`,
// summed with NumpySum in list order. `buf` needs room for the list.
double SumExpOverColumns(const float* x, const std::vector<int32_t>& columns, double shift,
                         int32_t skip, double* buf) {
  const int64_t n = static_cast<int64_t>(columns.size());
  for (int64_t q = 0; q < n; ++q) {
    const int32_t c = columns[q];
    buf[q] = c == skip ? -std::numeric_limits<double>::infinity()
                       : static_cast<double>(x[c]) - shift;
  }
  l2h_internal::ExpInPlace(buf, n);
  return NumpySum(buf, n);
}

// A point whose update in Reassign waits for its batch's exponentials:
// terms [offset, offset + num_terms) of the batch are the newly masked
// columns' x_c - shift, and term offset + num_terms is x_best - shift.
// Until the batch is finished the point's state still holds the old best.
struct PendingUpdate {
  int32_t point;
  int32_t best;  // the best after this step
  int64_t step_index;
  int64_t offset;
  int32_t num_terms;
};

struct Group {
  std::vector<int32_t> clusters;  // ordered as the reference's tuple
  double score = 0.0;
  int64_t num_points = 0;
};

class L2hRunner {
 public:
  L2hRunner(const MatrixView& logits, const L2hOptions& options, int num_threads,
            const L2hFirstPass* first_pass, RunContext& ctx)
      : data_(logits.data()),
        n_(logits.rows()),
        k_(static_cast<int32_t>(logits.cols())),
        aggregation_(options.aggregation),
        keep_first_pass_(options.keep_first_pass),
        num_threads_(num_threads),
        first_pass_(first_pass),
        ctx_(ctx),
        pool_(num_threads) {}

  absl::StatusOr<L2hResult> Run();

 private:
  const float* Row(int64_t i) const { return data_ + i * static_cast<int64_t>(k_); }

  absl::Status FirstPass();
  void BuildClusters();
  double GroupScore(const std::vector<int32_t>& clusters);
  // Fills rp_ (and rp_targets_) for a lowest-scoring group with points.
  absl::Status Reassign(const Group& lowest);
  // Dendro's rule for a lowest-scoring group without points.
  absl::Status ReverseRelatedness(const Group& lowest);
  void CollectPoints(const Group& g);
  void ReportMerging(int32_t step);
  void Progress(double fraction, std::string_view stage);

  const float* data_;
  const int64_t n_;
  const int32_t k_;
  const L2hAggregation aggregation_;
  const bool keep_first_pass_;
  const int num_threads_;
  // The rows it holds are not passed over again (null: none).
  const L2hFirstPass* const first_pass_;
  RunContext& ctx_;
  l2h_internal::WorkerPool pool_;

  // Per point: the state described at the top of the file (h(x) is its
  // `cluster`).
  using PointState = l2h_internal::PointState;
  std::vector<PointState> state_;

  // Per cluster.
  std::vector<int64_t> offset_;  // points of c: points_[offset_[c] .. offset_[c+1])
  std::vector<int32_t> points_;  // ascending within a cluster
  std::vector<double> sum_g_;
  std::vector<double> mean_g_;
  std::vector<int32_t> group_of_;
  std::vector<int32_t> pos_;  // index of c in its group's cluster list
  // Coverage: the columns already removed from the state of c's points form
  // a contiguous run of c's group list (groups grow by concatenation):
  // [pos_ - cov_before_, pos_ - cov_before_ + cov_len_).
  std::vector<int32_t> cov_before_;
  std::vector<int32_t> cov_len_;

  // Groups by node id (leaves 0..K-1, merge t creates K+t) and list order.
  std::vector<Group> groups_;
  std::vector<int32_t> order_;

  // Step scratch.
  std::vector<float> penalty_;          // 0 or -inf per column: the mask
  std::vector<int32_t> unmasked_;       // the columns outside the lowest group
  std::vector<int32_t> step_points_;    // points of the lowest group, ascending
  std::vector<uint64_t> bitmap_;        // all zero between steps
  std::vector<int32_t> step_target_;    // h^m per step point
  std::vector<double> step_value_;      // g^m per step point
  std::vector<double> sorted_value_;    // step values grouped by target
  std::vector<int64_t> target_count_;
  std::vector<double> rp_;
  std::vector<int32_t> rp_targets_;     // clusters with rp_ possibly non-zero
  std::vector<double> thread_buf_;      // num_threads_ * K doubles
  // Per thread: the arguments of a batch of subtracting updates (Reassign).
  int64_t batch_capacity_ = 0;
  std::vector<double> batch_buf_;       // num_threads_ * batch_capacity_
  bool any_point_touched_ = false;
  double last_fraction_ = 0.0;
};

absl::Status L2hRunner::FirstPass() {
  thread_buf_.assign(static_cast<size_t>(num_threads_) * k_, 0.0);
  // Rows [0, done) were passed over as they arrived, from the same rows
  // (checked by RunL2h).
  const int64_t done = first_pass_ != nullptr ? first_pass_->rows_added() : 0;
  if (done > 0) state_ = first_pass_->states();
  if (done == n_) {
    Progress(kFirstPassShare, "softmax (precomputed)");
    return absl::OkStatus();
  }
  state_.resize(n_);
  const int64_t left = n_ - done;
  std::atomic<int64_t> bad_row{std::numeric_limits<int64_t>::max()};
  auto body = [&](int64_t begin, int64_t end, int thread) {
    double* buf = thread_buf_.data() + static_cast<size_t>(thread) * k_;
    begin += done;
    end += done;
    const int64_t bad =
        l2h_internal::FirstPassStates(Row(begin), end - begin, k_, buf, state_.data() + begin);
    if (bad >= 0) {
      // Remember the first bad row (the chunk's states are not used).
      const int64_t first = begin + bad;
      int64_t seen = bad_row.load();
      while (first < seen && !bad_row.compare_exchange_weak(seen, first)) {
      }
    }
  };
  auto progress = [&](int64_t rows) {
    Progress(kFirstPassShare * static_cast<double>(done + rows) / static_cast<double>(n_),
             "softmax");
  };
  const int64_t rows_per_chunk = std::max<int64_t>(1, kWorkPerBlock / k_);
  if (!ParallelChunks(pool_, left * k_ >= kMinParallelWork, left, rows_per_chunk, ctx_, body,
                      progress)) {
    return absl::CancelledError("L2H cancelled");
  }
  if (bad_row.load() != std::numeric_limits<int64_t>::max()) {
    const int64_t i = bad_row.load();
    return l2h_internal::NonFiniteRowError(Row(i), k_, i);
  }
  Progress(kFirstPassShare, "softmax");
  return absl::OkStatus();
}

void L2hRunner::BuildClusters() {
  offset_.assign(k_ + 1, 0);
  for (int64_t i = 0; i < n_; ++i) ++offset_[state_[i].cluster + 1];
  for (int32_t c = 0; c < k_; ++c) offset_[c + 1] += offset_[c];
  points_.resize(n_);
  {
    std::vector<int64_t> fill(offset_.begin(), offset_.end() - 1);
    for (int64_t i = 0; i < n_; ++i) points_[fill[state_[i].cluster]++] = static_cast<int32_t>(i);
  }
  // Per-cluster sum and mean of g(x) = 1 / (1 + rest) over the cluster's
  // points in index order, as np.sum / np.mean of pred_probs[assignments == c].
  sum_g_.assign(k_, 0.0);
  mean_g_.assign(k_, 0.0);
  std::vector<double> g(n_);
  for (int64_t j = 0; j < n_; ++j) g[j] = 1.0 / (1.0 + state_[points_[j]].rest);
  for (int32_t c = 0; c < k_; ++c) {
    const int64_t size = offset_[c + 1] - offset_[c];
    if (size == 0) continue;  // Dendro's rule: the mean over no points is 0
    sum_g_[c] = NumpySum(g.data() + offset_[c], size);
    mean_g_[c] = sum_g_[c] / static_cast<double>(size);
  }
}

double L2hRunner::GroupScore(const std::vector<int32_t>& clusters) {
  // The reference's score line, per aggregation:
  //   sum([np.mean(pred_probs[assignments == c]) for c in group])   sum_of_means
  //   sum([np.sum(pred_probs[assignments == c]) for c in group])    sum_of_sums
  //   np.mean([np.mean(pred_probs[assignments == c]) for c in group])  mean_of_means
  // Python's sum() adds left to right starting from 0.
  switch (aggregation_) {
    case L2hAggregation::kSumOfMeans: {
      double s = 0.0;
      for (int32_t c : clusters) s += mean_g_[c];
      return s;
    }
    case L2hAggregation::kSumOfSums: {
      double s = 0.0;
      for (int32_t c : clusters) s += sum_g_[c];
      return s;
    }
    case L2hAggregation::kMeanOfMeans: {
      std::vector<double> v(clusters.size());
      for (size_t j = 0; j < clusters.size(); ++j) v[j] = mean_g_[clusters[j]];
      return NumpyMean(v.data(), static_cast<int64_t>(v.size()));
    }
  }
  return 0.0;
}

// The points of g in ascending index order (np.where(np.isin(...))).
void L2hRunner::CollectPoints(const Group& g) {
  step_points_.clear();
  auto list = [&](int32_t c) {
    return std::make_pair(points_.begin() + offset_[c], points_.begin() + offset_[c + 1]);
  };
  if (g.clusters.size() == 1) {
    const auto [b, e] = list(g.clusters[0]);
    step_points_.assign(b, e);
    return;
  }
  step_points_.resize(g.num_points);
  if (g.clusters.size() == 2) {
    const auto [b0, e0] = list(g.clusters[0]);
    const auto [b1, e1] = list(g.clusters[1]);
    std::merge(b0, e0, b1, e1, step_points_.begin());
    return;
  }
  // Mark the points in a bitmap over all rows, then read it in order:
  // O(points + N / 64).
  if (bitmap_.empty()) bitmap_.assign((n_ + 63) / 64, 0);
  for (int32_t c : g.clusters) {
    const auto [b, e] = list(c);
    for (auto it = b; it != e; ++it) bitmap_[*it >> 6] |= uint64_t{1} << (*it & 63);
  }
  int64_t out = 0;
  for (size_t w = 0; w < bitmap_.size(); ++w) {
    uint64_t bits = bitmap_[w];
    if (bits == 0) continue;
    bitmap_[w] = 0;
    while (bits != 0) {
      step_points_[out++] = static_cast<int32_t>(w * 64 + __builtin_ctzll(bits));
      bits &= bits - 1;
    }
  }
}

absl::Status L2hRunner::Reassign(const Group& lowest) {
  const std::vector<int32_t>& t = lowest.clusters;
  const int32_t t_size = static_cast<int32_t>(t.size());
  for (int32_t c : t) penalty_[c] = kMasked;
  CollectPoints(lowest);
  const int64_t m = static_cast<int64_t>(step_points_.size());
  step_target_.resize(m);
  step_value_.resize(m);
  any_point_touched_ = true;

  const float* penalty = penalty_.data();
  unmasked_.clear();
  for (int32_t c = 0; c < k_; ++c) {
    if (penalty_[c] == 0.0f) unmasked_.push_back(c);
  }
  const int32_t num_unmasked = static_cast<int32_t>(unmasked_.size());
  // The rows of the step's points are scattered over the matrix: fetch the
  // columns a point will need a few points ahead (the whole row if it will
  // have to rescan for its best column). Both lambdas must be inlined: GCC
  // takes a call whose only effects are prefetches for a pure call with an
  // unused result and deletes it (tests/bench/l2h_prefetch_check.py).
  auto prefetch_row = [&](const float* x) __attribute__((always_inline)) {
    for (int32_t col = 0; col < k_; col += 16) __builtin_prefetch(x + col);
  };
  auto prefetch = [&](int64_t j) __attribute__((always_inline)) {
    const int32_t i = step_points_[j];
    const float* x = Row(i);
    const PointState& st = state_[i];
    const int32_t b = st.best;
    __builtin_prefetch(x + b);
    if (penalty[b] != 0.0f) {
      const int32_t s = st.second;
      if (s >= 0 && penalty[s] == 0.0f) {
        __builtin_prefetch(x + s);
      } else {
        prefetch_row(x);  // a rescan reads the whole row
        return;
      }
    }
    // Mirror the choice of the update below.
    const int32_t c = st.cluster;
    const int32_t run_begin = pos_[c] - cov_before_[c];
    const int32_t run_end = run_begin + cov_len_[c];
    const int32_t num_new = run_begin + (t_size - run_end);
    if (std::min<int64_t>(num_unmasked, k_ / 2) < num_new) {
      if (num_unmasked < k_ / 2) {
        for (int32_t q = 0; q < std::min(num_unmasked, kMaxPrefetchColumns); ++q) {
          __builtin_prefetch(x + unmasked_[q]);
        }
      } else {
        prefetch_row(x);
      }
      return;
    }
    for (int32_t q = 0; q < std::min(run_begin, kMaxPrefetchColumns); ++q) {
      __builtin_prefetch(x + t[q]);
    }
    const int32_t limit = std::min(t_size, run_end + kMaxPrefetchColumns);
    for (int32_t q = run_end; q < limit; ++q) __builtin_prefetch(x + t[q]);
  };
  auto body = [&](int64_t begin, int64_t end, int thread) {
    double* buf = thread_buf_.data() + static_cast<size_t>(thread) * k_;
    double* batch = batch_buf_.data() + static_cast<size_t>(thread) * batch_capacity_;
    // The subtracting updates of up to kBatch points are done in three
    // phases: gather the arguments of their exponentials into `batch`, take
    // them all in one ExpInPlace, then finish each point. One point's
    // handful of exponentials is a chain of dependent operations; many
    // points' are independent, so the vector unit overlaps them. Exp gives
    // the same bits wherever a value sits in the batch, so every result
    // equals that of updating the points one at a time.
    // A point whose `rest` was computed directly, with shift = x_b, starts
    // its state afresh from it; its g^m is e / (e + rest) with
    // e = exp(x_b - x_b) = 1.
    auto restart = [&](PointState& st, const float* x, int32_t b, double rest) {
      st.ref = static_cast<float>(rest);
      st.shift = x[b];
      st.best = b;
      st.rest = rest;
      return 1.0 / (1.0 + rest);
    };
    PendingUpdate pending[kBatch];
    int num_pending = 0;
    int64_t batch_used = 0;
    auto finish_batch = [&] {
      l2h_internal::ExpInPlace(batch, batch_used);
      for (int p = 0; p < num_pending; ++p) {
        const PendingUpdate& u = pending[p];
        PointState& st = state_[u.point];
        const float* x = Row(u.point);
        const int32_t b = u.best;
        double rest = st.rest;
        if (u.num_terms > 0) rest -= l2h_internal::PairwiseSum(batch + u.offset, u.num_terms);
        // exp(x_best - shift) for the (possibly new) best: subtracted from
        // `rest` if the best moved, and the numerator of g^m.
        const double e = batch[u.offset + u.num_terms];
        if (b != st.best) rest -= e;
        double value;
        if (rest < kCancelRatio * static_cast<double>(st.ref) ||
            static_cast<double>(st.shift) - static_cast<double>(x[b]) > kMaxShiftDrift) {
          value = restart(st, x, b, MaskedExpSum(x, k_, x[b], penalty, b, buf));
        } else {
          st.best = b;
          st.rest = rest;
          value = e / (e + rest);
        }
        step_target_[u.step_index] = b;
        step_value_[u.step_index] = value;
      }
      num_pending = 0;
      batch_used = 0;
    };
    // Two stages: a point's state well ahead, its row's columns (which
    // depend on the state) nearer.
    for (int64_t j = begin; j < std::min(end, begin + 2 * kPrefetchDistance); ++j) {
      __builtin_prefetch(&state_[step_points_[j]]);
    }
    for (int64_t j = begin; j < std::min(end, begin + kPrefetchDistance); ++j) prefetch(j);
    for (int64_t j = begin; j < end; ++j) {
      if (j + 2 * kPrefetchDistance < end) {
        __builtin_prefetch(&state_[step_points_[j + 2 * kPrefetchDistance]]);
      }
      if (j + kPrefetchDistance < end) prefetch(j + kPrefetchDistance);
      const int32_t i = step_points_[j];
      const float* x = Row(i);
      PointState& st = state_[i];
      const int32_t c = st.cluster;
      // Columns of the lowest group not yet removed from this point's
      // state: the list outside the covered run.
      const int32_t run_begin = pos_[c] - cov_before_[c];
      const int32_t run_end = run_begin + cov_len_[c];
      const int32_t b = st.best;
      const double shift = st.shift;
      // A masked best moves to the runner-up of the last scan if that is
      // still outside the group, otherwise to a fresh scan (which also
      // brings the row into cache for the gathers below).
      int32_t new_best = b;
      if (penalty[b] != 0.0f) {
        const int32_t s = st.second;
        if (s >= 0 && penalty[s] == 0.0f) {
          new_best = s;
          st.second = -1;
        } else {
          l2h_internal::Top2(x, k_, penalty, &new_best, &st.second);
        }
      }
      // Either subtract the mass of the newly masked columns from `rest`,
      // or sum the unmasked columns afresh, whichever reads fewer values
      // (a contiguous row pass costs about half a gather per value).
      const int32_t num_new = run_begin + (t_size - run_end);
      const int64_t direct_cost = std::min<int64_t>(num_unmasked, k_ / 2);
      if (direct_cost < num_new) {
        const double new_shift = x[new_best];
        const double rest =
            num_unmasked < k_ / 2 ? SumExpOverColumns(x, unmasked_, new_shift, new_best, buf)
                                  : MaskedExpSum(x, k_, new_shift, penalty, new_best, buf);
        step_target_[j] = new_best;
        step_value_[j] = restart(st, x, new_best, rest);
        continue;
      }
      // The subtracting update: num_new <= K / 2 terms and the best's.
      if (num_pending == kBatch || batch_used + num_new + 1 > batch_capacity_) finish_batch();
      PendingUpdate& u = pending[num_pending++];
      u.point = i;
      u.step_index = j;
      u.best = new_best;
      u.offset = batch_used;
      // The old best is not part of `rest`.
      double* out = batch + batch_used;
      for (int32_t q = 0; q < run_begin; ++q) {
        const int32_t a = t[q];
        *out++ = a == b ? kMinusInf : static_cast<double>(x[a]) - shift;
      }
      for (int32_t q = run_end; q < t_size; ++q) {
        const int32_t a = t[q];
        *out++ = a == b ? kMinusInf : static_cast<double>(x[a]) - shift;
      }
      *out++ = static_cast<double>(x[new_best]) - shift;
      u.num_terms = num_new;
      batch_used += num_new + 1;
    }
    finish_batch();
  };
  // Chunks of at most a quarter of each thread's share, so that a step of a
  // few hundred points still spreads over the threads.
  const int64_t points_per_chunk = std::max<int64_t>(
      kMinChunkPoints,
      std::min<int64_t>(kWorkPerBlock / k_, (m + 4 * num_threads_ - 1) / (4 * num_threads_)));
  if (!ParallelChunks(pool_, m >= kMinParallelPoints, m, points_per_chunk, ctx_, body,
                      [](int64_t) {})) {
    for (int32_t c : t) penalty_[c] = 0.0f;
    return absl::CancelledError("L2H cancelled");
  }
  for (int32_t c : t) {
    penalty_[c] = 0.0f;
    cov_before_[c] = pos_[c];
    cov_len_[c] = t_size;
  }

  // rp(c) = np.sum(re_pred_probs[reassignments == c]): group the values by
  // target with a stable counting sort, then sum each run in index order.
  rp_targets_.clear();
  for (int64_t j = 0; j < m; ++j) {
    if (target_count_[step_target_[j]]++ == 0) rp_targets_.push_back(step_target_[j]);
  }
  int64_t start = 0;
  for (int32_t c : rp_targets_) {
    const int64_t count = target_count_[c];
    target_count_[c] = start;
    start += count;
  }
  sorted_value_.resize(m);
  for (int64_t j = 0; j < m; ++j) sorted_value_[target_count_[step_target_[j]]++] = step_value_[j];
  start = 0;
  for (int32_t c : rp_targets_) {
    const int64_t stop = target_count_[c];
    rp_[c] = NumpySum(sorted_value_.data() + start, stop - start);
    start = stop;
    target_count_[c] = 0;
  }
  return absl::OkStatus();
}

absl::Status L2hRunner::ReverseRelatedness(const Group& lowest) {
  // Only reachable before any point state changed: an empty group scores 0
  // and every group with points scores > 0, so all empty groups come first.
  if (any_point_touched_) {
    return absl::InternalError("L2H: empty lowest-scoring group after the first merge of points");
  }
  const std::vector<int32_t>& t = lowest.clusters;
  // rp(c) = sum over x in D^c of the softmax mass x puts on the group:
  // (sum over e in the group of exp(x_e - max x)) / (sum of exp(x - max x)).
  step_value_.resize(n_);
  auto body = [&](int64_t begin, int64_t end, int) {
    for (int64_t j = begin; j < end; ++j) {
      const int32_t i = points_[j];
      const float* x = Row(i);
      double mass = 0.0;
      for (int32_t e : t) mass += Exp(static_cast<double>(x[e]) - state_[i].shift);
      step_value_[j] = mass / (1.0 + state_[i].rest);
    }
  };
  // At least 64 points per chunk (not more: with a big group a chunk of
  // points is many Exp calls, and the cancel is polled between chunks).
  const int64_t chunk = std::max<int64_t>(64, kWorkPerBlock / static_cast<int64_t>(t.size()));
  if (!ParallelChunks(pool_, n_ * static_cast<int64_t>(t.size()) >= kMinParallelWork, n_, chunk,
                      ctx_, body, [](int64_t) {})) {
    return absl::CancelledError("L2H cancelled");
  }
  rp_targets_.clear();
  for (int32_t c = 0; c < k_; ++c) {
    const int64_t size = offset_[c + 1] - offset_[c];
    if (size == 0) continue;
    rp_[c] = NumpySum(step_value_.data() + offset_[c], size);
    rp_targets_.push_back(c);
  }
  return absl::OkStatus();
}

void L2hRunner::Progress(double fraction, std::string_view stage) {
  fraction = std::min(1.0, fraction);
  if (fraction < last_fraction_) return;
  last_fraction_ = fraction;
  ctx_.Report(fraction, stage);
}

void L2hRunner::ReportMerging(int32_t step) {
  const double f = kFirstPassShare + (1.0 - kFirstPassShare) * static_cast<double>(step + 1) /
                                         static_cast<double>(k_ - 1);
  Progress(f, "merging");
}

absl::StatusOr<L2hResult> L2hRunner::Run() {
  DENDRO_RETURN_IF_ERROR(FirstPass());
  std::shared_ptr<const L2hFirstPass> kept;
  if (keep_first_pass_)
    kept = std::make_shared<const L2hFirstPass>(L2hFirstPass::Adopt(k_, state_));
  BuildClusters();
  // Reassign's batches: a subtracting update has at most K / 2 + 1 terms.
  batch_capacity_ = std::max<int64_t>(kMinBatchCapacity, k_ / 2 + 1);
  batch_buf_.assign(static_cast<size_t>(num_threads_) * batch_capacity_, 0.0);

  groups_.reserve(2 * static_cast<size_t>(k_) - 1);
  group_of_.resize(k_);
  pos_.assign(k_, 0);
  cov_before_.assign(k_, 0);  // a point's own cluster is never in `rest`
  cov_len_.assign(k_, 1);
  order_.resize(k_);
  for (int32_t c = 0; c < k_; ++c) {
    Group g;
    g.clusters = {c};
    g.num_points = offset_[c + 1] - offset_[c];
    g.score = GroupScore(g.clusters);
    groups_.push_back(std::move(g));
    group_of_[c] = c;
    order_[c] = c;
  }
  penalty_.assign(k_, 0.0f);
  rp_.assign(k_, 0.0);
  target_count_.assign(k_, 0);

  std::vector<L2hStep> steps;
  std::vector<Merge> merges;
  steps.reserve(k_ - 1);
  merges.reserve(k_ - 1);
  std::vector<uint32_t> group_hit(2 * static_cast<size_t>(k_) - 1, 0);
  std::vector<double> scratch;
  for (int32_t step = 0; step + 1 < k_; ++step) {
    if (ctx_.Cancelled()) return absl::CancelledError("L2H cancelled");
    // min(score_per_gr, key=score_per_gr.get): the first minimum in list order.
    size_t lowest_at = 0;
    for (size_t j = 1; j < order_.size(); ++j) {
      if (groups_[order_[j]].score < groups_[order_[lowest_at]].score) lowest_at = j;
    }
    const int32_t lowest_id = order_[lowest_at];
    if (groups_[lowest_id].num_points > 0) {
      DENDRO_RETURN_IF_ERROR(Reassign(groups_[lowest_id]));
    } else {
      DENDRO_RETURN_IF_ERROR(ReverseRelatedness(groups_[lowest_id]));
    }
    // max(re_pp_per_group, key=...) over the other groups in list order,
    // each the np.mean of its clusters' rp. Groups without any target score
    // exactly 0 (np.mean of zeros) and need no arithmetic.
    const uint32_t stamp = static_cast<uint32_t>(step) + 1;
    for (int32_t c : rp_targets_) group_hit[group_of_[c]] = stamp;
    size_t related_at = order_.size();
    double related_value = 0.0;
    for (size_t j = 0; j < order_.size(); ++j) {
      if (j == lowest_at) continue;
      const Group& g = groups_[order_[j]];
      double value = 0.0;
      if (group_hit[order_[j]] == stamp) {
        scratch.resize(g.clusters.size());
        for (size_t q = 0; q < g.clusters.size(); ++q) scratch[q] = rp_[g.clusters[q]];
        value = NumpyMean(scratch.data(), static_cast<int64_t>(scratch.size()));
      }
      if (related_at == order_.size() || value > related_value) {
        related_at = j;
        related_value = value;
      }
    }
    for (int32_t c : rp_targets_) rp_[c] = 0.0;
    const int32_t related_id = order_[related_at];

    // groups = [gr for gr in groups if gr not in [lsg, mtg]] + [lsg + mtg]
    const int32_t merged_id = k_ + step;
    Group merged;
    const Group& lo = groups_[lowest_id];
    const Group& re = groups_[related_id];
    merged.clusters = lo.clusters;
    merged.clusters.insert(merged.clusters.end(), re.clusters.begin(), re.clusters.end());
    merged.num_points = lo.num_points + re.num_points;
    merged.score = GroupScore(merged.clusters);
    const int32_t lo_size = static_cast<int32_t>(lo.clusters.size());
    for (int32_t c : re.clusters) pos_[c] += lo_size;
    for (int32_t c : merged.clusters) group_of_[c] = merged_id;

    L2hStep s;
    s.lowest = lo.clusters;
    s.most_related = re.clusters;
    s.lowest_score = lo.score;
    s.relatedness = related_value;
    s.merged_score = merged.score;
    steps.push_back(std::move(s));
    merges.push_back(Merge{lowest_id, related_id, static_cast<double>(step + 1)});

    groups_[lowest_id].clusters.clear();
    groups_[lowest_id].clusters.shrink_to_fit();
    groups_[related_id].clusters.clear();
    groups_[related_id].clusters.shrink_to_fit();
    groups_.push_back(std::move(merged));
    const size_t first = std::min(lowest_at, related_at);
    const size_t second = std::max(lowest_at, related_at);
    order_.erase(order_.begin() + second);
    order_.erase(order_.begin() + first);
    order_.push_back(merged_id);
    ReportMerging(step);
  }

  DENDRO_ASSIGN_OR_RETURN(Hierarchy h, Hierarchy::FromMerges(k_, merges));
  std::vector<int32_t> point_leaf(n_);
  for (int64_t i = 0; i < n_; ++i) point_leaf[i] = state_[i].cluster;
  DENDRO_RETURN_IF_ERROR(h.SetPointLeaf(std::move(point_leaf)));
  h.mutable_metadata()["method"] = "l2h";
  h.mutable_metadata()["aggregation"] = std::string(L2hAggregationName(aggregation_));
  std::vector<int64_t> sizes(k_);
  int32_t empty = 0;
  for (int32_t c = 0; c < k_; ++c) {
    sizes[c] = offset_[c + 1] - offset_[c];
    if (sizes[c] == 0) ++empty;
  }
  return L2hResult{std::move(h), std::move(steps), std::move(sizes), empty, std::move(kept)};
}

}  // namespace

absl::StatusOr<L2hResult> RunL2h(const MatrixView& logits, const L2hOptions& options,
                                 RunContext& ctx, const L2hFirstPass* first_pass) {
  if (logits.rows() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("logits must have at least 1 row (point), got ", logits.rows()));
  }
  if (logits.cols() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "logits must have at least 2 columns (clusters), got ", logits.cols()));
  }
  if (logits.rows() > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("logits have ", logits.rows(),
                                                   " rows; at most 2147483647 are supported"));
  }
  if (logits.cols() > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("logits have ", logits.cols(),
                                                   " columns; at most 2^30 are supported"));
  }
  if (options.num_threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_threads must be >= 0 (0: all cores), got ", options.num_threads));
  }
  switch (options.aggregation) {
    case L2hAggregation::kSumOfSums:
    case L2hAggregation::kMeanOfMeans:
    case L2hAggregation::kSumOfMeans:
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown L2H aggregation value ", static_cast<int>(options.aggregation)));
  }
  if (first_pass != nullptr &&
      (first_pass->rows() != logits.rows() || first_pass->k() != logits.cols())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "L2H first pass: ", first_pass->rows_added(), " of ", first_pass->rows(), " rows x ",
        first_pass->k(), " columns, for logits of ", logits.rows(), " x ", logits.cols()));
  }
  const int num_threads = ThreadsOrDefault(options.num_threads);
  L2hRunner runner(logits, options, std::max(1, num_threads), first_pass, ctx);
  return runner.Run();
}

std::vector<int32_t> ArgmaxRows(const MatrixView& logits) {
  const int64_t n = logits.rows();
  const int32_t k = static_cast<int32_t>(logits.cols());
  std::vector<int32_t> out(n, 0);
  if (k == 0 || n == 0) return out;
  const float* data = logits.data();
  const int64_t chunk = std::max<int64_t>(1, kWorkPerBlock / k);
  const int64_t num_chunks = (n + chunk - 1) / chunk;
  const int threads = n * k >= kMinParallelWork ? DefaultThreads() : 1;
  l2h_internal::WorkerPool pool(threads);
  pool.Run(num_chunks, [&](int64_t b, int) {
    for (int64_t i = b * chunk; i < std::min(n, (b + 1) * chunk); ++i) {
      const int32_t best = MaskedArgmax(data + i * k, k, nullptr, -1);
      out[i] = best < 0 ? 0 : best;
    }
  });
  return out;
}

}  // namespace dendro
