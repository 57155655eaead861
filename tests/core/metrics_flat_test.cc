// Flat clustering metrics: scikit-learn goldens plus brute-force checks of
// the definitions on small random labelings.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/metrics/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/source_path.h"

namespace dendro {
namespace {

using ::testing::HasSubstr;

TEST(FlatMetricsTest, MatchScikitLearnGoldens) {
  const std::string path =
      SourcePath("tests/golden/metrics/flat_metrics.json");
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot open " << path;
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json doc = nlohmann::json::parse(text.str());
  ASSERT_GE(doc["cases"].size(), 10u);
  for (const auto& c : doc["cases"]) {
    const std::string name = c["name"];
    const auto truth = c["truth"].get<std::vector<int64_t>>();
    const auto pred = c["pred"].get<std::vector<int64_t>>();
    EXPECT_NEAR(*NormalizedMutualInfo(truth, pred), c["nmi"].get<double>(), 1e-12) << name;
    EXPECT_NEAR(*AdjustedRandIndex(truth, pred), c["ari"].get<double>(), 1e-12) << name;
    EXPECT_NEAR(*ClusteringAccuracy(truth, pred), c["acc"].get<double>(), 1e-12) << name;
    EXPECT_NEAR(*LeafPurity(truth, pred), c["leaf_purity"].get<double>(), 1e-12) << name;
  }
}

// Contingency table as nested maps, written plainly.
struct Table {
  std::map<int64_t, std::map<int64_t, double>> cell;  // truth -> pred -> count
  std::map<int64_t, double> a, b;                     // row / column sums
  double n = 0;
};

Table MakeTable(const std::vector<int64_t>& truth, const std::vector<int64_t>& pred) {
  Table t;
  for (size_t i = 0; i < truth.size(); ++i) {
    t.cell[truth[i]][pred[i]] += 1;
    t.a[truth[i]] += 1;
    t.b[pred[i]] += 1;
    t.n += 1;
  }
  return t;
}

double PlainNmi(const Table& t) {
  if (t.a.size() == 1 && t.b.size() == 1) return 1.0;
  double mi = 0, ha = 0, hb = 0;
  for (const auto& [r, row] : t.cell) {
    for (const auto& [c, nij] : row) {
      mi += nij / t.n * std::log(nij * t.n / (t.a.at(r) * t.b.at(c)));
    }
  }
  for (const auto& [r, x] : t.a) ha -= x / t.n * std::log(x / t.n);
  for (const auto& [c, x] : t.b) hb -= x / t.n * std::log(x / t.n);
  if (mi <= 1e-15) return 0.0;
  return mi / ((ha + hb) / 2);
}

double Comb2(double x) { return x * (x - 1) / 2; }

double PlainAri(const Table& t) {
  double index = 0, sa = 0, sb = 0;
  for (const auto& [r, row] : t.cell) {
    for (const auto& [c, nij] : row) index += Comb2(nij);
  }
  for (const auto& [r, x] : t.a) sa += Comb2(x);
  for (const auto& [c, x] : t.b) sb += Comb2(x);
  if (t.n < 2) return 1.0;  // one point: the partitions agree
  const double expected = sa * sb / Comb2(t.n);
  const double max_index = (sa + sb) / 2;
  if (max_index == expected) return 1.0;  // identical partitions
  return (index - expected) / (max_index - expected);
}

double PlainLeafPurity(const Table& t) {
  std::map<int64_t, double> best;
  for (const auto& [r, row] : t.cell) {
    for (const auto& [c, nij] : row) best[c] = std::max(best[c], nij);
  }
  double sum = 0;
  for (const auto& [c, x] : best) sum += x;
  return sum / t.n;
}

// Best total over every one-to-one matching between the smaller and the
// larger label set, by exhaustive recursion.
double BruteAccuracy(const Table& t) {
  std::vector<int64_t> rows, cols;
  for (const auto& [r, x] : t.a) rows.push_back(r);
  for (const auto& [c, x] : t.b) cols.push_back(c);
  auto weight = [&](int64_t r, int64_t c) {
    auto it = t.cell.at(r).find(c);
    return it == t.cell.at(r).end() ? 0.0 : it->second;
  };
  const bool swap = rows.size() > cols.size();
  const std::vector<int64_t>& small = swap ? cols : rows;
  const std::vector<int64_t>& large = swap ? rows : cols;
  std::vector<bool> used(large.size(), false);
  double best = 0;
  std::function<void(size_t, double)> rec = [&](size_t i, double acc) {
    if (i == small.size()) {
      best = std::max(best, acc);
      return;
    }
    for (size_t j = 0; j < large.size(); ++j) {
      if (used[j]) continue;
      used[j] = true;
      rec(i + 1, acc + (swap ? weight(large[j], small[i]) : weight(small[i], large[j])));
      used[j] = false;
    }
  };
  rec(0, 0.0);
  return best / t.n;
}

std::vector<int64_t> RandomLabels(size_t n, int k, std::mt19937& rng, int64_t offset = 0) {
  std::vector<int64_t> out(n);
  for (auto& x : out) x = offset + static_cast<int64_t>(rng() % k) * 1000003;
  return out;
}

TEST(FlatMetricsTest, MatchPlainFormulasOnRandomLabels) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t n = 1 + rng() % 60;
    const int kt = 1 + static_cast<int>(rng() % 6);
    const int kp = 1 + static_cast<int>(rng() % 7);
    std::vector<int64_t> truth = RandomLabels(n, kt, rng, -5);
    std::vector<int64_t> pred = RandomLabels(n, kp, rng, 1LL << 40);
    if (trial % 10 == 0) {
      // Same partition, different names.
      for (size_t i = 0; i < n; ++i) pred[i] = truth[i] * 3 + 1;
    }
    const Table t = MakeTable(truth, pred);
    SCOPED_TRACE(testing::Message() << "trial " << trial << " n=" << n);
    EXPECT_NEAR(*NormalizedMutualInfo(truth, pred), PlainNmi(t), 1e-10);
    EXPECT_NEAR(*AdjustedRandIndex(truth, pred), PlainAri(t), 1e-10);
    EXPECT_NEAR(*LeafPurity(truth, pred), PlainLeafPurity(t), 1e-12);
    EXPECT_NEAR(*ClusteringAccuracy(truth, pred), BruteAccuracy(t), 1e-12);
  }
}

