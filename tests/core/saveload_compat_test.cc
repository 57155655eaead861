// Models stored by earlier builds keep loading. tests/data/models_v1/ holds
// one small model directory per method (t-NEB, gHHC, hierarchical PPCA),
// written by the version-1 savers as they stood before the model files moved
// onto core/io/model_artifact.h. Each must load, give back the values it was
// built from, and save again to the same files: .npy bytes identical, JSON
// documents equal (same fields, same number types).
//
// The fixtures were written by the disabled test below:
//   saveload_compat_test --gtest_also_run_disabled_tests
//                        --gtest_filter='*WriteFixtures*'
// Rewriting them with a later build would no longer test old files; do so
// only for a new format version (into a new directory).
// (Links the whole core: the model I/O uses dendro_io.)
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/common/run_context.h"
#include "core/ghhc/ghhc.h"
#include "core/hierarchy/export.h"
#include "core/hppca/hppca.h"
#include "core/hppca/synthetic.h"
#include "core/io/atomic_file.h"
#include "core/tneb/tneb.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/source_path.h"
#include "tests/temp_dir.h"

namespace dendro {
namespace {

namespace fs = std::filesystem;

std::string FixtureDir(const std::string& method) {
  return SourcePath("tests/data/models_v1/") + method;
}

// Standardised, with one Gaussian component (infinite dof: null in JSON).
TnebModel TnebFixture() {
  RowMatrixD means(3, 2);
  means << 0, 0, 5, 1, -3, 4;
  std::vector<Eigen::MatrixXd> scales(3, Eigen::MatrixXd::Identity(2, 2));
  scales[1](0, 1) = scales[1](1, 0) = 0.3;
  scales[2](1, 1) = 2.5;
  auto mix = StudentMixture::Create({0.5, 0.25, 0.25}, means, scales,
                                    {4.5, std::numeric_limits<double>::infinity(), 30.0});
  EXPECT_TRUE(mix.ok()) << mix.status();
  FeatureTransform t;
  t.center = {1.0, -2.0};
  t.scale = {2.0, 0.5};
  return TnebModel{*std::move(mix), t, {0, 2, 3}, 1.25};
}

// With a 3 x 2 projection.
GhhcModel GhhcFixture() {
  GhhcModel m;
  m.dim = 3;
  m.center = true;
  m.point_norm = 0.9;
  m.mean = {0.5, -0.5, 0.25};
  m.projection = {1, 0, 0, 1, 0.5, 0.5};
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t c = 0; c < 2; ++c) m.nodes.push_back(0.1 * (r + 1) * (c % 2 ? -1 : 1));
  }
  m.node_leaf = {0, -1, 1};
  m.node_parent = {1, -1, 1};
  return m;
}

// Two super-classes of three classes, with point_leaf and a metadata entry
// added after the fit.
absl::StatusOr<HppcaModel> HppcaFixture() {
  TwoLevelSpec spec;
  spec.groups = 2;
  spec.classes_per_group = 3;
  spec.dim = 5;
  spec.group_rank = 2;
  spec.class_rank = 2;
  const TwoLevelGenerator gen(spec);
  const LabelledData data = gen.Sample(12, 3);
  HppcaOptions o;
  o.q = 2;
  o.r = 2;
  o.superclasses = 2;
  o.num_threads = 1;
  o.seed = 11;
  NullRunContext ctx;
  auto model = FitHppca(MatrixView(data.x.data(), data.x.rows(), data.x.cols()), data.labels, o,
                        ctx);
  if (model.ok()) model->mutable_metadata()["note"] = "added after the fit";
  return model;
}

TEST(SaveLoadCompatTest, DISABLED_WriteFixtures) {
  for (const char* m : {"tneb", "ghhc", "hppca"}) {
    fs::remove_all(FixtureDir(m));
    fs::create_directories(FixtureDir(m));
  }
  ASSERT_TRUE(SaveTnebModel(TnebFixture(), FixtureDir("tneb")).ok());
  ASSERT_TRUE(SaveGhhcModel(GhhcFixture(), FixtureDir("ghhc")).ok());
  auto hppca = HppcaFixture();
  ASSERT_TRUE(hppca.ok()) << hppca.status();
  ASSERT_TRUE(hppca->Save(FixtureDir("hppca")).ok());
}

