// t-NEB sees a cancel in every phase on settings that would otherwise run
// for hours: another thread flips the context's flag while FitTneb runs, and
// the fit must return CANCELLED. There is deliberately no time limit in
// these tests; a loop that never polls makes the test hang until ctest's
// timeout, which is the failure. The time from the flip to the return is
// printed (and recorded as the test property cancel_latency_ms).
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "core/common/run_context.h"
#include "core/tneb/tneb.h"
#include "gtest/gtest.h"
#include "tests/core/cancel_harness.h"

namespace dendro {
namespace {

using cancel_test::CancelDuring;
using cancel_test::CancelledBeforeStart;

// n points around `centres` well separated centres in d dimensions.
std::vector<float> Blobs(int64_t n, int d, int centres, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n) * d);
  for (int64_t i = 0; i < n; ++i) {
    const int c = static_cast<int>(i % centres);
    for (int j = 0; j < d; ++j) {
      x[static_cast<size_t>(i) * d + j] = 8.f * static_cast<float>((c >> j) & 1) + 3.f * c + g(rng);
    }
  }
  return x;
}

absl::Status Fit(const std::vector<float>& x, int d, const TnebOptions& o, RunContext& ctx) {
  const int64_t n = static_cast<int64_t>(x.size()) / d;
  return FitTneb(MatrixView(x.data(), n, d), o, ctx).status();
}

// EM that never converges, restarted 100,000 times: restarts in parallel
// (num_threads 2), then one at a time (num_threads 1).
TEST(TnebCancelTest, EmRestartsAndIterations) {
  const std::vector<float> x = Blobs(600, 4, 5, 1);
  TnebOptions o;
  o.components = 40;
  o.restarts = 100000;
  o.max_iterations = 1000000000;
  o.tolerance = 1e-300;
  o.num_threads = 2;
  EXPECT_EQ(CancelDuring("EM, 100000 restarts in parallel", "",
                         [&](RunContext& ctx) { return Fit(x, 4, o, ctx); }),
            absl::StatusCode::kCancelled);
  o.num_threads = 1;
  EXPECT_EQ(CancelDuring("EM, 100000 restarts one at a time", "",
                         [&](RunContext& ctx) { return Fit(x, 4, o, ctx); }),
            absl::StatusCode::kCancelled);
}

// One restart whose iterations are long passes over 200,000 rows with many
// components, split over both threads.
TEST(TnebCancelTest, EmPassesOverManyRows) {
  const std::vector<float> x = Blobs(200000, 8, 8, 2);
  TnebOptions o;
  o.components = 100;
  o.restarts = 1;
  o.max_iterations = 1000000000;
  o.tolerance = 1e-300;
  o.num_threads = 2;
  EXPECT_EQ(CancelDuring("EM, 200000 rows x 100 components", "",
                         [&](RunContext& ctx) { return Fit(x, 8, o, ctx); },
                         std::chrono::milliseconds(1000)),
            absl::StatusCode::kCancelled);
}

// Path optimisation for INT_MAX steps over long paths.
TEST(TnebCancelTest, PathOptimisationIntMaxSteps) {
  const std::vector<float> x = Blobs(3000, 3, 6, 3);
  TnebOptions o;
  o.components = 10;
  o.neighbors = 3;
  o.restarts = 1;
  o.max_iterations = 5;
  o.path_points = 100000;
  o.path_steps = INT_MAX;
  o.num_threads = 2;
  EXPECT_EQ(CancelDuring("paths, path_steps=INT_MAX, path_points=100000", "NEB paths",
                         [&](RunContext& ctx) { return Fit(x, 3, o, ctx); }),
            absl::StatusCode::kCancelled);
}

// The final evaluation with INT_MAX points per path (evaluated in bounded
// chunks, so memory stays small).
TEST(TnebCancelTest, EvaluationWithIntMaxPoints) {
  const std::vector<float> x = Blobs(3000, 3, 6, 4);
  TnebOptions o;
  o.components = 10;
  o.neighbors = 3;
  o.restarts = 1;
  o.max_iterations = 5;
  o.path_steps = 0;
  o.eval_points = INT_MAX;
  o.num_threads = 2;
  EXPECT_EQ(CancelDuring("evaluation, eval_points=INT_MAX", "NEB paths",
                         [&](RunContext& ctx) { return Fit(x, 3, o, ctx); }),
            absl::StatusCode::kCancelled);
}

TEST(TnebCancelTest, CancelledBeforeStart) {
  const std::vector<float> x = Blobs(600, 4, 5, 5);
  TnebOptions o;
  o.components = 40;
  o.restarts = 100000;
  o.max_iterations = 1000000000;
  o.tolerance = 1e-300;
  o.path_points = 100000;
  o.path_steps = INT_MAX;
  o.eval_points = INT_MAX;
  EXPECT_EQ(CancelledBeforeStart("restarts=100000, path_steps=INT_MAX, eval_points=INT_MAX",
                                 [&](RunContext& ctx) { return Fit(x, 4, o, ctx); }),
            absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace dendro
