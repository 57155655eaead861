// HPPCA end-to-end quality on a synthetic two-level class hierarchy:
// super-class recovery (ARI against the generating groups), accuracy as T
// grows, growing a model vs training on all classes at once, and Save/Load.
// Links the whole core (metrics, io).
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/hppca/hppca.h"
#include "core/hppca/synthetic.h"
#include "core/io/atomic_file.h"
#include "core/io/npy.h"
#include "core/metrics/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/temp_dir.h"

namespace dendro {
namespace {

using ::testing::HasSubstr;

MatrixView View(const RowMatrixF& m) { return MatrixView(m.data(), m.rows(), m.cols()); }

TwoLevelSpec Spec() {
  TwoLevelSpec spec;
  spec.groups = 8;
  spec.classes_per_group = 8;
  spec.dim = 32;
  spec.group_rank = 4;
  spec.class_rank = 4;
  spec.group_spread = 0.5;
  spec.class_spread = 0.12;
  spec.group_scale = 0.6;
  spec.class_scale = 0.3;
  spec.noise = 0.2;
  spec.seed = 3;
  spec.label_offset = 1000;
  spec.label_stride = -3;  // descending labels: class order != generation order
  return spec;
}

// Groups that overlap: super-classification at T = 1 makes mistakes.
TwoLevelSpec OverlapSpec() {
  TwoLevelSpec spec = Spec();
  spec.group_spread = 0.12;
  return spec;
}

HppcaOptions Options() {
  HppcaOptions opt;
  opt.q = 8;
  opt.r = 8;
  opt.superclasses = 8;
  return opt;
}

double Accuracy(const HppcaPrediction& p, const std::vector<int64_t>& truth) {
  int64_t ok = 0;
  for (size_t i = 0; i < truth.size(); ++i) ok += p.labels[i * p.top_k] == truth[i];
  return static_cast<double>(ok) / static_cast<double>(truth.size());
}

class HppcaQualityTest : public ::testing::Test {
 protected:
  void SetUp() override { Make(Spec()); }
  void Make(const TwoLevelSpec& spec) {
    gen_ = std::make_unique<TwoLevelGenerator>(spec);
    train_ = gen_->Sample(60, 101);
    test_ = gen_->Sample(30, 202);
  }
  std::vector<int64_t> TrueGroups(const HppcaModel& m) const {
    std::vector<int64_t> g(m.num_classes());
    for (int32_t c = 0; c < m.num_classes(); ++c) {
      const int64_t label = m.labels()[c];
      const int32_t k = static_cast<int32_t>((label - Spec().label_offset) / Spec().label_stride);
      g[c] = gen_->group_of(k);
    }
    return g;
  }
  std::unique_ptr<TwoLevelGenerator> gen_;
  LabelledData train_, test_;
};

TEST_F(HppcaQualityTest, RecoversTheGeneratingSuperclasses) {
  NullRunContext ctx;
  for (bool raw : {false, true}) {
    HppcaOptions opt = Options();
    opt.raw_data_clustering = raw;
    auto model = FitHppca(View(train_.x), train_.labels, opt, ctx);
    ASSERT_TRUE(model.ok()) << model.status();
    std::vector<int64_t> pred(model->num_classes());
    for (int32_t c = 0; c < model->num_classes(); ++c) pred[c] = model->superclass_of(c);
    auto ari = AdjustedRandIndex(TrueGroups(*model), pred);
    ASSERT_TRUE(ari.ok());
    std::printf("super-class ARI (%s): %.4f\n", raw ? "raw data" : "Gaussians", *ari);
    // Raw-data clustering (k-means over noisy individual rows) is the weaker
    // variant, as in the paper's Table 2; chance level is ARI ~ 0.
    EXPECT_GT(*ari, raw ? 0.6 : 0.9) << (raw ? "raw" : "gaussian");
  }
}

TEST_F(HppcaQualityTest, AccuracyApproachesFlatAsTGrows) {
  Make(OverlapSpec());
  NullRunContext ctx;
  auto model = FitHppca(View(train_.x), train_.labels, Options(), ctx);
  ASSERT_TRUE(model.ok());
  HppcaPredictOptions po;
  po.flat = true;
  auto flat = model->Predict(View(test_.x), po);
  ASSERT_TRUE(flat.ok());
  const double flat_acc = Accuracy(*flat, test_.labels);
  std::printf("flat accuracy %.4f\n", flat_acc);
  // The task is neither trivial nor hopeless.
  EXPECT_GT(flat_acc, 0.6);
  EXPECT_LT(flat_acc, 0.99);
  po.flat = false;
  double prev_agree = -1.0;
  std::vector<double> acc;
  for (int32_t t = 1; t <= 5; ++t) {
    po.top_t = t;
    auto p = model->Predict(View(test_.x), po);
    ASSERT_TRUE(p.ok());
    int64_t agree = 0;
    for (size_t i = 0; i < test_.labels.size(); ++i) agree += p->labels[i] == flat->labels[i];
    const double agree_frac = static_cast<double>(agree) / test_.labels.size();
    acc.push_back(Accuracy(*p, test_.labels));
    std::printf("T=%d accuracy %.4f, agreement with flat %.4f, op-count speed-up %.2f\n", t,
                acc.back(), agree_frac, p->OperationSpeedup(64, 8));
    // Opened super-classes are nested in T, so agreement with flat only grows.
    EXPECT_GE(agree_frac, prev_agree);
    prev_agree = agree_frac;
  }
  EXPECT_LT(acc[0], flat_acc);         // T = 1 loses some rows to super-class errors
  EXPECT_NEAR(acc[4], flat_acc, 0.01);  // T = 5 is within a point of flat
  EXPECT_GT(prev_agree, 0.99);
}

TEST_F(HppcaQualityTest, GrowingMatchesTrainingOnAllClassesAtOnce) {
  Make(OverlapSpec());
  NullRunContext ctx;
  auto full = FitHppca(View(train_.x), train_.labels, Options(), ctx);
  ASSERT_TRUE(full.ok());
  // Base: every class but each fourth; then add those.
  LabelledData base_data, new_data;
  std::vector<int64_t> base_rows, new_rows;
  for (int64_t i = 0; i < train_.x.rows(); ++i) {
    const int32_t k =
        static_cast<int32_t>((train_.labels[i] - Spec().label_offset) / Spec().label_stride);
    (k % 4 == 3 ? new_rows : base_rows).push_back(i);
  }
  auto take = [&](const std::vector<int64_t>& rows, LabelledData* out) {
    out->x.resize(static_cast<int64_t>(rows.size()), train_.x.cols());
    for (size_t i = 0; i < rows.size(); ++i) {
      out->x.row(i) = train_.x.row(rows[i]);
      out->labels.push_back(train_.labels[rows[i]]);
    }
  };
  take(base_rows, &base_data);
  take(new_rows, &new_data);
  auto base = FitHppca(View(base_data.x), base_data.labels, Options(), ctx);
  ASSERT_TRUE(base.ok());
  for (bool recluster : {false, true}) {
    HppcaAddOptions add;
    add.recluster = recluster;
    auto grown = AddClasses(*base, View(new_data.x), new_data.labels, add, ctx);
    ASSERT_TRUE(grown.ok()) << grown.status();
    ASSERT_EQ(grown->num_classes(), 64);
    // Class models depend only on their own rows: flat predictions agree.
    HppcaPredictOptions po;
    po.flat = true;
    auto pf = full->Predict(View(test_.x), po);
    auto pg = grown->Predict(View(test_.x), po);
    ASSERT_TRUE(pf.ok() && pg.ok());
    EXPECT_EQ(pf->labels, pg->labels);
    po.flat = false;
    for (int32_t t : {1, 2, 5}) {
      po.top_t = t;
      auto a = full->Predict(View(test_.x), po);
      auto b = grown->Predict(View(test_.x), po);
      ASSERT_TRUE(a.ok() && b.ok());
      const double acc_full = Accuracy(*a, test_.labels), acc_grown = Accuracy(*b, test_.labels);
      std::printf("recluster=%d T=%d: all at once %.4f, grown %.4f\n", recluster, t, acc_full,
                  acc_grown);
      EXPECT_NEAR(acc_grown, acc_full, t == 1 ? 0.03 : 0.015) << "T=" << t;
    }
    // The grown super-classes recover the generating groups about as well as
    // clustering all classes at once.
    const std::vector<int64_t> groups = TrueGroups(*grown);
    std::vector<int64_t> pred(64), pred_full(64);
    for (int32_t c = 0; c < 64; ++c) {
      pred[c] = grown->superclass_of(c);
      pred_full[c] = full->superclass_of(c);
    }
    auto ari = AdjustedRandIndex(groups, pred);
    auto ari_full = AdjustedRandIndex(groups, pred_full);
    ASSERT_TRUE(ari.ok() && ari_full.ok());
    std::printf("ARI grown %.4f, all at once %.4f\n", *ari, *ari_full);
    EXPECT_GT(*ari, *ari_full - 0.1);
    EXPECT_GT(*ari, 0.5);
  }
}

TEST_F(HppcaQualityTest, SaveLoadRoundTripPredictsIdentically) {
  NullRunContext ctx;
  for (int32_t s : {8, kFlatClassifier}) {
    HppcaOptions opt = Options();
    opt.superclasses = s;
    opt.score = s > 0 ? PpcaScore::kMahalanobis : PpcaScore::kLogDet;
    auto model = FitHppca(View(train_.x), train_.labels, opt, ctx);
    ASSERT_TRUE(model.ok());
    const ScopedTempDir tmp(absl::StrCat("hppca_roundtrip", s, "_"));
    const std::string& dir = tmp.path();
    ASSERT_TRUE(model->Save(dir).ok());
    auto loaded = HppcaModel::Load(dir);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->num_classes(), model->num_classes());
    EXPECT_EQ(loaded->num_superclasses(), model->num_superclasses());
    EXPECT_EQ(loaded->options().score, opt.score);
    EXPECT_EQ(loaded->fit_stats().kmeans_iterations, model->fit_stats().kmeans_iterations);
    for (int32_t c = 0; c < model->num_classes(); ++c) {
      EXPECT_EQ(loaded->class_mean(c), model->class_mean(c));
      EXPECT_EQ(loaded->class_basis(c), model->class_basis(c));
      EXPECT_EQ(loaded->class_eigvals(c), model->class_eigvals(c));
      EXPECT_EQ(loaded->superclass_of(c), model->superclass_of(c));
    }
    EXPECT_EQ(loaded->hierarchy().point_leaf(), model->hierarchy().point_leaf());
    for (int32_t v = 0; v < model->hierarchy().num_nodes(); ++v) {
      EXPECT_EQ(loaded->hierarchy().parent(v), model->hierarchy().parent(v));
    }
    HppcaPredictOptions po;
    po.top_k = 3;
    po.top_t = 2;
    auto a = model->Predict(View(test_.x), po);
    auto b = loaded->Predict(View(test_.x), po);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->classes, b->classes);
    EXPECT_EQ(a->scores, b->scores);
    EXPECT_EQ(a->superclasses, b->superclasses);
    // The exported class bases are in class order (for NumPy users).
    auto bases = ReadNpyFloat32(dir + "/class_bases.npy");
    ASSERT_TRUE(bases.ok());
    const int64_t q = opt.q, d = Spec().dim;
    for (int32_t c : {0, 17, 63}) {
      for (int64_t j = 0; j < q * d; ++j) {
        ASSERT_EQ(bases->data[c * q * d + j], model->class_basis(c).data()[j]);
      }
    }
  }
}

TEST_F(HppcaQualityTest, LoadRejectsDamagedModels) {
  NullRunContext ctx;
  auto model = FitHppca(View(train_.x), train_.labels, Options(), ctx);
  ASSERT_TRUE(model.ok());
  const ScopedTempDir tmp_missing("hppca_missing_");
  EXPECT_EQ(HppcaModel::Load(tmp_missing.Path("nope")).status().code(),
            absl::StatusCode::kNotFound);
  const ScopedTempDir tmp("hppca_damaged_");
  const std::string& dir = tmp.path();
  ASSERT_TRUE(model->Save(dir).ok());
  // Wrong shape.
  const int64_t shape[1] = {3};
  const std::vector<int64_t> three = {1, 2, 3};
  ASSERT_TRUE(WriteNpy(dir + "/labels.npy", absl::MakeConstSpan(three), shape).ok());
  auto bad = HppcaModel::Load(dir);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("labels.npy"));
  // Not a model.
  ASSERT_TRUE(WriteFileAtomic(dir + "/hppca.json", "{\"format\": \"other\"}").ok());
  EXPECT_EQ(HppcaModel::Load(dir).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace dendro