TEST(FlatMetricsTest, AccuracyWithManyMoreClustersThanClasses) {
  // Exercises the column pruning (each class keeps its top entries only).
  std::mt19937 rng(23);
  for (int trial = 0; trial < 50; ++trial) {
    const size_t n = 20 + rng() % 80;
    std::vector<int64_t> truth = RandomLabels(n, 3, rng);
    std::vector<int64_t> pred = RandomLabels(n, 12, rng);
    const Table t = MakeTable(truth, pred);
    EXPECT_NEAR(*ClusteringAccuracy(truth, pred), BruteAccuracy(t), 1e-12);
    EXPECT_NEAR(*ClusteringAccuracy(pred, truth), BruteAccuracy(MakeTable(pred, truth)), 1e-12);
  }
}

TEST(FlatMetricsTest, RejectsBadInput) {
  std::vector<int64_t> a = {1, 2, 3};
  std::vector<int64_t> b = {1, 2};
  for (auto r : {NormalizedMutualInfo(a, b), AdjustedRandIndex(a, b), ClusteringAccuracy(a, b),
                 LeafPurity(a, b)}) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("truth has 3 labels but pred has 2"));
  }
  auto empty = NormalizedMutualInfo({}, {});
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("empty"));
}

TEST(FlatMetricsTest, LargeInputsStayExactAndFast) {
  // 1M points in 2100 x 2100 labels: the contingency table goes through
  // the sparse path; ARI's products of pair counts overflow 64 bits.
  std::mt19937 rng(5);
  const size_t n = 1000000;
  std::vector<int64_t> truth(n), pred(n);
  for (size_t i = 0; i < n; ++i) {
    truth[i] = rng() % 2100;
    pred[i] = (rng() % 10 < 7) ? truth[i] : rng() % 2100;
  }
  auto nmi = NormalizedMutualInfo(truth, pred);
  auto ari = AdjustedRandIndex(truth, pred);
  auto acc = ClusteringAccuracy(truth, pred);
  ASSERT_TRUE(nmi.ok() && ari.ok() && acc.ok());
  // Expected values from the plain formulas (long double sums).
  const Table t = MakeTable(truth, pred);
  EXPECT_NEAR(*nmi, PlainNmi(t), 1e-9);
  EXPECT_NEAR(*ari, PlainAri(t), 1e-9);
  // Identity matching is optimal here: the diagonal dominates every row.
  double diag = 0;
  for (const auto& [r, row] : t.cell) {
    auto it = row.find(r);
    if (it != row.end()) diag += it->second;
  }
  EXPECT_NEAR(*acc, diag / t.n, 1e-12);
}

