// gHHC sees a cancel in every phase on settings that would otherwise run
// for hours: another thread flips the context's flag while FitGhhc runs, and
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
#include "core/ghhc/ghhc.h"
#include "gtest/gtest.h"
#include "tests/core/cancel_harness.h"

namespace dendro {
namespace {

using cancel_test::CancelDuring;
using cancel_test::CancelledBeforeStart;

// n points around 5 centres in d dimensions.
std::vector<float> Blobs(int64_t n, int d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n) * d);
  for (int64_t i = 0; i < n; ++i) {
    const float c = static_cast<float>(i % 5) * 4.f;
    for (int j = 0; j < d; ++j) x[static_cast<size_t>(i) * d + j] = c + (j == i % d ? c : 0.f) + g(rng);
  }
  return x;
}

absl::Status Fit(const std::vector<float>& x, int d, const GhhcOptions& o, RunContext& ctx) {
  const int64_t n = static_cast<int64_t>(x.size()) / d;
  return FitGhhc(MatrixView(x.data(), n, d), o, ctx).status();
}

// A margin phase of INT_MAX RSGD steps after every batch: without a poll
// per step it would never end.
TEST(GhhcCancelTest, MarginPhaseOfIntMaxSteps) {
  const std::vector<float> x = Blobs(600, 8, 1);
  GhhcOptions o;
  o.internal_nodes = 50;
  o.margin_every = 1;
  o.margin_steps = INT_MAX;
  EXPECT_EQ(CancelDuring("margin_steps=INT_MAX", "initialisation",
                         [&](RunContext& ctx) { return Fit(x, 8, o, ctx); }),
            absl::StatusCode::kCancelled);
}

// 100,000 internal nodes on 600 rows: every per-node loop (initial layout,
// batches against all nodes, the O(M^2) parent search of the margin phases)
// is long. A small batch keeps the per-chunk workspaces (3 b / 8 x M floats
// each) small.
TEST(GhhcCancelTest, HundredThousandNodesOnSixHundredRows) {
  const std::vector<float> x = Blobs(600, 8, 2);
  GhhcOptions o;
  o.internal_nodes = 100000;
  o.batch_size = 32;
  EXPECT_EQ(CancelDuring("internal_nodes=100000 on 600 rows", "",
                         [&](RunContext& ctx) { return Fit(x, 8, o, ctx); }),
            absl::StatusCode::kCancelled);
  // Once more with the cancel in the middle of the first margin phase's
  // parent search (the first phase follows the first batch).
  o.margin_every = 1;
  EXPECT_EQ(CancelDuring("internal_nodes=100000, margin phase", "initialisation",
                         [&](RunContext& ctx) { return Fit(x, 8, o, ctx); },
                         std::chrono::milliseconds(1500)),
            absl::StatusCode::kCancelled);
}

// The exact neighbour search forced onto 100,000 points (an O(n^2) table).
TEST(GhhcCancelTest, ExactNeighboursOnManyPoints) {
  const int d = 16;
  const std::vector<float> x = Blobs(100000, d, 3);
  GhhcOptions o;
  o.exact_knn_max_points = 1000000;
  // Preprocessing takes a few milliseconds; the first neighbour-search
  // report only comes after a batch of rows, so the delay counts from the
  // preprocessing report.
  EXPECT_EQ(CancelDuring("exact k-NN on 100000 points", "preprocessing",
                         [&](RunContext& ctx) { return Fit(x, d, o, ctx); }),
            absl::StatusCode::kCancelled);
}

// An HNSW build with a huge beam: every insertion is slow.
TEST(GhhcCancelTest, HnswBuildWithHugeBeam) {
  const int d = 16;
  const std::vector<float> x = Blobs(50000, d, 4);
  GhhcOptions o;
  o.exact_knn_max_points = 0;
  o.knn_method = GhhcKnn::kHnsw;
  o.hnsw_m = 48;
  o.hnsw_ef_construction = 20000;
  EXPECT_EQ(CancelDuring("HNSW build, ef_construction=20000", "preprocessing",
                         [&](RunContext& ctx) { return Fit(x, d, o, ctx); }),
            absl::StatusCode::kCancelled);
}

// The inverted-file search with small cells and many probes: every query
// compares itself with a fifth of the 100,000 points.
TEST(GhhcCancelTest, IvfSearchWithManyProbes) {
  const int d = 16;
  const std::vector<float> x = Blobs(100000, d, 7);
  GhhcOptions o;
  o.exact_knn_max_points = 0;
  o.knn_method = GhhcKnn::kIvf;
  o.ivf_list_size = 100;
  o.ivf_probes = 200;
  EXPECT_EQ(CancelDuring("IVF search, 1000 cells, 200 probes", "preprocessing",
                         [&](RunContext& ctx) { return Fit(x, d, o, ctx); }),
            absl::StatusCode::kCancelled);
}

// Tree decoding: one short batch, then every one of 400,000 points is
// compared with 10,000 nodes.
TEST(GhhcCancelTest, TreeExtractionOverManyPointsAndNodes) {
  const int d = 8;
  const std::vector<float> x = Blobs(400000, d, 5);
  GhhcOptions o;
  o.internal_nodes = 10000;
  o.triples = 100;
  o.init_sample = 1000;
  o.exact_knn_max_points = 0;  // a cheap HNSW graph: the neighbours hardly matter here
  o.knn_method = GhhcKnn::kHnsw;
  o.hnsw_m = 2;
  o.hnsw_ef_construction = 1;
  EXPECT_EQ(CancelDuring("extraction, 400000 points x 10000 nodes", "extracting the tree",
                         [&](RunContext& ctx) { return Fit(x, d, o, ctx); }),
            absl::StatusCode::kCancelled);
}

TEST(GhhcCancelTest, CancelledBeforeStart) {
  const std::vector<float> x = Blobs(600, 8, 6);
  GhhcOptions o;
  o.internal_nodes = 100000;
  o.margin_steps = INT_MAX;
  EXPECT_EQ(CancelledBeforeStart("internal_nodes=100000, margin_steps=INT_MAX",
                                 [&](RunContext& ctx) { return Fit(x, 8, o, ctx); }),
            absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace dendro
