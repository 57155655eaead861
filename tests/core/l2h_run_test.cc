// RunL2h behaviour: agreement with a direct O(N K^2) transcription of the
// reference (and of Dendro's documented empty-cluster rule) on many random
// inputs, empty clusters, validation, cancellation, progress, thread-count
// invariance and the invariants of the returned hierarchy.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/common/run_context.h"
#include "core/io/atomic_file.h"
#include "core/l2h/l2h.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/temp_dir.h"

namespace dendro {
namespace {

using ::testing::HasSubstr;

struct Logits {
  int64_t n = 0;
  int32_t k = 0;
  std::vector<float> x;
  MatrixView view() const { return MatrixView(x.data(), n, k); }
  float at(int64_t i, int32_t c) const { return x[i * k + c]; }
};

// ---------------------------------------------------------------------------
// Direct transcription of appendix A (plus the empty-group rule of l2h.h):
// full masked softmax of every point of the lowest group at every step,
// std::exp, plain left-to-right sums. Also reports the relative gap of each
// decision so that near-ties (where rounding may legitimately differ) are
// not compared.
// ---------------------------------------------------------------------------
struct BruteStep {
  std::vector<int32_t> lowest;
  std::vector<int32_t> related;
  double lowest_score = 0.0;
  double relatedness = 0.0;
  double gap = 0.0;  // min of the two decisions' relative gaps
};

std::vector<BruteStep> BruteL2h(const Logits& l, L2hAggregation agg) {
  const int64_t n = l.n;
  const int32_t k = l.k;
  std::vector<std::vector<double>> p(n, std::vector<double>(k));
  std::vector<int32_t> assign(n);
  std::vector<double> g(n);
  for (int64_t i = 0; i < n; ++i) {
    float m = l.at(i, 0);
    for (int32_t c = 1; c < k; ++c) m = std::max(m, l.at(i, c));
    double s = 0.0;
    for (int32_t c = 0; c < k; ++c) s += std::exp(double{l.at(i, c)} - m);
    int32_t b = 0;
    for (int32_t c = 0; c < k; ++c) {
      p[i][c] = std::exp(double{l.at(i, c)} - m) / s;
      if (l.at(i, c) > l.at(i, b)) b = c;
    }
    assign[i] = b;
    g[i] = p[i][b];
  }
  std::vector<double> csum(k, 0.0);
  std::vector<int64_t> csize(k, 0);
  for (int64_t i = 0; i < n; ++i) {
    csum[assign[i]] += g[i];
    ++csize[assign[i]];
  }
  auto mean = [&](int32_t c) { return csize[c] ? csum[c] / csize[c] : 0.0; };
  auto score = [&](const std::vector<int32_t>& grp) {
    double s = 0.0;
    for (int32_t c : grp) s += agg == L2hAggregation::kSumOfSums ? csum[c] : mean(c);
    return agg == L2hAggregation::kMeanOfMeans ? s / grp.size() : s;
  };
  std::vector<std::vector<int32_t>> groups;
  for (int32_t c = 0; c < k; ++c) groups.push_back({c});
  std::vector<BruteStep> steps;
  for (int32_t t = 0; t + 1 < k; ++t) {
    std::vector<double> sc;
    for (const auto& grp : groups) sc.push_back(score(grp));
    size_t lo = 0;
    for (size_t j = 1; j < groups.size(); ++j) {
      if (sc[j] < sc[lo]) lo = j;
    }
    double second = std::numeric_limits<double>::infinity();
    for (size_t j = 0; j < groups.size(); ++j) {
      if (j != lo) second = std::min(second, sc[j]);
    }
    double gap = sc[lo] > 0 ? (second - sc[lo]) / sc[lo] : (second > 0 ? 1.0 : 0.0);
    if (groups.size() == 1) gap = 1.0;
    std::vector<bool> in(k, false);
    int64_t members = 0;
    for (int32_t c : groups[lo]) {
      in[c] = true;
      members += csize[c];
    }
    std::vector<double> rp(k, 0.0);
    for (int64_t i = 0; i < n; ++i) {
      if (members > 0) {
        if (!in[assign[i]]) continue;
        double m = -std::numeric_limits<double>::infinity();
        int32_t b = -1;
        for (int32_t c = 0; c < k; ++c) {
          if (!in[c] && l.at(i, c) > m) {
            m = l.at(i, c);
            b = c;
          }
        }
        double s = 0.0;
        for (int32_t c = 0; c < k; ++c) {
          if (!in[c]) s += std::exp(double{l.at(i, c)} - m);
        }
        rp[b] += 1.0 / s;
      } else {
        for (int32_t e : groups[lo]) rp[assign[i]] += p[i][e];
      }
    }
    size_t re = groups.size();
    double best = 0.0;
    double runner = -std::numeric_limits<double>::infinity();
    for (size_t j = 0; j < groups.size(); ++j) {
      if (j == lo) continue;
      double v = 0.0;
      for (int32_t c : groups[j]) v += rp[c];
      v /= groups[j].size();
      if (re == groups.size() || v > best) {
        if (re != groups.size()) runner = best;
        re = j;
        best = v;
      } else {
        runner = std::max(runner, v);
      }
    }
    if (runner > -std::numeric_limits<double>::infinity()) {
      gap = std::min(gap, best > 0 ? (best - runner) / best : 0.0);
    }
    BruteStep st{groups[lo], groups[re], sc[lo], best, gap};
    std::vector<int32_t> merged = groups[lo];
    merged.insert(merged.end(), groups[re].begin(), groups[re].end());
    std::vector<std::vector<int32_t>> next;
    for (size_t j = 0; j < groups.size(); ++j) {
      if (j != lo && j != re) next.push_back(groups[j]);
    }
    next.push_back(merged);
    groups = std::move(next);
    steps.push_back(std::move(st));
  }
  return steps;
}

// Random logits: normal noise * scale, each point boosted on a random cluster.
Logits RandomLogits(uint64_t seed, int64_t n, int32_t k, double scale, double boost) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0.0, 1.0);
  std::uniform_real_distribution<double> u(0.2, 1.0);
  Logits l{n, k, std::vector<float>(n * k)};
  for (int64_t i = 0; i < n; ++i) {
    const int32_t y = static_cast<int32_t>(rng() % k);
    for (int32_t c = 0; c < k; ++c) {
      double v = noise(rng) * scale;
      if (c == y) v += boost * u(rng);
      l.x[i * k + c] = static_cast<float>(v);
    }
  }
  return l;
}