double AssignmentCost(const std::vector<double>& cost, int m, const std::vector<int32_t>& a) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] >= 0) s += cost[i * m + a[i]];
  }
  return s;
}

TEST(AssignmentTest, MatchesExhaustiveSearch) {
  std::mt19937 rng(99);
  std::uniform_real_distribution<double> u(-10, 10);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 6);
    const int m = 1 + static_cast<int>(rng() % 6);
    std::vector<double> cost(n * m);
    for (double& x : cost) x = trial % 3 == 0 ? std::round(u(rng)) : u(rng);  // ties too
    const std::vector<int32_t> a = SolveAssignment(cost, n, m);
    ASSERT_EQ(a.size(), static_cast<size_t>(n));
    // Valid: distinct columns, exactly min(n, m) rows assigned.
    std::vector<int> seen(m, 0);
    int assigned = 0;
    for (int32_t c : a) {
      if (c < 0) continue;
      ASSERT_LT(c, m);
      EXPECT_EQ(++seen[c], 1);
      ++assigned;
    }
    EXPECT_EQ(assigned, std::min(n, m));
    // Optimal: enumerate all injections of the smaller side.
    double best = std::numeric_limits<double>::infinity();
    std::vector<int> cols(m);
    std::iota(cols.begin(), cols.end(), 0);
    if (n <= m) {
      do {
        double s = 0;
        for (int i = 0; i < n; ++i) s += cost[i * m + cols[i]];
        best = std::min(best, s);
      } while (std::next_permutation(cols.begin(), cols.end()));
    } else {
      std::vector<int> rows(n);
      std::iota(rows.begin(), rows.end(), 0);
      do {
        double s = 0;
        for (int j = 0; j < m; ++j) s += cost[rows[j] * m + j];
        best = std::min(best, s);
      } while (std::next_permutation(rows.begin(), rows.end()));
    }
    EXPECT_NEAR(AssignmentCost(cost, m, a), best, 1e-9);
  }
}

TEST(AssignmentTest, RejectsMalformedInput) {
  EXPECT_TRUE(SolveAssignment({1, 2, 3}, 2, 2).empty());
  EXPECT_TRUE(SolveAssignment({1, std::nan(""), 3, 4}, 2, 2).empty());
  EXPECT_EQ(SolveAssignment({}, 0, 3).size(), 0u);
  // A 300 x 300 problem with a known optimum (a permuted diagonal of -1s
  // among zeros) finishes quickly.
  const int n = 300;
  std::vector<int> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(1));
  std::vector<double> cost(n * n, 0.0);
  for (int i = 0; i < n; ++i) cost[i * n + perm[i]] = -1.0;
  const std::vector<int32_t> a = SolveAssignment(cost, n, n);
  for (int i = 0; i < n; ++i) EXPECT_EQ(a[i], perm[i]);
}

}  // namespace
}  // namespace dendro
