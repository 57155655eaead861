// L2H sees a cancel in every phase on settings that would otherwise run for
// a long time: another thread flips the context's flag while RunL2h runs,
// and the run must return CANCELLED. There is deliberately no time limit in
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
#include "core/l2h/l2h.h"
#include "gtest/gtest.h"
#include "tests/core/cancel_harness.h"

namespace dendro {
namespace {

using cancel_test::CancelDuring;
using cancel_test::CancelledBeforeStart;

// n x k logits: noise in [-2, 2) from a cheap hash plus 4 on column i % k
// (so with n < k most clusters are empty).
std::vector<float> Logits(int64_t n, int64_t k, uint64_t seed) {
  std::vector<float> x(static_cast<size_t>(n * k));
  uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      const float u = static_cast<float>(s >> 40) * 0x1.0p-24f;  // [0, 1)
      x[static_cast<size_t>(i * k + j)] = 4.f * u - 2.f + (j == i % k ? 4.f : 0.f);
    }
  }
  return x;
}

absl::Status RunOn(const std::vector<float>& x, int64_t n, int64_t k, RunContext& ctx) {
  L2hOptions o;
  o.num_threads = 2;
  return RunL2h(MatrixView(x.data(), n, k), o, ctx).status();
}

// 300,000 clusters: K - 1 merge steps, each scanning every remaining group
// (O(K^2) in all, many minutes).
TEST(L2hCancelTest, MergingWithLargeK) {
  const int64_t n = 300, k = 300000;
  const std::vector<float> x = Logits(n, k, 1);
  EXPECT_EQ(CancelDuring("300 x 300000 logits, merging", "merging",
                         [&](RunContext& ctx) { return RunOn(x, n, k, ctx); }),
            absl::StatusCode::kCancelled);
}

// 400,000 points: the first (softmax) pass and the per-step passes over the
// lowest group's points.
TEST(L2hCancelTest, PassesOverManyPoints) {
  const int64_t n = 400000, k = 200;
  const std::vector<float> x = Logits(n, k, 2);
  EXPECT_EQ(CancelDuring("400000 x 200 logits, first pass", std::nullopt,
                         [&](RunContext& ctx) { return RunOn(x, n, k, ctx); },
                         std::chrono::milliseconds(20)),
            absl::StatusCode::kCancelled);
  EXPECT_EQ(CancelDuring("400000 x 200 logits, merging", "merging",
                         [&](RunContext& ctx) { return RunOn(x, n, k, ctx); },
                         std::chrono::milliseconds(20)),
            absl::StatusCode::kCancelled);
}

TEST(L2hCancelTest, CancelledBeforeStart) {
  const int64_t n = 300, k = 300000;
  const std::vector<float> x = Logits(n, k, 3);
  EXPECT_EQ(CancelledBeforeStart("300 x 300000 logits",
                                 [&](RunContext& ctx) { return RunOn(x, n, k, ctx); }),
            absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace dendro