absl::StatusOr<L2hResult> RunOn(const Logits& l, L2hAggregation agg = L2hAggregation::kSumOfMeans,
                              int threads = 2) {
  L2hOptions o;
  o.aggregation = agg;
  o.num_threads = threads;
  NullRunContext ctx;
  return RunL2h(l.view(), o, ctx);
}

// Compares up to the first decision the brute force calls a near-tie
// (0 < gap < 1e-9). Exact ties are compared: on these inputs they come from
// exactly representable values (empty groups score 0; with one-hot softmax
// every g is 1 and every rp a count), which any summation order reproduces,
// and both sides must then resolve them by list order.
// Returns the number of steps compared.
size_t CompareWithBrute(const Logits& l, L2hAggregation agg, const std::string& what) {
  const auto brute = BruteL2h(l, agg);
  auto r = RunOn(l, agg);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return 0;
  EXPECT_EQ(r->steps.size(), brute.size());
  size_t t = 0;
  for (; t < brute.size() && t < r->steps.size(); ++t) {
    if (brute[t].gap > 0.0 && brute[t].gap < 1e-9) break;
    EXPECT_EQ(r->steps[t].lowest, brute[t].lowest) << what << " step " << t;
    EXPECT_EQ(r->steps[t].most_related, brute[t].related) << what << " step " << t;
    EXPECT_NEAR(r->steps[t].lowest_score, brute[t].lowest_score,
                1e-9 * std::abs(brute[t].lowest_score))
        << what << " step " << t;
    EXPECT_NEAR(r->steps[t].relatedness, brute[t].relatedness,
                1e-9 * std::abs(brute[t].relatedness) + 1e-300)
        << what << " step " << t;
    if (r->steps[t].lowest != brute[t].lowest ||
        r->steps[t].most_related != brute[t].related) {
      break;
    }
  }
  return t;
}

