// t-NEB model persistence: round trip, numpy-readable arrays, damaged
// files. (Links the whole core: the model I/O uses dendro_io.)
#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/io/atomic_file.h"
#include "core/io/npy.h"
#include "core/tneb/tneb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/temp_dir.h"

namespace dendro {
namespace {

using ::testing::HasSubstr;

struct Fitted {
  std::vector<float> x;
  int64_t n = 0;
  TnebResult result;
};

TnebResult Fit(const std::vector<float>& x, int64_t n, bool standardize, bool gaussian) {
  TnebOptions o;
  o.components = 6;
  o.restarts = 2;
  o.path_points = 30;
  o.path_steps = 30;
  o.eval_points = 128;
  o.standardize = standardize;
  o.gaussian = gaussian;
  // Unstandardised, each blob's scale matrix has an eigenvalue ratio of
  // about 50^2 = 2,500; EM run to convergence finds it, and the default
  // filter (500 x d = 1,500) would drop those components. This test is about
  // the round trip, not the filter.
  o.max_elongation = 5000.0;
  NullRunContext ctx;
  auto r = FitTneb(MatrixView(x.data(), n, 3), o, ctx);
  EXPECT_TRUE(r.ok()) << r.status();
  return *std::move(r);
}

std::vector<float> Data(int64_t n) {
  std::mt19937_64 rng(9);
  std::normal_distribution<double> nd;
  std::vector<float> x;
  for (int64_t i = 0; i < n; ++i) {
    const double c = (i % 3) * 8.0;
    x.push_back(static_cast<float>(c + nd(rng)));
    x.push_back(static_cast<float>(100.0 + 50.0 * nd(rng)));
    x.push_back(static_cast<float>(-c + nd(rng)));
  }
  return x;
}

TEST(TnebSaveLoad, RoundTripIsExact) {
  const int64_t n = 600;
  const std::vector<float> x = Data(n);
  for (bool gaussian : {false, true}) {
    SCOPED_TRACE(gaussian ? "gaussian" : "student-t");
    const TnebResult r = Fit(x, n, /*standardize=*/!gaussian, gaussian);
    const ScopedTempDir tmp(gaussian ? "tneb_saveload_g_" : "tneb_saveload_t_");
    const std::string& dir = tmp.path();
    ASSERT_TRUE(SaveTnebModel(r.model, dir).ok());
    auto back = LoadTnebModel(dir);
    ASSERT_TRUE(back.ok()) << back.status();
    const StudentMixture& a = r.model.mixture;
    const StudentMixture& b = back->mixture;
    ASSERT_EQ(a.num_components(), b.num_components());
    EXPECT_EQ(a.weights(), b.weights());
    EXPECT_EQ(a.means(), b.means());
    EXPECT_EQ(a.dof(), b.dof());
    for (int k = 0; k < a.num_components(); ++k) EXPECT_EQ(a.scale(k), b.scale(k));
    EXPECT_EQ(back->original_component, r.model.original_component);
    EXPECT_EQ(back->height_offset, r.model.height_offset);
    EXPECT_EQ(back->transform.center, r.model.transform.center);
    EXPECT_EQ(back->transform.scale, r.model.transform.scale);
    auto la = r.model.AssignLeaves(MatrixView(x.data(), n, 3));
    auto lb = back->AssignLeaves(MatrixView(x.data(), n, 3));
    ASSERT_TRUE(la.ok() && lb.ok());
    EXPECT_EQ(*la, *lb);
    EXPECT_EQ(*lb, r.hierarchy.point_leaf());

    // The arrays are plain float64 .npy files.
    auto means = ReadNpyFloat64(dir + "/tneb_means.npy");
    ASSERT_TRUE(means.ok());
    EXPECT_EQ(means->shape, (std::vector<int64_t>{a.num_components(), 3}));
    auto scales = ReadNpyFloat64(dir + "/tneb_scales.npy");
    ASSERT_TRUE(scales.ok());
    EXPECT_EQ(scales->shape, (std::vector<int64_t>{3 * a.num_components(), 3}));
    EXPECT_EQ(std::filesystem::exists(dir + "/tneb_center.npy"), !gaussian);
  }
}

// The diagnostics travel in tneb_diagnostics.json; a model saved without
// them (as before they existed) loads with k = 0, and a damaged file is a
// clear error.
TEST(TnebSaveLoad, DiagnosticsRoundTrip) {
  const int64_t n = 600;
  const std::vector<float> x = Data(n);
  const TnebResult r = Fit(x, n, /*standardize=*/true, /*gaussian=*/false);
  const TnebDiagnostics& d = r.model.diagnostics;
  ASSERT_GT(d.k, 0);
  EXPECT_EQ(d.surviving, r.hierarchy.num_leaves());
  const ScopedTempDir tmp("tneb_saveload_diag_");
  const std::string& dir = tmp.path();
  ASSERT_TRUE(SaveTnebModel(r.model, dir).ok());
  EXPECT_TRUE(std::filesystem::exists(dir + "/tneb_diagnostics.json"));
  auto back = LoadTnebModel(dir);
  ASSERT_TRUE(back.ok()) << back.status();
  const TnebDiagnostics& b = back->diagnostics;
  EXPECT_EQ(b.k, d.k);
  EXPECT_EQ(b.cluster_sizes, d.cluster_sizes);
  EXPECT_EQ(b.largest_share, d.largest_share);
  EXPECT_EQ(b.components, d.components);
  EXPECT_EQ(b.surviving, d.surviving);
  EXPECT_EQ(b.filtered_small, d.filtered_small);
  EXPECT_EQ(b.filtered_elongated, d.filtered_elongated);
  EXPECT_EQ(b.candidates, d.candidates);
  EXPECT_EQ(b.candidate_bic, d.candidate_bic);
  EXPECT_EQ(b.kept_candidate, d.kept_candidate);
  EXPECT_EQ(b.merge, d.merge);
  EXPECT_EQ(b.degenerate, d.degenerate);
  EXPECT_EQ(b.degenerate_reason, d.degenerate_reason);
  EXPECT_EQ(TnebDiagnosticsSummary(b), TnebDiagnosticsSummary(d));

  ASSERT_TRUE(WriteFileAtomic(dir + "/tneb_diagnostics.json", "{\"k\": 2}").ok());
  EXPECT_THAT(std::string(LoadTnebModel(dir).status().message()),
              HasSubstr("tneb_diagnostics.json"));
  std::filesystem::remove(dir + "/tneb_diagnostics.json");
  auto old = LoadTnebModel(dir);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->diagnostics.k, 0);
  EXPECT_TRUE(old->diagnostics.cluster_sizes.empty());
}

TEST(TnebSaveLoad, DamagedFilesAreClearErrors) {
  const int64_t n = 300;
  const std::vector<float> x = Data(n);
  const TnebResult r = Fit(x, n, false, false);
  const ScopedTempDir tmp("tneb_saveload_damaged_");
  const std::string& dir = tmp.path();
  ASSERT_TRUE(SaveTnebModel(r.model, dir).ok());

  EXPECT_FALSE(LoadTnebModel(dir + "/missing").ok());

  std::string json;
  ASSERT_TRUE(ReadFileToString(dir + "/tneb_model.json", &json).ok());
  ASSERT_TRUE(WriteFileAtomic(dir + "/tneb_model.json", "{not json").ok());
  EXPECT_THAT(std::string(LoadTnebModel(dir).status().message()), HasSubstr("not a JSON object"));
  ASSERT_TRUE(WriteFileAtomic(dir + "/tneb_model.json", json).ok());
  ASSERT_TRUE(LoadTnebModel(dir).ok());

  // One weight more than the model has components.
  const int64_t wrong_size = r.model.mixture.num_components() + 1;
  const std::vector<double> wrong(wrong_size, 0.2);
  const int64_t shape[1] = {wrong_size};
  ASSERT_TRUE(WriteNpy(dir + "/tneb_weights.npy", absl::MakeConstSpan(wrong), shape).ok());
  EXPECT_THAT(std::string(LoadTnebModel(dir).status().message()),
              HasSubstr("tneb_weights.npy: expected shape"));

  const int64_t l = r.model.mixture.num_components();
  std::vector<double> w(l, 0.0);
  w[0] = 1.0;
  const int64_t shape_l[1] = {l};
  ASSERT_TRUE(WriteNpy(dir + "/tneb_weights.npy", absl::MakeConstSpan(w), shape_l).ok());
  std::vector<double> scales(l * 9, 0.0);  // all-zero scale matrices
  const int64_t shape_s[2] = {l * 3, 3};
  ASSERT_TRUE(WriteNpy(dir + "/tneb_scales.npy", absl::MakeConstSpan(scales), shape_s).ok());
  EXPECT_THAT(std::string(LoadTnebModel(dir).status().message()),
              HasSubstr("not positive definite"));
}

}  // namespace
}  // namespace dendro
