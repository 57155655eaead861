// gHHC fidelity on scikit-learn's digits (1,797 x 64, 10 classes) in the
// paper's setting (64 internal nodes, section 6.1, Table 1: 0.675), a gtest
// binary registered with ctest under the label "quality" only:
//   ctest --test-dir build -L quality -R Ghhc
// The data are tests/golden/ghhc/digits_{x,y}.npy, written by
// tests/golden/ghhc/gen_ghhc_goldens.py (tests/bench/ghhc_real_sets.py
// writes the same arrays). Dendrogram purity is that of the extracted
// (coarse) tree, the paper's evaluation. About 15 s of CPU on one core.
// The synthetic longer-training test at the end adds about 10 s.
#include <algorithm>
#include <string>
#include <vector>

#include "core/common/run_context.h"
#include "core/ghhc/ghhc.h"
#include "core/ghhc/synthetic.h"
#include "core/io/npy.h"
#include "core/metrics/metrics.h"
#include "gtest/gtest.h"
#include "tests/source_path.h"

namespace dendro {
namespace {

const std::string kGolden = SourcePath("tests/golden/ghhc/");

// Coarse-tree dendrogram purity over seeds 1..5.
std::vector<double> PurityOverSeeds(const NpyArrayF32& x, const std::vector<int64_t>& y,
                                    GhhcOptions o) {
  std::vector<double> dp;
  NullRunContext ctx;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    o.seed = seed;
    o.num_threads = 1;
    auto r = FitGhhc(MatrixView(x.data.data(), x.shape[0], x.shape[1]), o, ctx);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    auto v = DendrogramPurity(r->coarse_hierarchy, {}, y);
    EXPECT_TRUE(v.ok()) << v.status();
    if (!v.ok()) return {};
    dp.push_back(*v);
  }
  return dp;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string Show(const std::vector<double>& v) {
  std::string s;
  for (double d : v) s += std::to_string(d) + " ";
  return s;
}

// Learned point embeddings (with the Gumbel noise off, see docs/methods.md)
// reach the paper's digits purity in the median over five seeds; with the
// points fixed, the paper's setting, the median stays below it.
TEST(GhhcDigitsQualityTest, LearnedPointsReachThePapersPurityAt64Nodes) {
  auto x = ReadNpyFloat32(kGolden + "digits_x.npy");
  auto y = ReadNpyInt(kGolden + "digits_y.npy");
  ASSERT_TRUE(x.ok() && y.ok());
  GhhcOptions fixed;
  fixed.internal_nodes = 64;
  fixed.choose_points_max_rows = 0;
  GhhcOptions learned = fixed;
  learned.learn_points = true;
  learned.gumbel_temperature = 0.0;
  const std::vector<double> a = PurityOverSeeds(*x, y->data, fixed);
  const std::vector<double> b = PurityOverSeeds(*x, y->data, learned);
  ASSERT_EQ(a.size(), 5u);
  ASSERT_EQ(b.size(), 5u);
  EXPECT_GE(Median(b), 0.675) << "learned points: " << Show(b);
  EXPECT_GT(Median(b), Median(a) + 0.05) << "fixed: " << Show(a) << " learned: " << Show(b);
}

// ghhc_bench's synthetic data at N = n (its --seed=1): the generator's tree
// with the points spread as the benchmark spreads them.
HierarchicalGaussianData BenchData(int64_t n) {
  HierarchicalGaussianSpec spec;
  spec.n = n;
  spec.point_scale = 0.35;  // as ghhc_bench
  return GenerateHierarchicalGaussian(spec);
}

MatrixView BenchView(const HierarchicalGaussianData& data) {
  const int64_t n = static_cast<int64_t>(data.leaf.size());
  return MatrixView(data.x.data(), n, static_cast<int64_t>(data.x.size()) / n);
}

// More training does not cost purity (issue 12: "never worse by more than
// 0.01"). The synthetic benchmark's data at N = 3,000, M = 300 (ghhc_bench
// --n=3000 --m=300): purity 0.779 at the default 200,000 triples; at
// 600,000 triples 0.781 with the step budget (the default) and 0.636 with
// the learning rate as given, keep-the-best included (ghhc_bench
// --step-budget=0), so the test fails without the budget. About 10 s of CPU.
double SyntheticPurity(int64_t triples) {
  const HierarchicalGaussianData data = BenchData(3000);
  GhhcOptions o;
  o.internal_nodes = 300;
  o.choose_points_max_rows = 0;  // one fit each (the budget scales the node steps of both)
  o.triples = triples;
  o.num_threads = 2;
  NullRunContext ctx;
  auto r = FitGhhc(BenchView(data), o, ctx);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return 0.0;
  auto v = DendrogramPurity(r->coarse_hierarchy, {}, data.leaf);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : 0.0;
}

TEST(GhhcLongerTrainingTest, TripleTheTriplesKeepsPurityWithinOneHundredth) {
  const double base = SyntheticPurity(kGhhcDefaultTriples);
  const double longer = SyntheticPurity(3 * kGhhcDefaultTriples);
  EXPECT_GE(longer, base - 0.01) << "default length " << base;
}

// The default options choose the points by validation on inputs this small
// (choose_points_max_rows), and pick the variant with the better purity on
// both kinds of data: the learned points on digits, the fixed ones on the
// synthetic benchmark at N = 2,000, M = 100 (ghhc_bench --n=2000 --m=100:
// purity 0.43-0.49 fixed, 0.32-0.37 learned over seeds 1-3). Seed 1 of each
// (two seeds each took a minute under the sanitizers in CI); docs/methods.md
// has the other seeds.
TEST(GhhcChoosePointsTest, LearnedOnDigitsFixedOnTheGaussianTree) {
  auto x = ReadNpyFloat32(kGolden + "digits_x.npy");
  auto y = ReadNpyInt(kGolden + "digits_y.npy");
  ASSERT_TRUE(x.ok() && y.ok());
  NullRunContext ctx;
  GhhcOptions o;  // the defaults but M
  o.internal_nodes = 64;
  o.num_threads = 2;
  auto digits = FitGhhc(MatrixView(x->data.data(), x->shape[0], x->shape[1]), o, ctx);
  ASSERT_TRUE(digits.ok()) << digits.status();
  EXPECT_EQ(digits->hierarchy.metadata().at("points_chosen_by"), "validation");
  EXPECT_EQ(digits->hierarchy.metadata().at("learn_points"), "true");
  EXPECT_GE(DendrogramPurity(digits->coarse_hierarchy, {}, y->data).value(), 0.675);

  const HierarchicalGaussianData data = BenchData(2000);  // ghhc_bench --n=2000 --m=100
  o.internal_nodes = 100;
  auto tree = FitGhhc(BenchView(data), o, ctx);
  ASSERT_TRUE(tree.ok()) << tree.status();
  EXPECT_EQ(tree->hierarchy.metadata().at("points_chosen_by"), "validation");
  EXPECT_EQ(tree->hierarchy.metadata().at("learn_points"), "false");
}

}  // namespace
}  // namespace dendro