TEST(L2hRun, AgreesWithDirectTranscriptionOnRandomInputs) {
  // Scales from nearly flat logits to logits in the hundreds (softmax terms
  // underflow, the masked maximum drifts far below the first one) and very
  // confident points (masking the top cluster cancels almost all mass).
  const double scales[] = {0.05, 1.0, 3.0, 40.0, 300.0};
  const double boosts[] = {0.5, 3.0, 30.0};
  const L2hAggregation aggs[] = {L2hAggregation::kSumOfMeans, L2hAggregation::kSumOfSums,
                                 L2hAggregation::kMeanOfMeans};
  size_t total = 0;
  size_t compared = 0;
  for (uint64_t seed = 0; seed < 90; ++seed) {
    std::mt19937_64 rng(seed * 7919);
    const int32_t k = 2 + static_cast<int32_t>(rng() % 24);
    const int64_t n = k + static_cast<int64_t>(rng() % 300);
    const double scale = scales[seed % 5];
    const double boost = boosts[(seed / 5) % 3];
    const Logits l = RandomLogits(seed, n, k, scale, boost);
    const L2hAggregation agg = aggs[seed % 3];
    const std::string what = "seed " + std::to_string(seed) + " n=" + std::to_string(n) +
                             " k=" + std::to_string(k);
    const size_t c = CompareWithBrute(l, agg, what);
    // At scale 300 the softmax is nearly one-hot: g is 1 or 1 - 1e-13, so
    // genuine near-ties (< 1e-9) are common there and stop the comparison.
    if (scale < 100.0) {
      total += k - 1;
      compared += c;
    }
    if (HasFailure()) return;
  }
  // Elsewhere near-ties are rare: nearly every step must have been compared.
  EXPECT_GT(compared, total * 95 / 100);
}

TEST(L2hRun, AgreesWithDirectTranscriptionWithManyClusters) {
  // Hundreds of clusters: a point's update then subtracts up to K / 2 newly
  // masked columns, so a batch of updates fills its buffer before it has 16
  // points (Reassign flushes it early), and steps of more than 256 points
  // run on several threads.
  size_t total = 0;
  size_t compared = 0;
  for (uint64_t seed = 0; seed < 3; ++seed) {
    const int32_t k = 300 + 100 * static_cast<int32_t>(seed);
    const Logits l = RandomLogits(1000 + seed, 4 * k, k, 1.0 + seed, 3.0);
    const L2hAggregation agg = seed == 1 ? L2hAggregation::kSumOfSums
                                         : L2hAggregation::kSumOfMeans;
    total += k - 1;
    compared += CompareWithBrute(l, agg, "seed " + std::to_string(seed));
    if (HasFailure()) return;
  }
  EXPECT_GT(compared, total * 95 / 100);
}

TEST(L2hRun, EmptyClustersFollowTheDocumentedRule) {
  // K = 6; nobody's argmax is 1 or 4. Column 1 is the runner-up of cluster
  // 3's points, column 4 the runner-up of cluster 5's points.
  std::mt19937_64 rng(42);
  std::normal_distribution<double> noise(0.0, 0.2);
  const int32_t k = 6;
  Logits l{0, k, {}};
  const int32_t own[] = {0, 2, 3, 5};
  for (int rep = 0; rep < 40; ++rep) {
    for (int32_t c : own) {
      std::vector<float> row(k);
      for (int32_t j = 0; j < k; ++j) row[j] = static_cast<float>(noise(rng));
      row[c] += 6.0f;
      if (c == 3) row[1] += 3.0f;
      if (c == 5) row[4] += 3.0f;
      l.x.insert(l.x.end(), row.begin(), row.end());
      ++l.n;
    }
  }
  auto r = RunOn(l);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->empty_clusters, 2);
  EXPECT_EQ(r->cluster_sizes, (std::vector<int64_t>{40, 0, 40, 40, 0, 40}));
  ASSERT_EQ(r->steps.size(), 5u);
  // Empty groups score 0 and go first, in list order; each joins the group
  // whose points put the most softmax mass on it.
  EXPECT_EQ(r->steps[0].lowest, std::vector<int32_t>{1});
  EXPECT_EQ(r->steps[0].most_related, std::vector<int32_t>{3});
  EXPECT_EQ(r->steps[0].lowest_score, 0.0);
  EXPECT_EQ(r->steps[1].lowest, std::vector<int32_t>{4});
  EXPECT_EQ(r->steps[1].most_related, std::vector<int32_t>{5});
  EXPECT_EQ(r->steps[1].lowest_score, 0.0);
  for (const L2hStep& s : r->steps) {
    EXPECT_TRUE(std::isfinite(s.lowest_score));
    EXPECT_TRUE(std::isfinite(s.relatedness));
    EXPECT_TRUE(std::isfinite(s.merged_score));
  }
  for (L2hAggregation agg : {L2hAggregation::kSumOfMeans, L2hAggregation::kSumOfSums,
                             L2hAggregation::kMeanOfMeans}) {
    EXPECT_EQ(CompareWithBrute(l, agg, "empty clusters"), 5u);
  }
}

