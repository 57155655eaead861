// t-NEB quality on the five 2-D datasets of the paper's Figure 4, on two
// fresh draws of its varied-density recipe and on one 32-D Densired set
// (ctest label "quality"; about a minute on 2 cores, so not in the unit
// tests).
//
// Data: tests/golden/tneb/fig4_*.npy, written by gen_fig4_sets.py with the
// authors' scikit-learn construction (1,000 points each), and
// fig4_varied_rs{1,3}_*.npy and fig4_blobs_rs2_*.npy, the varied-density
// and blobs recipes with make_blobs random_state 1, 3 and 2
// (tests/bench/tneb_fig4_draws.py); densired_studt_32d_seed3_*.npy, a copy
// of the Densired Stud-t set (Jahn et al. 2024 generator, the paper's
// settings, generator seed 3) the issue-12 report uses. Settings: the
// authors' for these sets (15 components, nu = 1 fixed, raw features),
// everything else at Dendro's defaults; seeds vary the fit (as the paper's
// "best of ten runs"), not the data. Criterion (issue 4): ARI at the true k
// >= 0.95 for at least 8 of 10 seeds.
//
// Varied density is the exception. Its broad cluster (std 2.5) overlaps a
// neighbour, and even the Bayes-optimal assignment under the true
// generating model has ARI 0.944 on this sample, so 0.95 is out of reach for
// any method that does not overfit. The paper reports 0.92 (best of ten)
// with nu fixed; with EM run to tolerance 1e-4 we measured 0.90-0.92 on
// every seed (best 0.916), so the test asks for a median >= 0.88 and a best
// >= 0.90 with nu = 1, and >= 0.92 for 8 of 10 seeds with nu learned
// (measured 0.947-0.953).
//
// Issue 12 (regression guard for the EM and merge fixes): with the paper's
// density merge order, every fresh varied draw scored 0.54-0.57 for every
// seed, and the golden draw 0.54 with EM stopped at tolerance 0.01 (a
// low-density tail component of the broad blob is cut off as a cluster
// before the two touching blobs separate). Persistence merging (the
// default) and EM run towards convergence give 0.77-0.92; the thresholds
// below sit between the two.
#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "core/io/npy.h"
#include "core/metrics/metrics.h"
#include "core/tneb/tneb.h"
#include "gtest/gtest.h"
#include "tests/source_path.h"

