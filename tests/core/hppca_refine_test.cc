// Hierarchical PPCA's refined tree: hierarchy() is the binary refinement of
// the classes -> super-classes -> root tree (coarse_hierarchy()) by average
// linkage on the squared Euclidean distance between class means and
// super-class centroid means; Load rebuilds it, whatever tree.json holds.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "core/common/run_context.h"
#include "core/hierarchy/export.h"
#include "core/hppca/hppca.h"
#include "core/hppca/synthetic.h"
#include "core/io/atomic_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/refine_test_util.h"

namespace dendro {
namespace {

using refine_test::ExpectEveryCut;
using refine_test::LeafSet;

MatrixView View(const RowMatrixF& m) { return MatrixView(m.data(), m.rows(), m.cols()); }

TwoLevelSpec Spec() {
  TwoLevelSpec spec;
  spec.groups = 5;
  spec.classes_per_group = 6;
  spec.dim = 16;
  spec.group_rank = 3;
  spec.class_rank = 3;
  spec.group_spread = 0.8;
  spec.class_spread = 0.15;
  spec.class_scale = 0.3;
  spec.noise = 0.15;
  return spec;
}

class HppcaRefineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("dendro_hppca_refine_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(HppcaRefineTest, RefinedTreeKeepsSuperclassesAndReachesEveryK) {
  const TwoLevelGenerator gen(Spec());
  const LabelledData train = gen.Sample(20, 3);
  NullRunContext ctx;
  HppcaOptions o;
  o.q = 4;
  o.r = 4;
  o.superclasses = 5;
  auto model = FitHppca(View(train.x), train.labels, o, ctx);
  ASSERT_TRUE(model.ok()) << model.status();
  const Hierarchy& r = model->hierarchy();
  const Hierarchy& c = model->coarse_hierarchy();
  EXPECT_FALSE(c.is_binary());
  ExpectEveryCut(r);
  EXPECT_TRUE(refine_test::AllMergeHeightsDistinct(r));
  EXPECT_EQ(r.num_leaves(), model->num_classes());
  // Leaves are named by their class labels, in both trees.
  ASSERT_EQ(r.leaf_names().size(), static_cast<size_t>(model->num_classes()));
  for (int32_t k = 0; k < model->num_classes(); ++k) {
    EXPECT_EQ(r.leaf_names()[k], std::to_string(model->labels()[k]));
  }
  EXPECT_EQ(c.leaf_names(), r.leaf_names());
  EXPECT_EQ(r.point_leaf(), c.point_leaf());
  EXPECT_EQ(r.height(r.root()), c.height(c.root()));
  EXPECT_EQ(r.metadata().at("method"), "hppca");
  EXPECT_EQ(r.metadata().count("refined"), 1u);
  EXPECT_EQ(c.metadata().count("refined"), 0u);
  std::set<std::vector<int32_t>> clusters;
  for (int32_t v = 0; v < r.num_nodes(); ++v) clusters.insert(LeafSet(r, v));
  for (int32_t v = 0; v < c.num_nodes(); ++v) EXPECT_EQ(clusters.count(LeafSet(c, v)), 1u);
  for (int32_t s = 0; s < model->num_superclasses(); ++s) {
    const auto members = model->superclass_members(s);
    const std::vector<int32_t> want(members.begin(), members.end());
    if (members.size() < 2) {
      EXPECT_EQ(model->superclass_node(s), -1);
      continue;
    }
    ASSERT_GE(model->superclass_node(s), r.num_leaves());
    EXPECT_EQ(LeafSet(r, model->superclass_node(s)), want);
    EXPECT_EQ(LeafSet(c, model->superclass_coarse_node(s)), want);
    // Inside a super-class the closest pair of class means merges first.
    if (members.size() < 3) continue;
    double best = -1;
    int32_t ba = -1, bb = -1;
    for (size_t i = 0; i < members.size(); ++i) {
      for (size_t j = i + 1; j < members.size(); ++j) {
        const double d2 = (model->class_mean(members[i]) - model->class_mean(members[j])).squaredNorm();
        if (best < 0 || d2 < best) {
          best = d2;
          ba = members[i];
          bb = members[j];
        }
      }
    }
    EXPECT_EQ(r.parent(ba), r.parent(bb)) << "super-class " << s;
  }
  // Flat: one root with every class; refined into K - 1 merges below 1.
  o.superclasses = kFlatClassifier;
  auto flat = FitHppca(View(train.x), train.labels, o, ctx);
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ(flat->coarse_hierarchy().num_internal(), 1);
  ExpectEveryCut(flat->hierarchy());
  EXPECT_TRUE(refine_test::AllMergeHeightsDistinct(flat->hierarchy()));
  EXPECT_EQ(flat->hierarchy().height(flat->hierarchy().root()), 1.0);
}

TEST_F(HppcaRefineTest, LoadRebuildsTheSameRefinedTree) {
  const TwoLevelGenerator gen(Spec());
  const LabelledData train = gen.Sample(15, 4);
  NullRunContext ctx;
  HppcaOptions o;
  o.q = 4;
  o.r = 4;
  o.superclasses = 4;
  auto model = FitHppca(View(train.x), train.labels, o, ctx);
  ASSERT_TRUE(model.ok()) << model.status();
  model->mutable_metadata()["note"] = "added after the fit";
  ASSERT_TRUE(model->Save(dir_.string()).ok());
  auto check = [&](const HppcaModel& loaded) {
    EXPECT_EQ(ToJson(loaded.hierarchy()), ToJson(model->hierarchy()));
    EXPECT_EQ(loaded.coarse_hierarchy().num_nodes(), model->coarse_hierarchy().num_nodes());
    for (int32_t v = 0; v < model->coarse_hierarchy().num_nodes(); ++v) {
      EXPECT_EQ(loaded.coarse_hierarchy().parent(v), model->coarse_hierarchy().parent(v));
    }
    EXPECT_EQ(loaded.coarse_hierarchy().metadata().at("note"), "added after the fit");
    EXPECT_EQ(loaded.coarse_hierarchy().metadata().count("refined"), 0u);
    for (int32_t s = 0; s < model->num_superclasses(); ++s) {
      EXPECT_EQ(loaded.superclass_node(s), model->superclass_node(s));
      EXPECT_EQ(loaded.superclass_coarse_node(s), model->superclass_coarse_node(s));
    }
  };
  auto loaded = HppcaModel::Load(dir_.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  check(*loaded);
  // A model saved before refinement existed: tree.json holds the coarse
  // tree. Load still builds the same refined tree.
  Hierarchy old_tree = *ParseJson(ToJson(model->coarse_hierarchy(), false));
  old_tree.mutable_metadata()["note"] = "added after the fit";
  ASSERT_TRUE(WriteFileAtomic((dir_ / "tree.json").string(), ToJson(old_tree, false)).ok());
  auto old = HppcaModel::Load(dir_.string());
  ASSERT_TRUE(old.ok()) << old.status();
  check(*old);
}

}  // namespace
}  // namespace dendro