TEST(L2hRun, AllPointsInOneCluster) {
  Logits l{50, 5, std::vector<float>(250)};
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < l.n; ++i) {
    for (int32_t c = 0; c < 5; ++c) l.x[i * 5 + c] = u(rng) + (c == 0 ? 5.0f : 0.0f);
  }
  auto r = RunOn(l);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->empty_clusters, 4);
  EXPECT_EQ(r->hierarchy.num_leaves(), 5);
  EXPECT_EQ(CompareWithBrute(l, L2hAggregation::kSumOfMeans, "one cluster"), 4u);
}

TEST(L2hRun, TinyInputs) {
  for (int64_t n : {1, 2, 3}) {
    for (int32_t k : {2, 3, 7}) {
      const Logits l = RandomLogits(static_cast<uint64_t>(100 * n + k), n, k, 1.0, 2.0);
      auto r = RunOn(l);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->steps.size(), static_cast<size_t>(k - 1));
      EXPECT_EQ(r->hierarchy.num_leaves(), k);
      EXPECT_EQ(CompareWithBrute(l, L2hAggregation::kSumOfMeans,
                                 "n=" + std::to_string(n) + " k=" + std::to_string(k)),
                static_cast<size_t>(k - 1));
    }
  }
}

TEST(L2hRun, RejectsBadInput) {
  const float data[] = {0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f,
                        std::numeric_limits<float>::quiet_NaN(), 7.0f, 8.0f};
  NullRunContext ctx;
  L2hOptions o;
  auto r = RunL2h(MatrixView(data, 0, 3), o, ctx);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("at least 1 row"));
  r = RunL2h(MatrixView(data, 3, 1), o, ctx);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "logits must have at least 2 columns (clusters), got 1");
  r = RunL2h(MatrixView(data, 3, 3), o, ctx);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("row 2, column 0 is NaN"));
  const float inf[] = {0.0f, 1.0f, 2.0f, -std::numeric_limits<float>::infinity()};
  r = RunL2h(MatrixView(inf, 2, 2), o, ctx);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("row 1, column 1 is -inf"));
  // Several chunks on two threads: the first bad row is named, whichever
  // chunk finished first.
  std::vector<float> big(size_t{30000} * 100);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 7);
  big[size_t{25000} * 100 + 50] = std::numeric_limits<float>::quiet_NaN();
  big[size_t{17000} * 100 + 9] = std::numeric_limits<float>::infinity();
  o.num_threads = 2;
  r = RunL2h(MatrixView(big.data(), 30000, 100), o, ctx);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("row 17000, column 9 is +inf"));
  o.num_threads = -1;
  r = RunL2h(MatrixView(data, 2, 3), o, ctx);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("num_threads"));
}

TEST(L2hRun, AggregationNamesRoundTrip) {
  for (L2hAggregation a : {L2hAggregation::kSumOfMeans, L2hAggregation::kSumOfSums,
                           L2hAggregation::kMeanOfMeans}) {
    auto p = ParseL2hAggregation(L2hAggregationName(a));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, a);
  }
  EXPECT_EQ(L2hAggregationName(L2hAggregation::kSumOfMeans), "sum_of_means");
  auto bad = ParseL2hAggregation("median");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("'median'"));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("sum_of_means"));
}

// Cancels once Cancelled() has been asked `allow` times, or once a progress
// report reached `cancel_at`; records progress.
class ScriptedContext : public RunContext {
 public:
  explicit ScriptedContext(int64_t allow, double cancel_at = 2.0)
      : allow_(allow), cancel_at_(cancel_at) {}
  bool Cancelled() const override {
    ++calls_;
    if (said_yes_) ++calls_after_yes_;
    said_yes_ = said_yes_ || calls_ > allow_ || reached_;
    return said_yes_;
  }
  void Report(double fraction, std::string_view stage) override {
    reports_.emplace_back(fraction, std::string(stage));
    reached_ = reached_ || fraction >= cancel_at_;
  }
  int64_t calls() const { return calls_; }
  bool said_yes() const { return said_yes_; }
  int64_t calls_after_yes() const { return calls_after_yes_; }
  const std::vector<std::pair<double, std::string>>& reports() const { return reports_; }

