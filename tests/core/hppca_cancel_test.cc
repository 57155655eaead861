// Hierarchical PPCA sees a cancel in every phase on settings that would
// otherwise run for a long time: another thread flips the context's flag
// while FitHppca runs, and the fit must return CANCELLED. There is
// deliberately no time limit in these tests; a loop that never polls makes
// the test hang until ctest's timeout, which is the failure. The time from
// the flip to the return is printed (and recorded as the test property
// cancel_latency_ms).
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
#include "core/hppca/hppca.h"
#include "gtest/gtest.h"
#include "tests/core/cancel_harness.h"

namespace dendro {
namespace {

using cancel_test::CancelDuring;
using cancel_test::CancelledBeforeStart;

struct Labelled {
  std::vector<float> x;
  std::vector<int64_t> y;
  int64_t n = 0;
  int d = 0;
  MatrixView view() const { return MatrixView(x.data(), n, d); }
};

// n rows in d dimensions, labels i % k; class c is centred on a point that
// depends on c / 8, so that groups of classes exist.
Labelled Classes(int64_t n, int d, int k, uint32_t seed) {
  Labelled l;
  l.n = n;
  l.d = d;
  l.x.resize(static_cast<size_t>(n) * d);
  l.y.resize(n);
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  for (int64_t i = 0; i < n; ++i) {
    const int c = static_cast<int>(i % k);
    l.y[i] = c;
    for (int j = 0; j < d; ++j) {
      l.x[static_cast<size_t>(i) * d + j] =
          g(rng) + 0.2f * static_cast<float>(c % 8) + 2.f * static_cast<float>((c / 8 + j) % 5);
    }
  }
  return l;
}

// Super-class k-means restarted INT_MAX times (each run: k-means++ seeding
// and Lloyd rounds with the KL assignment) over 400 classes.
TEST(HppcaCancelTest, SuperclassKMeansWithIntMaxRestarts) {
  const Labelled data = Classes(20000, 64, 400, 1);
  HppcaOptions o;
  o.q = 8;
  o.r = 8;
  o.superclasses = 20;
  o.kmeans_iterations = INT_MAX;
  o.kmeans_restarts = INT_MAX;
  o.num_threads = 2;
  EXPECT_EQ(CancelDuring("Gaussian k-means, kmeans_restarts=INT_MAX", "super-classes",
                         [&](RunContext& ctx) {
                           return FitHppca(data.view(), data.y, o, ctx).status();
                         }),
            absl::StatusCode::kCancelled);
}

// Raw-data clustering of 100 samples per class of 2,000 classes into 400
// clusters with up to INT_MAX Lloyd rounds.
TEST(HppcaCancelTest, RawDataKMeansOnManySamples) {
  const Labelled data = Classes(200000, 32, 2000, 2);
  HppcaOptions o;
  o.q = 4;
  o.r = 4;
  o.superclasses = 400;
  o.raw_data_clustering = true;
  o.raw_samples_per_class = 100;
  o.kmeans_iterations = INT_MAX;
  o.num_threads = 2;
  EXPECT_EQ(CancelDuring("raw-data k-means, 200000 samples into 400 clusters", "super-classes",
                         [&](RunContext& ctx) {
                           return FitHppca(data.view(), data.y, o, ctx).status();
                         }),
            absl::StatusCode::kCancelled);
}

// Per-class fits of two very big classes (each a long chain of rank-4096
// updates of a 256 x 256 scatter matrix).
TEST(HppcaCancelTest, ClassFitsOfBigClasses) {
  const Labelled data = Classes(300000, 256, 2, 3);
  HppcaOptions o;
  o.q = 16;
  o.r = 16;
  o.superclasses = kFlatClassifier;
  o.num_threads = 2;
  // The first progress report comes after a class is done: count from the
  // start of the call.
  EXPECT_EQ(CancelDuring("class fits, 2 classes of 150000 rows x 256", std::nullopt,
                         [&](RunContext& ctx) {
                           return FitHppca(data.view(), data.y, o, ctx).status();
                         }),
            absl::StatusCode::kCancelled);
}

TEST(HppcaCancelTest, CancelledBeforeStart) {
  const Labelled data = Classes(20000, 64, 400, 4);
  HppcaOptions o;
  o.q = 8;
  o.r = 8;
  o.superclasses = 20;
  o.kmeans_iterations = INT_MAX;
  o.kmeans_restarts = INT_MAX;
  EXPECT_EQ(CancelledBeforeStart("kmeans_restarts=INT_MAX", [&](RunContext& ctx) {
              return FitHppca(data.view(), data.y, o, ctx).status();
            }),
            absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace dendro
