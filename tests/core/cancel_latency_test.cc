// A cancel reaches every method on settings that would otherwise run for
// hours: the flag flips on another thread while the fit runs, and the fit
// must return CANCELLED. There is deliberately no time limit here; a loop
// that never polls its RunContext makes the test hang until ctest's
// timeout, which is the failure. The measured latency (flag to return) is
// printed for the record.
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "core/common/run_context.h"
#include "core/ghhc/ghhc.h"
#include "core/hppca/hppca.h"
#include "core/l2h/l2h.h"
#include "core/tneb/tneb.h"
#include "gtest/gtest.h"

namespace dendro {
namespace {

// Cancelled once `flip` is set; records when that happened.
class FlagContext final : public RunContext {
 public:
  bool Cancelled() const override { return flag_.load(); }
  void Report(double, std::string_view) override {}
  void Flip() {
    flipped_at_ = std::chrono::steady_clock::now();
    flag_.store(true);
  }
  double SecondsSinceFlip() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - flipped_at_).count();
  }

 private:
  std::atomic<bool> flag_{false};
  std::chrono::steady_clock::time_point flipped_at_;
};

// Runs `fit` with a context that is cancelled after `after`; returns its
// status code and prints the latency under `name`.
absl::StatusCode CancelDuring(const char* name, const std::function<absl::Status(RunContext&)>& fit,
                              std::chrono::milliseconds after = std::chrono::milliseconds(300)) {
  FlagContext ctx;
  std::thread flipper([&] {
    std::this_thread::sleep_for(after);
    ctx.Flip();
  });
  const absl::Status s = fit(ctx);
  flipper.join();
  std::printf("%s: returned %s %.3f s after the cancel\n", name,
              absl::StatusCodeToString(s.code()).c_str(), ctx.SecondsSinceFlip());
  return s.code();
}

std::vector<float> Blobs(int n, int d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n) * d);
  for (int i = 0; i < n; ++i) {
    const float c = static_cast<float>(i % 5) * 4.f;
    for (int j = 0; j < d; ++j) x[static_cast<size_t>(i) * d + j] = c + g(rng);
  }
  return x;
}

TEST(CancelLatencyTest, GhhcMarginPhaseOfIntMaxSteps) {
  const std::vector<float> x = Blobs(600, 8, 1);
  GhhcOptions o;
  o.internal_nodes = 50;
  o.margin_every = 1;
  o.margin_steps = INT_MAX;
  o.seed = 1;
  EXPECT_EQ(CancelDuring("ghhc margin_steps=INT_MAX",
                         [&](RunContext& ctx) {
                           return FitGhhc(MatrixView(x.data(), 600, 8), o, ctx).status();
                         }),
            absl::StatusCode::kCancelled);
}

TEST(CancelLatencyTest, GhhcManyMoreNodesThanPoints) {
  const std::vector<float> x = Blobs(600, 8, 2);
  GhhcOptions o;
  o.internal_nodes = 100000;
  o.seed = 1;
  EXPECT_EQ(CancelDuring("ghhc internal_nodes=100000 on 600 rows",
                         [&](RunContext& ctx) {
                           return FitGhhc(MatrixView(x.data(), 600, 8), o, ctx).status();
                         }),
            absl::StatusCode::kCancelled);
}

TEST(CancelLatencyTest, TnebManyRestartsAndLongPaths) {
  const std::vector<float> x = Blobs(600, 4, 3);
  TnebOptions em;
  em.components = 40;
  em.restarts = 1000000;
  em.max_iterations = 1000000;
  em.tolerance = 1e-300;
  em.seed = 1;
  EXPECT_EQ(CancelDuring("tneb restarts=1e6",
                         [&](RunContext& ctx) {
                           return FitTneb(MatrixView(x.data(), 600, 4), em, ctx).status();
                         }),
            absl::StatusCode::kCancelled);
  TnebOptions paths;
  paths.components = 30;
  paths.restarts = 1;
  paths.path_points = 100000;
  paths.path_steps = INT_MAX;
  paths.seed = 1;
  EXPECT_EQ(CancelDuring("tneb path_steps=INT_MAX",
                         [&](RunContext& ctx) {
                           return FitTneb(MatrixView(x.data(), 600, 4), paths, ctx).status();
                         },
                         std::chrono::milliseconds(1500)),
            absl::StatusCode::kCancelled);
}

TEST(CancelLatencyTest, HppcaCancelledBeforeAndDuringTraining) {
  const int n = 20000, d = 64, k = 400;
  std::mt19937 rng(4);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n) * d);
  std::vector<int64_t> y(n);
  for (int i = 0; i < n; ++i) {
    y[i] = i % k;
    for (int j = 0; j < d; ++j) x[static_cast<size_t>(i) * d + j] = g(rng) + 0.05f * y[i];
  }
  HppcaOptions o;
  o.q = 8;
  o.r = 8;
  o.superclasses = 20;
  o.kmeans_iterations = 10000;
  o.kmeans_restarts = 1000;
  EXPECT_EQ(CancelDuring("hppca k-means restarts=1000",
                         [&](RunContext& ctx) {
                           return FitHppca(MatrixView(x.data(), n, d), y, o, ctx).status();
                         },
                         std::chrono::milliseconds(50)),
            absl::StatusCode::kCancelled);
}

TEST(CancelLatencyTest, L2hCancelledBeforeAndDuring) {
  const int n = 20000, k = 1000;
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n) * k);
  for (float& v : x) v = g(rng);
  EXPECT_EQ(CancelDuring("l2h 20000 x 1000",
                         [&](RunContext& ctx) {
                           return RunL2h(MatrixView(x.data(), n, k), L2hOptions{}, ctx).status();
                         },
                         std::chrono::milliseconds(20)),
            absl::StatusCode::kCancelled);
  FlagContext already;
  already.Flip();
  EXPECT_EQ(RunL2h(MatrixView(x.data(), n, k), L2hOptions{}, already).status().code(),
            absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace dendro