 private:
  int64_t allow_;
  double cancel_at_;
  bool reached_ = false;
  mutable bool said_yes_ = false;
  mutable int64_t calls_ = 0;
  mutable int64_t calls_after_yes_ = 0;
  std::vector<std::pair<double, std::string>> reports_;
};

TEST(L2hRun, CancellationIsHonouredAnywhere) {
  // Big enough for the parallel first pass and parallel steps.
  const Logits l = RandomLogits(9, 60000, 40, 1.0, 3.0);
  L2hOptions o;
  o.num_threads = 2;
  ScriptedContext full(std::numeric_limits<int64_t>::max());
  ASSERT_TRUE(RunL2h(l.view(), o, full).ok());
  EXPECT_FALSE(full.said_yes());
  // At least once per merge step.
  EXPECT_GE(full.calls(), 39);
  struct Case {
    int64_t allow;
    double cancel_at;  // progress: the first pass reports up to 0.5
  };
  for (const Case& c : {Case{0, 2.0}, Case{1, 2.0}, Case{std::numeric_limits<int64_t>::max(), 0.2},
                        Case{std::numeric_limits<int64_t>::max(), 0.55},
                        Case{std::numeric_limits<int64_t>::max(), 0.95}}) {
    ScriptedContext ctx(c.allow, c.cancel_at);
    auto r = RunL2h(l.view(), o, ctx);
    EXPECT_TRUE(ctx.said_yes());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled)
        << "allow=" << c.allow << " cancel_at=" << c.cancel_at;
    // Nothing is asked after the answer was yes.
    EXPECT_EQ(ctx.calls_after_yes(), 0) << "cancel_at=" << c.cancel_at;
  }
}

TEST(L2hRun, ProgressIsMonotoneAndEndsAtOne) {
  const Logits l = RandomLogits(4, 20000, 30, 1.0, 3.0);
  ScriptedContext ctx(std::numeric_limits<int64_t>::max());
  L2hOptions o;
  ASSERT_TRUE(RunL2h(l.view(), o, ctx).ok());
  const auto& rep = ctx.reports();
  ASSERT_GT(rep.size(), 29u);
  double last = 0.0;
  bool merging = false;
  for (const auto& [f, stage] : rep) {
    EXPECT_GE(f, last);
    EXPECT_LE(f, 1.0);
    last = f;
    merging |= stage == "merging";
  }
  EXPECT_TRUE(merging);
  EXPECT_EQ(rep.back().first, 1.0);
  EXPECT_EQ(rep.back().second, "merging");
}

// The same merges with bit-identical values, not just the same decisions.
void ExpectIdenticalSteps(const std::vector<L2hStep>& got, const std::vector<L2hStep>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t t = 0; t < want.size(); ++t) {
    EXPECT_EQ(got[t].lowest, want[t].lowest) << "step " << t;
    EXPECT_EQ(got[t].most_related, want[t].most_related) << "step " << t;
    EXPECT_EQ(got[t].lowest_score, want[t].lowest_score) << "step " << t;
    EXPECT_EQ(got[t].relatedness, want[t].relatedness) << "step " << t;
    EXPECT_EQ(got[t].merged_score, want[t].merged_score) << "step " << t;
  }
}

TEST(L2hRun, ResultDoesNotDependOnThreadCount) {
  // Big enough that the first pass and the steps of large groups run in
  // parallel (see the thresholds in l2h.cc).
  const Logits l = RandomLogits(17, 40000, 64, 1.5, 4.0);
  for (L2hAggregation agg : {L2hAggregation::kSumOfMeans, L2hAggregation::kMeanOfMeans}) {
    auto one = RunOn(l, agg, 1);
    ASSERT_TRUE(one.ok());
    for (int threads : {2, 3, 0}) {
      auto r = RunOn(l, agg, threads);
      ASSERT_TRUE(r.ok());
      ExpectIdenticalSteps(r->steps, one->steps);
    }
  }
}

