// gHHC's served tree: FitGhhc returns the extracted n-ary tree
// (coarse_hierarchy) and, as `hierarchy`, either Ward's tree over the leaf
// clusters (the default) or the binary refinement of the node tree by
// average linkage on the Poincaré distance between node embeddings;
// GhhcModelTrees rebuilds both from a saved model, whichever tree tree.json
// holds.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "core/common/run_context.h"
#include "core/ghhc/ghhc.h"
#include "core/ghhc/synthetic.h"
#include "core/hierarchy/export.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/refine_test_util.h"

namespace dendro {
namespace {

using refine_test::LeafSet;

using ::testing::HasSubstr;

// Binary, every k reachable by CutToK, and (SciPy's maxclust condition)
// all merge heights distinct; every coarse cluster is a refined cluster.
void ExpectRefinementOf(const Hierarchy& refined, const Hierarchy& coarse) {
  ASSERT_EQ(refined.num_leaves(), coarse.num_leaves());
  EXPECT_TRUE(refined.is_binary());
  std::vector<int32_t> all(refined.num_leaves());
  std::iota(all.begin(), all.end(), 1);
  EXPECT_EQ(refined.ReachableLevels(), all);
  for (int32_t k = 1; k <= refined.num_leaves(); ++k) {
    EXPECT_TRUE(refined.CutToK(k).ok()) << "k = " << k;
  }
  std::vector<double> heights;
  for (const Merge& m : refined.ToMerges()) heights.push_back(m.height);
  std::sort(heights.begin(), heights.end());
  EXPECT_EQ(std::adjacent_find(heights.begin(), heights.end()), heights.end());
  std::set<std::vector<int32_t>> clusters;
  for (int32_t v = 0; v < refined.num_nodes(); ++v) clusters.insert(LeafSet(refined, v));
  for (int32_t v = 0; v < coarse.num_nodes(); ++v) {
    EXPECT_EQ(clusters.count(LeafSet(coarse, v)), 1u) << "coarse node " << v;
  }
  EXPECT_EQ(refined.height(refined.root()), coarse.height(coarse.root()));
  EXPECT_EQ(refined.point_leaf(), coarse.point_leaf());
  EXPECT_EQ(refined.metadata().count("refined"), 1u);
  EXPECT_EQ(coarse.metadata().count("refined"), 0u);
}

// A small fit: a three-level Gaussian tree of n points in dim columns.
absl::StatusOr<GhhcResult> SmallFit(int64_t n, int dim, std::array<int32_t, 3> branching,
                                    int32_t internal_nodes, GhhcOptions o = {}) {
  HierarchicalGaussianSpec spec;
  spec.n = n;
  spec.dim = dim;
  spec.branching = branching;
  const HierarchicalGaussianData data = GenerateHierarchicalGaussian(spec);
  NullRunContext ctx;
  o.internal_nodes = internal_nodes;
  o.triples = 3000;
  return FitGhhc(MatrixView(data.x.data(), spec.n, spec.dim), o, ctx);
}

class GhhcRefineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("dendro_ghhc_refine_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(GhhcRefineTest, FitGivesABinaryRefinementThatSaveLoadRebuilds) {
  GhhcOptions o;
  o.tree = GhhcTree::kNodes;
  auto r = SmallFit(600, 10, {2, 3, 4}, 40, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->model.leaf_size.empty());
  EXPECT_EQ(r->hierarchy.metadata().at("tree"), "nodes");
  const Hierarchy& coarse = r->coarse_hierarchy;
  EXPECT_FALSE(coarse.is_binary());  // what the refinement is for
  ExpectRefinementOf(r->hierarchy, coarse);
  EXPECT_EQ(r->hierarchy.metadata().at("method"), "ghhc");
  EXPECT_EQ(r->hierarchy.point_leaf().size(), 600u);

  ASSERT_TRUE(SaveGhhcModel(r->model, dir_.string()).ok());
  auto loaded = LoadGhhcModel(dir_.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  // From the model alone: the same shapes (no point_leaf or metadata).
  auto bare = GhhcModelTrees(*loaded);
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(bare->refined.ToMerges().size(), r->hierarchy.ToMerges().size());
  for (int32_t v = 0; v < r->hierarchy.num_nodes(); ++v) {
    EXPECT_EQ(bare->refined.parent(v), r->hierarchy.parent(v));
    EXPECT_EQ(bare->refined.height(v), r->hierarchy.height(v));
  }
  // tree.json as this version writes it (refined) and as older versions
  // wrote it (coarse): the same trees, down to the JSON.
  for (const Hierarchy* tree : {&r->hierarchy, &r->coarse_hierarchy}) {
    auto saved = ParseJson(ToJson(*tree));
    ASSERT_TRUE(saved.ok()) << saved.status();
    auto trees = GhhcModelTrees(*loaded, &*saved);
    ASSERT_TRUE(trees.ok()) << trees.status();
    EXPECT_EQ(ToJson(trees->refined), ToJson(r->hierarchy));
    EXPECT_EQ(ToJson(trees->coarse), ToJson(r->coarse_hierarchy));
  }
  // A tree.json of another shape is refused.
  std::vector<int32_t> parent(coarse.num_leaves() + 1, coarse.num_leaves());
  parent.back() = -1;
  std::vector<double> height(parent.size(), 0.0);
  height.back() = 1.0;
  auto star = Hierarchy::FromParents(coarse.num_leaves(), parent, height);
  ASSERT_TRUE(star.ok());
  EXPECT_THAT(GhhcModelTrees(*loaded, &*star).status().message(), HasSubstr("tree.json"));
}

// The default tree: Ward's criterion over the leaf clusters, from the sizes
// and mean unit directions the model keeps. Binary, every cut reachable,
// the extraction's leaves and point_leaf; rebuilt exactly after Save/Load;
// a model without the statistics (saved before them, or kNodes) serves the
// node tree's refinement.
TEST_F(GhhcRefineTest, DefaultTreeIsWardOverTheLeafClusters) {
  auto r = SmallFit(600, 10, {2, 3, 4}, 40);
  ASSERT_TRUE(r.ok()) << r.status();
  const Hierarchy& tree = r->hierarchy;
  const int32_t leaves = r->coarse_hierarchy.num_leaves();
  ASSERT_EQ(tree.num_leaves(), leaves);
  EXPECT_TRUE(tree.is_binary());
  std::vector<int32_t> all(leaves);
  std::iota(all.begin(), all.end(), 1);
  EXPECT_EQ(tree.ReachableLevels(), all);
  EXPECT_EQ(tree.point_leaf(), r->coarse_hierarchy.point_leaf());
  EXPECT_EQ(tree.metadata().at("tree"), "ward");
  EXPECT_THAT(tree.metadata().at("refined"), HasSubstr("Ward"));

  // The statistics: each leaf's size is its number of training points, and
  // its mean a mean of unit vectors (norm <= 1, and > 0 for these tight
  // clusters; the placements are float32).
  ASSERT_EQ(r->model.leaf_size.size(), static_cast<size_t>(leaves));
  const int64_t d = r->model.ball_dim();
  ASSERT_EQ(r->model.leaf_mean.size(), static_cast<size_t>(leaves * d));
  std::vector<double> counted(leaves, 0.0);
  for (int32_t l : tree.point_leaf()) counted[l] += 1.0;
  EXPECT_EQ(r->model.leaf_size, counted);
  for (int32_t l = 0; l < leaves; ++l) {
    double sq = 0;
    for (int64_t c = 0; c < d; ++c)
      sq += r->model.leaf_mean[l * d + c] * r->model.leaf_mean[l * d + c];
    EXPECT_LE(std::sqrt(sq), 1.0 + 1e-5) << "leaf " << l;  // float32 placements
    EXPECT_GT(std::sqrt(sq), 0.2) << "leaf " << l;
  }

  ASSERT_TRUE(SaveGhhcModel(r->model, dir_.string()).ok());
  auto loaded = LoadGhhcModel(dir_.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->leaf_size, r->model.leaf_size);
  EXPECT_EQ(loaded->leaf_mean, r->model.leaf_mean);
  auto saved = ParseJson(ToJson(tree));
  ASSERT_TRUE(saved.ok()) << saved.status();
  auto trees = GhhcModelTrees(*loaded, &*saved);
  ASSERT_TRUE(trees.ok()) << trees.status();
  EXPECT_EQ(ToJson(trees->refined), ToJson(tree));
  EXPECT_EQ(ToJson(trees->coarse), ToJson(r->coarse_hierarchy));

  // Without the statistics: the node tree's refinement, as before them.
  GhhcModel old = *loaded;
  old.leaf_size.clear();
  old.leaf_mean.clear();
  auto node_trees = GhhcModelTrees(old);
  ASSERT_TRUE(node_trees.ok()) << node_trees.status();
  ExpectRefinementOf(node_trees->refined, node_trees->coarse);
  // Statistics for another number of leaves are refused.
  GhhcModel bad = *loaded;
  bad.leaf_size.pop_back();
  bad.leaf_mean.resize(bad.leaf_mean.size() - d);
  EXPECT_THAT(GhhcModelTrees(bad).status().message(), HasSubstr("Ward's statistics"));
}

// A model with learned point embeddings keeps the training points' fixed
// positions and leaves; Save/Load keeps them, and the loaded model assigns
// rows as the fitted one does. Older manifests (no train_points) load as
// models without them.
TEST_F(GhhcRefineTest, LearnedPointModelRoundTrips) {
  HierarchicalGaussianSpec spec;
  spec.n = 300;
  spec.dim = 6;
  spec.branching = {2, 2, 3};
  const HierarchicalGaussianData data = GenerateHierarchicalGaussian(spec);
  const MatrixView v(data.x.data(), spec.n, spec.dim);
  NullRunContext ctx;
  GhhcOptions o;
  o.internal_nodes = 20;
  o.triples = 3000;
  o.learn_points = true;
  auto r = FitGhhc(v, o, ctx);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(SaveGhhcModel(r->model, dir_.string()).ok());
  auto loaded = LoadGhhcModel(dir_.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->train_points, r->model.train_points);
  EXPECT_EQ(loaded->train_leaf, r->model.train_leaf);
  auto a = AssignGhhcLeaves(*loaded, v);
  auto b = AssignGhhcLeaves(r->model, v);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  // A leaf id beyond the model's leaves is refused.
  GhhcModel bad = r->model;
  bad.train_leaf[0] = 1 << 20;
  ASSERT_TRUE(SaveGhhcModel(bad, dir_.string()).ok());
  EXPECT_THAT(LoadGhhcModel(dir_.string()).status().message(),
              HasSubstr("ghhc_train_leaf.npy"));
  // Without learned points no such files or manifest field are written.
  // (Fixed points asked for: at 300 rows the default would choose between
  // fixed and learned points by held-out accuracy, and which wins depends on
  // the processor's floating-point path.)
  o.learn_points = false;
  o.choose_points_max_rows = 0;
  auto plain = FitGhhc(v, o, ctx);
  ASSERT_TRUE(plain.ok()) << plain.status();
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_);
  ASSERT_TRUE(SaveGhhcModel(plain->model, dir_.string()).ok());
  EXPECT_FALSE(std::filesystem::exists(dir_ / "ghhc_train_points.npy"));
  {
    std::ifstream manifest(dir_ / "ghhc_model.json");
    const std::string text((std::istreambuf_iterator<char>(manifest)),
                           std::istreambuf_iterator<char>());
    EXPECT_THAT(text, HasSubstr("internal_nodes"));
    EXPECT_THAT(text, ::testing::Not(HasSubstr("train_points")));  // as older versions wrote
  }
  auto loaded_plain = LoadGhhcModel(dir_.string());
  ASSERT_TRUE(loaded_plain.ok()) << loaded_plain.status();
  EXPECT_TRUE(loaded_plain->train_points.empty());
}

TEST(GhhcModelTreesTest, AgglomeratesChildrenByPoincareDistance) {
  // A root at the origin (no points) with four point-holding children, two
  // near (0.5, 0) and two near (-0.5, 0).
  GhhcModel m;
  m.dim = 2;
  m.point_norm = 0.9;
  m.mean = {0, 0};
  m.nodes = {0, 0, 0.5, 0.0, -0.5, 0.0, 0.5, 0.05, -0.5, 0.05};
  m.node_parent = {-1, 0, 0, 0, 0};
  m.node_leaf = {-1, 0, 1, 2, 3};
  auto t = GhhcModelTrees(m);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->coarse.num_internal(), 1);
  ASSERT_EQ(t->refined.num_internal(), 3);
  auto two = t->refined.CutToK(2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(*two, std::vector<int32_t>({0, 1, 0, 1}));  // leaves 0, 2 | 1, 3
  // The root keeps its height; the two pairs sit strictly below it.
  const double root_h = t->coarse.height(t->coarse.root());
  EXPECT_EQ(t->refined.height(t->refined.root()), root_h);
  EXPECT_LT(t->refined.height(4), root_h);
  EXPECT_GT(t->refined.height(4), 0.0);
  // node_leaf must number the point-holding nodes by index.
  m.node_leaf = {-1, 1, 0, 2, 3};
  EXPECT_THAT(GhhcModelTrees(m).status().message(), HasSubstr("node_leaf"));
}

}  // namespace
}  // namespace dendro