std::set<std::string> FileNames(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

std::string Read(const std::string& path) {
  std::string s;
  EXPECT_TRUE(ReadFileToString(path, &s).ok()) << path;
  return s;
}

// `fresh` holds the same files as `fixture`, with the same contents, except
// for the JSON members the format gained since the fixture was written:
// `gained` maps a file name to a merge patch (RFC 7396) of those members,
// with the values an old model must read as.
void ExpectSameFiles(const std::string& fixture, const std::string& fresh,
                     const std::map<std::string, nlohmann::json>& gained = {}) {
  ASSERT_EQ(FileNames(fixture), FileNames(fresh));
  for (const std::string& name : FileNames(fixture)) {
    SCOPED_TRACE(name);
    const std::string a = Read(fixture + "/" + name);
    const std::string b = Read(fresh + "/" + name);
    if (fs::path(name).extension() == ".json") {
      // Same members, values and number types; whitespace may differ.
      nlohmann::json want = nlohmann::json::parse(a);
      if (auto it = gained.find(name); it != gained.end()) want.merge_patch(it->second);
      EXPECT_EQ(want.dump(), nlohmann::json::parse(b).dump());
    } else {
      EXPECT_TRUE(a == b) << "bytes differ";
    }
  }
}

TEST(SaveLoadCompatTest, TnebVersion1) {
  auto loaded = LoadTnebModel(FixtureDir("tneb"));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const TnebModel want = TnebFixture();
  const StudentMixture& a = want.mixture;
  const StudentMixture& b = loaded->mixture;
  ASSERT_EQ(a.num_components(), b.num_components());
  EXPECT_EQ(a.weights(), b.weights());
  EXPECT_EQ(a.means(), b.means());
  EXPECT_EQ(a.dof(), b.dof());
  EXPECT_TRUE(std::isinf(b.dof()[1]));
  for (int k = 0; k < a.num_components(); ++k) EXPECT_EQ(a.scale(k), b.scale(k));
  EXPECT_EQ(loaded->transform.center, want.transform.center);
  EXPECT_EQ(loaded->transform.scale, want.transform.scale);
  EXPECT_EQ(loaded->original_component, want.original_component);
  EXPECT_EQ(loaded->height_offset, want.height_offset);
  const ScopedTempDir tmp("saveload_compat_tneb_");
  const std::string& dir = tmp.path();
  ASSERT_TRUE(SaveTnebModel(*loaded, dir).ok());
  ExpectSameFiles(FixtureDir("tneb"), dir);
}

TEST(SaveLoadCompatTest, GhhcVersion1) {
  auto loaded = LoadGhhcModel(FixtureDir("ghhc"));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const GhhcModel want = GhhcFixture();
  EXPECT_EQ(loaded->dim, want.dim);
  EXPECT_EQ(loaded->center, want.center);
  EXPECT_EQ(loaded->point_norm, want.point_norm);
  EXPECT_EQ(loaded->mean, want.mean);
  EXPECT_EQ(loaded->projection, want.projection);
  EXPECT_EQ(loaded->nodes, want.nodes);
  EXPECT_EQ(loaded->node_leaf, want.node_leaf);
  EXPECT_EQ(loaded->node_parent, want.node_parent);
  const ScopedTempDir tmp("saveload_compat_ghhc_");
  const std::string& dir = tmp.path();
  ASSERT_TRUE(SaveGhhcModel(*loaded, dir).ok());
  ExpectSameFiles(FixtureDir("ghhc"), dir);
}

TEST(SaveLoadCompatTest, HppcaVersion1) {
  auto loaded = HppcaModel::Load(FixtureDir("hppca"));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->num_classes(), 6);
  EXPECT_EQ(loaded->num_superclasses(), 2);
  EXPECT_EQ(loaded->dim(), 5);
  EXPECT_EQ(loaded->options().seed, 11u);
  EXPECT_EQ(loaded->hierarchy().metadata().at("note"), "added after the fit");
  EXPECT_FALSE(loaded->hierarchy().point_leaf().empty());
  // Written before the scoring option: it predicts hierarchically by
  // default, as it did then.
  EXPECT_EQ(loaded->options().scoring, HppcaScoring::kHierarchical);
  EXPECT_FALSE(loaded->default_flat());
  // Everything Save writes comes from what Load read: saving again gives
  // the fixture's files, plus the scoring option and what it implies.
  const ScopedTempDir tmp("saveload_compat_hppca_");
  const std::string& dir = tmp.path();
  ASSERT_TRUE(loaded->Save(dir).ok());
  const HppcaPredictCost cost = loaded->predict_cost();
  ExpectSameFiles(
      FixtureDir("hppca"), dir,
      {{"hppca.json", {{"options", {{"scoring", "hierarchical"}}}}},
       {"tree.json",
        {{"metadata",
          {{"scoring", "hierarchical"},
           {"default_scoring", "hierarchical"},
           {"predict_cost_flat", absl::StrFormat("%.0f", cost.flat)},
           {"predict_cost_hierarchical", absl::StrFormat("%.0f", cost.hierarchical)}}}}}});
}

}  // namespace
}  // namespace dendro