TEST(L2hRun, RowOrderDoesNotChangeTheTree) {
  // Permuting the rows changes only the order of the per-cluster sums, so
  // the scores agree to rounding and every merge is the same, up to the first
  // decision the brute force calls a near-tie (rounding may then go either
  // way; none occurs on most draws).
  for (uint64_t seed : {31u, 32u, 33u}) {
    const Logits l = RandomLogits(seed, 6000, 24, 1.5, 4.0);
    Logits p = l;
    std::vector<int64_t> order(l.n);
    std::iota(order.begin(), order.end(), 0);
    std::mt19937_64 rng(seed);
    std::shuffle(order.begin(), order.end(), rng);
    for (int64_t i = 0; i < l.n; ++i) {
      std::copy_n(&l.x[order[i] * l.k], l.k, &p.x[i * l.k]);
    }
    for (L2hAggregation agg : {L2hAggregation::kSumOfMeans, L2hAggregation::kMeanOfMeans,
                               L2hAggregation::kSumOfSums}) {
      const auto brute = BruteL2h(l, agg);
      auto a = RunOn(l, agg);
      auto b = RunOn(p, agg);
      ASSERT_TRUE(a.ok() && b.ok());
      ASSERT_EQ(a->steps.size(), b->steps.size());
      size_t t = 0;
      for (; t < a->steps.size(); ++t) {
        if (brute[t].gap > 0.0 && brute[t].gap < 1e-9) break;
        ASSERT_EQ(b->steps[t].lowest, a->steps[t].lowest) << "seed " << seed << " step " << t;
        ASSERT_EQ(b->steps[t].most_related, a->steps[t].most_related)
            << "seed " << seed << " step " << t;
        EXPECT_NEAR(b->steps[t].lowest_score, a->steps[t].lowest_score,
                    1e-9 * std::abs(a->steps[t].lowest_score));
        EXPECT_NEAR(b->steps[t].relatedness, a->steps[t].relatedness,
                    1e-9 * std::abs(a->steps[t].relatedness) + 1e-300);
      }
      EXPECT_GT(t, a->steps.size() / 2) << "seed " << seed << ": a near-tie early on";
    }
  }
}

TEST(L2hRun, HierarchyMatchesSteps) {
  const Logits l = RandomLogits(23, 3000, 17, 1.0, 3.0);
  auto r = RunOn(l);
  ASSERT_TRUE(r.ok());
  const Hierarchy& h = r->hierarchy;
  const int32_t k = l.k;
  ASSERT_EQ(h.num_leaves(), k);
  EXPECT_EQ(h.point_leaf(), ArgmaxRows(l.view()));
  EXPECT_EQ(h.leaf_count(h.root()), k);
  EXPECT_TRUE(h.is_binary());
  EXPECT_EQ(h.metadata().at("method"), "l2h");
  EXPECT_EQ(h.metadata().at("aggregation"), "sum_of_means");

  // Replay the steps' cluster tuples: node of each group, merge t at height t+1.
  std::map<std::vector<int32_t>, int32_t> node_of;
  for (int32_t c = 0; c < k; ++c) node_of[{c}] = c;
  const std::vector<Merge> merges = h.ToMerges();
  ASSERT_EQ(merges.size(), r->steps.size());
  for (size_t t = 0; t < merges.size(); ++t) {
    const L2hStep& s = r->steps[t];
    ASSERT_TRUE(node_of.count(s.lowest) && node_of.count(s.most_related)) << "step " << t;
    EXPECT_EQ(merges[t].a, node_of[s.lowest]);
    EXPECT_EQ(merges[t].b, node_of[s.most_related]);
    EXPECT_EQ(merges[t].height, static_cast<double>(t + 1));
    std::vector<int32_t> merged = s.lowest;
    merged.insert(merged.end(), s.most_related.begin(), s.most_related.end());
    node_of[merged] = k + static_cast<int32_t>(t);
  }
  // Cutting to k clusters undoes the last k - 1 merges: same partition as
  // applying the first K - k steps.
  for (int32_t cut = 1; cut <= k; ++cut) {
    std::vector<int32_t> label(k);
    std::iota(label.begin(), label.end(), 0);
    for (int32_t t = 0; t < k - cut; ++t) {
      const int32_t to = label[r->steps[t].lowest[0]];
      const int32_t from = label[r->steps[t].most_related[0]];
      for (int32_t& x : label) x = x == from ? to : x;
    }
    auto got = h.CutToK(cut);
    ASSERT_TRUE(got.ok()) << got.status();
    for (int32_t a = 0; a < k; ++a) {
      for (int32_t b = 0; b < k; ++b) {
        EXPECT_EQ(label[a] == label[b], (*got)[a] == (*got)[b]) << "cut " << cut;
      }
    }
  }
}