namespace dendro {
namespace {

struct Dataset {
  NpyArrayF32 x;
  std::vector<int64_t> y;
  int true_k = 0;
};

// tests/golden/tneb/NAME_{X,y}.npy
Dataset Load(const std::string& name) {
  const std::string base = SourcePath("tests/golden/tneb/") + name;
  Dataset d;
  auto x = ReadNpyFloat32(base + "_X.npy");
  auto y = ReadNpyInt(base + "_y.npy");
  EXPECT_TRUE(x.ok() && y.ok()) << base;
  if (!x.ok() || !y.ok()) return d;
  d.x = *std::move(x);
  d.y = std::move(y->data);
  d.true_k = static_cast<int>(std::set<int64_t>(d.y.begin(), d.y.end()).size());
  return d;
}

// ARI at the true k of each seed's fit (seeds 0..seeds-1); `gaussian_fits`, if given, counts
// the fits that kept Gaussian components.
std::vector<double> Aris(const Dataset& d, TnebOptions o, const std::string& label,
                         int seeds = 10, int* gaussian_fits = nullptr) {
  std::vector<double> out;
  const int64_t n = d.x.shape[0];
  for (int seed = 0; seed < seeds; ++seed) {
    o.seed = static_cast<uint64_t>(seed);
    NullRunContext ctx;
    auto r = FitTneb(MatrixView(d.x.data.data(), n, d.x.shape[1]), o, ctx);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) {
      out.push_back(-1.0);
      continue;
    }
    if (gaussian_fits != nullptr) *gaussian_fits += r->gaussian;
    auto cut = TnebCutToK(r->hierarchy, d.true_k);
    EXPECT_TRUE(cut.ok()) << cut.status();
    if (!cut.ok()) {
      out.push_back(-1.0);
      continue;
    }
    std::vector<int64_t> pred(n);
    for (int64_t i = 0; i < n; ++i) pred[i] = (*cut)[r->hierarchy.point_leaf()[i]];
    out.push_back(*AdjustedRandIndex(d.y, pred));
  }
  std::printf("%-14s", label.c_str());
  for (double a : out) std::printf(" %.4f", a);
  std::printf("\n");
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

int AtLeast(const std::vector<double>& v, double t) {
  return static_cast<int>(std::count_if(v.begin(), v.end(), [t](double a) { return a >= t; }));
}

// Thresholds (see the header comment).
constexpr double kVariedMedian = 0.88;
constexpr double kVariedBest = 0.90;
constexpr double kFreshMedian = 0.80;
constexpr double kDefaultBlobsMedian = 0.75;
constexpr double kDefaultVariedMedian = 0.94;
constexpr double kDefaultHighDimensionMedian = 0.80;

TnebOptions AuthorsSettings() {
  TnebOptions o;
  o.components = 15;
  o.auto_dof_low_dimension = false;  // nu = 1 fixed, as the authors run these sets
  return o;
}

class Figure4 : public ::testing::TestWithParam<std::string> {};

TEST_P(Figure4, AriAtTrueKForEightOfTenSeeds) {
  const Dataset d = Load("fig4_" + GetParam());
  ASSERT_GT(d.true_k, 1);
  const std::vector<double> aris = Aris(d, AuthorsSettings(), GetParam());
  EXPECT_GE(AtLeast(aris, 0.95), 8);
}

INSTANTIATE_TEST_SUITE_P(Tneb, Figure4,
                         ::testing::Values("noisy_circles", "noisy_moons", "blobs", "aniso"));

TEST(Figure4Varied, PaperFigureAndLearnedDof) {
  const Dataset d = Load("fig4_varied");
  ASSERT_EQ(d.true_k, 3);
  const std::vector<double> fixed = Aris(d, AuthorsSettings(), "varied nu=1");
  EXPECT_GE(Median(fixed), kVariedMedian);
  EXPECT_GE(*std::max_element(fixed.begin(), fixed.end()), kVariedBest);
  TnebOptions o = AuthorsSettings();
  o.learn_dof = true;
  const std::vector<double> learned = Aris(d, o, "varied learned");
  EXPECT_GE(AtLeast(learned, 0.92), 8);
}

// Fresh draws of the varied-density recipe (issue 12), nu = 1, five seeds.
class FreshVaried : public ::testing::TestWithParam<std::string> {};

TEST_P(FreshVaried, MedianAriAboveTheTailFailure) {
  const Dataset d = Load("fig4_" + GetParam());
  ASSERT_EQ(d.true_k, 3);
  const std::vector<double> aris = Aris(d, AuthorsSettings(), GetParam(), 5);
  EXPECT_GE(Median(aris), kFreshMedian);
}

INSTANTIATE_TEST_SUITE_P(Tneb, FreshVaried, ::testing::Values("varied_rs1", "varied_rs3"));

// The default in two dimensions chooses the components' tails by BIC among
// nu = 1, nu learned and Gaussian (beyond the paper; raw features, five
// seeds; BIC keeps the Gaussian fit on these Gaussian blobs). On blobs
// random_state 2, two of the three centres are 3.3 standard deviations apart
// and nu = 1 merges those two blobs (measured median 0.563); the default
// separates them (0.871; learned nu alone gave 0.855). On the golden varied
// draw it gives 0.959 (learned nu 0.950-0.953, nu = 1 0.899-0.916).
TEST(DefaultDof, ChosenByBicInTwoDimensions) {
  TnebOptions o;
  o.components = 15;
  const Dataset blobs = Load("fig4_blobs_rs2");
  ASSERT_EQ(blobs.true_k, 3);
  int gaussian = 0;
  EXPECT_GE(Median(Aris(blobs, o, "blobs_rs2 default", 5, &gaussian)), kDefaultBlobsMedian);
  EXPECT_EQ(gaussian, 5);
  const Dataset varied = Load("fig4_varied");
  gaussian = 0;
  EXPECT_GE(Median(Aris(varied, o, "varied default", 5, &gaussian)), kDefaultVariedMedian);
  EXPECT_EQ(gaussian, 5);
}

// Above 10 columns the default runs 4 EM restarts and keeps the one whose
// surviving components fit best (beyond the authors, who run one). On
// Densired Stud-t 32-D generator seed 3 (standardised, as the paper runs
// Densired) single fits split between ARI about 0.70 and 0.88; with one
// restart the median over 10 seeds was 0.723, with the default 0.875
// (seeds 0-2: 0.878, 0.867, 0.877).
TEST(HighDimension, RestartsRankedBySurvivorsOnDensiredStudT32) {
  TnebOptions o;
  o.standardize = true;
  const Dataset d = Load("densired_studt_32d_seed3");
  ASSERT_EQ(d.true_k, 6);
  ASSERT_EQ(d.x.shape[1], 32);
  EXPECT_GE(Median(Aris(d, o, "studt_32d_seed3 default", 3)), kDefaultHighDimensionMedian);
}

}  // namespace
}  // namespace dendro