TEST(L2hRun, FirstPassFedInPiecesGivesTheSameResultBitForBit) {
  // Large enough that RunL2h's own first pass runs in parallel chunks; the
  // pieces here cut rows at other places (1, 5, 21, ... rows).
  const Logits l = RandomLogits(29, 40000, 64, 1.5, 4.0);
  L2hFirstPass first(l.n, l.k);
  EXPECT_FALSE(first.complete());
  for (int64_t row = 0, piece = 1; row < l.n; row += piece, piece = piece * 4 + 1) {
    const int64_t n = std::min(piece, l.n - row);
    ASSERT_TRUE(first.AddRows(l.x.data() + row * l.k, n).ok());
  }
  ASSERT_TRUE(first.complete());
  EXPECT_EQ(first.bytes(), l.n * 32);
  for (L2hAggregation agg : {L2hAggregation::kSumOfMeans, L2hAggregation::kSumOfSums}) {
    auto own = RunOn(l, agg, 2);
    ASSERT_TRUE(own.ok());
    L2hOptions o;
    o.aggregation = agg;
    o.num_threads = 2;
    ScriptedContext ctx(std::numeric_limits<int64_t>::max());
    auto given = RunL2h(l.view(), o, ctx, &first);
    ASSERT_TRUE(given.ok()) << given.status();
    EXPECT_EQ(given->hierarchy.point_leaf(), own->hierarchy.point_leaf());
    EXPECT_EQ(given->cluster_sizes, own->cluster_sizes);
    ExpectIdenticalSteps(given->steps, own->steps);
    ASSERT_FALSE(ctx.reports().empty());
    EXPECT_EQ(ctx.reports().front().second, "softmax (precomputed)");
  }
}

TEST(L2hRun, AFirstPassOfTheFirstRowsIsFinishedByTheRun) {
  // What an upload leaves when its pass fell behind: the first rows only.
  // The run passes over the others itself (in parallel chunks here) and
  // gives the same result bit for bit, and names a bad row after the prefix
  // by its row in the whole matrix.
  const Logits l = RandomLogits(31, 40000, 64, 1.5, 4.0);
  auto own = RunOn(l, L2hAggregation::kSumOfMeans, 2);
  ASSERT_TRUE(own.ok());
  for (int64_t prefix : {int64_t{0}, int64_t{1}, int64_t{12345}, l.n - 1}) {
    L2hFirstPass first(l.n, l.k);
    ASSERT_TRUE(first.AddRows(l.x.data(), prefix).ok());
    for (int threads : {1, 2}) {
      L2hOptions o;
      o.num_threads = threads;
      ScriptedContext ctx(std::numeric_limits<int64_t>::max());
      auto given = RunL2h(l.view(), o, ctx, &first);
      ASSERT_TRUE(given.ok()) << given.status();
      EXPECT_EQ(given->hierarchy.point_leaf(), own->hierarchy.point_leaf()) << prefix;
      ExpectIdenticalSteps(given->steps, own->steps);
      ASSERT_FALSE(ctx.reports().empty());
      EXPECT_EQ(ctx.reports().front().second, "softmax") << prefix;
    }
  }
  Logits bad = l;
  bad.x[30000 * bad.k + 7] = std::numeric_limits<float>::quiet_NaN();
  L2hFirstPass first(bad.n, bad.k);
  ASSERT_TRUE(first.AddRows(bad.x.data(), 20000).ok());
  NullRunContext ctx;
  auto r = RunL2h(bad.view(), L2hOptions(), ctx, &first);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("row 30000, column 7 is NaN"));
}

TEST(L2hRun, FirstPassRefusesWhatDoesNotFit) {
  const float x[] = {0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f};
  L2hFirstPass first(2, 3);
  EXPECT_THAT(std::string(first.AddRows(x, 3).message()),
              HasSubstr("3 more rows after 0 of 2"));
  const float nan[] = {0.0f, 1.0f, 2.0f, 3.0f, std::numeric_limits<float>::quiet_NaN(), 5.0f};
  ASSERT_TRUE(first.AddRows(nan, 1).ok());
  // The bad value is named by its row in the whole matrix, and nothing is added.
  EXPECT_THAT(std::string(first.AddRows(nan + 3, 1).message()),
              HasSubstr("row 1, column 1 is NaN"));
  EXPECT_EQ(first.rows_added(), 1);

  NullRunContext ctx;
  L2hOptions o;
  // Incomplete: the run passes over the rest. Of another shape: refused
  // rather than trusted.
  EXPECT_TRUE(RunL2h(MatrixView(x, 2, 3), o, ctx, &first).ok());
  ASSERT_TRUE(first.AddRows(x + 3, 1).ok());
  EXPECT_TRUE(RunL2h(MatrixView(x, 2, 3), o, ctx, &first).ok());
  auto r = RunL2h(MatrixView(x, 3, 2), o, ctx, &first);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("2 of 2 rows x 3 columns"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("for logits of 3 x 2"));
}

TEST(L2hRun, ASavedFirstPassStartsTheFitOfMoreRowsBitForBit) {
  // A warm start: the pass a fit of the first 30000 rows kept, saved and
  // resumed for all 40000 (a dataset's next generation), gives the tree a
  // cold fit of the 40000 gives.
  const Logits l = RandomLogits(37, 40000, 64, 1.5, 4.0);
  const int64_t old_rows = 30000;
  L2hOptions keep;
  keep.num_threads = 2;
  keep.keep_first_pass = true;
  NullRunContext ctx;
  auto before = RunL2h(MatrixView(l.x.data(), old_rows, l.k), keep, ctx);
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_NE(before->first_pass, nullptr);
  ASSERT_TRUE(before->first_pass->complete());
  // The pass kept is the first pass, not the states the merges changed.
  L2hFirstPass direct(old_rows, l.k);
  ASSERT_TRUE(direct.AddRows(l.x.data(), old_rows).ok());
  ASSERT_EQ(std::memcmp(direct.states().data(), before->first_pass->states().data(), old_rows * 32),
            0);
  EXPECT_EQ(RunL2h(l.view(), L2hOptions(), ctx)->first_pass, nullptr);  // not asked for

  ScopedTempDir dir;
  const std::string path = dir.path() + "/pass.bin";
  ASSERT_TRUE(before->first_pass->Save(path).ok());
  auto resumed = L2hFirstPass::Resume(path, l.n, l.k);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->rows_added(), old_rows);
  auto own = RunOn(l, L2hAggregation::kSumOfMeans, 2);
  ASSERT_TRUE(own.ok());
  L2hOptions o;
  o.num_threads = 2;
  auto warm = RunL2h(l.view(), o, ctx, &*resumed);
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_EQ(warm->hierarchy.point_leaf(), own->hierarchy.point_leaf());
  ExpectIdenticalSteps(warm->steps, own->steps);

  // What does not fit is refused; a damaged file is data loss.
  EXPECT_EQ(L2hFirstPass::Resume(path, old_rows - 1, l.k).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(L2hFirstPass::Resume(path, l.n, l.k + 1).status().message()),
              HasSubstr("covers 30000 rows of 64 columns"));
  std::string bytes;
  ASSERT_TRUE(ReadFileToString(path, &bytes).ok());
  ASSERT_TRUE(WriteFileAtomic(path, bytes.substr(0, bytes.size() - 5)).ok());
  EXPECT_EQ(L2hFirstPass::Resume(path, l.n, l.k).status().code(), absl::StatusCode::kDataLoss);
  bytes[32 + 16] = 99;  // row 0's best cluster, out of range
  ASSERT_TRUE(WriteFileAtomic(path, bytes).ok());
  EXPECT_THAT(std::string(L2hFirstPass::Resume(path, l.n, l.k).status().message()),
              HasSubstr("row 0 is out of range"));
  L2hFirstPass partial(10, l.k);
  EXPECT_EQ(partial.Save(path).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(L2hRun, ArgmaxRowsTiesGoToTheLowestIndex) {
  const float x[] = {1.0f, 3.0f, 3.0f, 5.0f, 5.0f, 0.0f, -2.0f, -1.0f, -1.0f};
  EXPECT_EQ(ArgmaxRows(MatrixView(x, 3, 3)), (std::vector<int32_t>{1, 0, 1}));
}

}  // namespace
}  // namespace dendro
