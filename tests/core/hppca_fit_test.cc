// HPPCA training, scoring and prediction against dense references: class
// models vs the eigendecomposition of the sample covariance, Theorem 1 scores
// vs the direct Mahalanobis form (eq. 2), hierarchical == flat at T = S,
// exact KL assignment vs brute force, tree shape, growing, and errors.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "Eigen/Cholesky"
#include "Eigen/Eigenvalues"
#include "absl/strings/str_cat.h"
#include "core/hppca/hppca.h"
#include "core/hppca/internal.h"
#include "core/hppca/synthetic.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dendro {
namespace {

using ::testing::HasSubstr;
using Eigen::MatrixXd;
using Eigen::VectorXd;

MatrixView View(const RowMatrixF& m) { return MatrixView(m.data(), m.rows(), m.cols()); }

// Random rows: class c has `sizes[c]` points with its own anisotropic spread.
LabelledData RandomClasses(const std::vector<int>& sizes, const std::vector<int64_t>& labels,
                           int64_t d, std::mt19937_64& rng) {
  std::normal_distribution<double> n(0.0, 1.0);
  LabelledData out;
  int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  out.x.resize(total, d);
  int64_t row = 0;
  for (size_t c = 0; c < sizes.size(); ++c) {
    VectorXd mu = VectorXd::NullaryExpr(d, [&](Eigen::Index) { return 3.0 * n(rng); });
    MatrixXd a = MatrixXd::NullaryExpr(d, d, [&](Eigen::Index, Eigen::Index) { return n(rng); });
    for (int64_t j = 0; j < d; ++j) a.col(j) *= 1.0 / (1.0 + j);
    for (int i = 0; i < sizes[c]; ++i) {
      VectorXd z = VectorXd::NullaryExpr(d, [&](Eigen::Index) { return n(rng); });
      out.x.row(row++) = (mu + a * z).transpose().cast<float>();
      out.labels.push_back(labels[c]);
    }
  }
  return out;
}

// Interleaves rows so that classes are not contiguous in the input.
void Shuffle(LabelledData& data, std::mt19937_64& rng) {
  std::vector<int64_t> p(data.labels.size());
  std::iota(p.begin(), p.end(), 0);
  std::shuffle(p.begin(), p.end(), rng);
  LabelledData out;
  out.x.resize(data.x.rows(), data.x.cols());
  for (size_t i = 0; i < p.size(); ++i) {
    out.x.row(i) = data.x.row(p[i]);
    out.labels.push_back(data.labels[p[i]]);
  }
  data = std::move(out);
}

TEST(HppcaFitTest, ClassModelsAreTheSampleCovarianceEigenpairs) {
  std::mt19937_64 rng(1);
  const int64_t d = 9;
  // Gram route (n < d), scatter route (n > d), chunked scatter (n > 4096),
  // and a class with n <= q (reduced rank).
  const std::vector<int> sizes = {6, 40, 5000, 3};
  const std::vector<int64_t> labels = {-7, 12, 3, 1000};
  LabelledData data = RandomClasses(sizes, labels, d, rng);
  Shuffle(data, rng);
  HppcaOptions opt;
  opt.q = 4;
  opt.superclasses = kFlatClassifier;
  NullRunContext ctx;
  auto model = FitHppca(View(data.x), data.labels, opt, ctx);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ(model->num_classes(), 4);
  EXPECT_THAT(std::vector<int64_t>(model->labels().begin(), model->labels().end()),
              ::testing::ElementsAre(-7, 3, 12, 1000));
  for (int32_t k = 0; k < 4; ++k) {
    const int64_t label = model->labels()[k];
    std::vector<int64_t> rows;
    for (size_t i = 0; i < data.labels.size(); ++i) {
      if (data.labels[i] == label) rows.push_back(static_cast<int64_t>(i));
    }
    const int64_t n = static_cast<int64_t>(rows.size());
    EXPECT_EQ(model->class_count(k), n);
    MatrixXd x(n, d);
    for (int64_t i = 0; i < n; ++i) x.row(i) = data.x.row(rows[i]).cast<double>();
    const VectorXd mu = x.colwise().mean().transpose();
    EXPECT_LT((model->class_mean(k) - mu).norm(), 1e-9 * (1.0 + mu.norm())) << label;
    const MatrixXd xc = x.rowwise() - mu.transpose();
    const MatrixXd cov = xc.transpose() * xc / static_cast<double>(n - 1);  // eq. 4
    Eigen::SelfAdjointEigenSolver<MatrixXd> es(cov);
    const int32_t qc = std::min<int32_t>(4, static_cast<int32_t>(n - 1));
    EXPECT_EQ(model->class_rank(k), qc) << label;
    for (int32_t l = 0; l < 4; ++l) {
      if (l < qc) {
        const double want = es.eigenvalues()[d - 1 - l];
        EXPECT_NEAR(model->class_eigvals(k)[l], want, 1e-8 * (1.0 + want)) << label << " " << l;
        const double cosine = std::fabs(
            model->class_basis(k).row(l).cast<double>().dot(es.eigenvectors().col(d - 1 - l)));
        EXPECT_NEAR(cosine, 1.0, 1e-5) << label << " " << l;
      } else {
        EXPECT_EQ(model->class_eigvals(k)[l], 0.0);
        EXPECT_EQ(model->class_basis(k).row(l).norm(), 0.0f);
      }
    }
  }
}

// Dense eq. 2 (and eq. 1) for class k of the model.
double DenseScore(const HppcaModel& m, int32_t k, const VectorXd& x, bool log_det) {
  const MatrixXd l = m.class_basis(k).cast<double>();  // q x d
  MatrixXd sigma = l.transpose() * m.class_eigvals(k).asDiagonal() * l;  // eq. 6
  sigma.diagonal().array() += m.options().lambda;
  Eigen::LLT<MatrixXd> llt(sigma);
  const VectorXd r = x - m.class_mean(k);
  double s = r.dot(llt.solve(r));
  if (log_det) s += 2.0 * llt.matrixLLT().diagonal().array().log().sum();
  return s;
}

TEST(HppcaFitTest, TheoremOneScoresEqualDirectMahalanobis) {
  std::mt19937_64 rng(2);
  const int64_t d = 14;
  for (bool log_det : {false, true}) {
    for (double lambda : {0.01, 0.5}) {
      LabelledData data = RandomClasses({30, 25, 40, 8, 12}, {1, 2, 3, 4, 5}, d, rng);
      HppcaOptions opt;
      opt.q = 5;
      opt.lambda = lambda;
      opt.score = log_det ? PpcaScore::kLogDet : PpcaScore::kMahalanobis;
      opt.superclasses = 2;
      opt.r = 3;
      NullRunContext ctx;
      auto model = FitHppca(View(data.x), data.labels, opt, ctx);
      ASSERT_TRUE(model.ok()) << model.status();
      LabelledData probe = RandomClasses({7, 7}, {0, 0}, d, rng);
      auto scores = model->ScoreClasses(View(probe.x));
      ASSERT_TRUE(scores.ok());
      for (int64_t i = 0; i < probe.x.rows(); ++i) {
        const VectorXd x = probe.x.row(i).cast<double>().transpose();
        for (int32_t k = 0; k < model->num_classes(); ++k) {
          const double want = DenseScore(*model, k, x, log_det);
          EXPECT_NEAR((*scores)(i, k), want, 2e-4 * (std::fabs(want) + 1.0))
              << "row " << i << " class " << k << " lambda " << lambda << " logdet " << log_det;
        }
      }
      // Super-class scores: the same form with the centroid's top-r eigenpairs.
      auto sup = model->ScoreSuperclasses(View(probe.x));
      ASSERT_TRUE(sup.ok());
      for (int32_t s = 0; s < model->num_superclasses(); ++s) {
        const Centroid& c = model->superclass_centroid(s);
        const MatrixXd u = c.eigvecs.cast<double>();
        MatrixXd sigma = u.transpose() * c.eigvals.asDiagonal() * u;
        sigma.diagonal().array() += lambda;
        Eigen::LLT<MatrixXd> llt(sigma);
        for (int64_t i = 0; i < probe.x.rows(); ++i) {
          const VectorXd r = probe.x.row(i).cast<double>().transpose() - c.mean;
          double want = r.dot(llt.solve(r));
          if (log_det) want += 2.0 * llt.matrixLLT().diagonal().array().log().sum();
          EXPECT_NEAR((*sup)(i, s), want, 2e-4 * (std::fabs(want) + 1.0));
        }
      }
    }
  }
}

TwoLevelSpec SmallSpec() {
  TwoLevelSpec spec;
  spec.groups = 6;
  spec.classes_per_group = 7;
  spec.dim = 24;
  spec.group_rank = 4;
  spec.class_rank = 4;
  spec.group_spread = 0.8;
  spec.class_spread = 0.15;
  spec.class_scale = 0.3;
  spec.noise = 0.15;
  spec.label_offset = -50;
  spec.label_stride = 7;
  return spec;
}

HppcaOptions SmallOptions() {
  HppcaOptions opt;
  opt.q = 6;
  opt.r = 6;
  opt.superclasses = 6;
  return opt;
}

TEST(HppcaFitTest, FlatPredictionIsTheArgminAndTopKIsSorted) {
  const TwoLevelGenerator gen(SmallSpec());
  const LabelledData train = gen.Sample(40, 1), test = gen.Sample(3, 2);
  NullRunContext ctx;
  auto model = FitHppca(View(train.x), train.labels, SmallOptions(), ctx);
  ASSERT_TRUE(model.ok()) << model.status();
  auto scores = model->ScoreClasses(View(test.x));
  ASSERT_TRUE(scores.ok());
  HppcaPredictOptions po;
  po.flat = true;
  po.top_k = 4;
  po.block_rows = 17;  // several blocks
  auto p = model->Predict(View(test.x), po);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->top_t, 0);
  EXPECT_EQ(p->top_k, 4);
  for (int64_t i = 0; i < test.x.rows(); ++i) {
    std::vector<int32_t> order(model->num_classes());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return (*scores)(i, a) < (*scores)(i, b); });
    for (int a = 0; a < 4; ++a) {
      EXPECT_EQ(p->classes[i * 4 + a], order[a]) << "row " << i;
      EXPECT_EQ(p->labels[i * 4 + a], model->labels()[order[a]]);
      EXPECT_NEAR(p->scores[i * 4 + a], (*scores)(i, order[a]),
                  1e-5 * std::fabs((*scores)(i, order[a])) + 1e-3);
    }
    EXPECT_EQ(p->classes_evaluated[i], model->num_classes());
  }
  EXPECT_DOUBLE_EQ(p->OperationSpeedup(model->num_classes(), model->num_superclasses()), 1.0);
}

TEST(HppcaFitTest, HierarchicalWithEverySuperclassOpenEqualsFlat) {
  const TwoLevelGenerator gen(SmallSpec());
  const LabelledData train = gen.Sample(40, 3), test = gen.Sample(4, 4);
  NullRunContext ctx;
  for (bool raw : {false, true}) {
    HppcaOptions opt = SmallOptions();
    opt.raw_data_clustering = raw;
    auto model = FitHppca(View(train.x), train.labels, opt, ctx);
    ASSERT_TRUE(model.ok()) << model.status();
    const int32_t s = model->num_superclasses();
    ASSERT_GT(s, 1);
    HppcaPredictOptions flat_opt;
    flat_opt.flat = true;
    flat_opt.top_k = 3;
    HppcaPredictOptions hier_opt;
    hier_opt.top_t = s;
    hier_opt.top_k = 3;
    hier_opt.block_rows = 50;
    auto flat = model->Predict(View(test.x), flat_opt);
    auto hier = model->Predict(View(test.x), hier_opt);
    ASSERT_TRUE(flat.ok() && hier.ok());
    EXPECT_EQ(hier->top_t, s);
    EXPECT_EQ(hier->classes, flat->classes);
    EXPECT_EQ(hier->labels, flat->labels);
    for (size_t i = 0; i < flat->scores.size(); ++i) {
      EXPECT_NEAR(hier->scores[i], flat->scores[i], 1e-5 * std::fabs(flat->scores[i]) + 1e-3);
    }
    for (int32_t c : hier->classes_evaluated) EXPECT_EQ(c, model->num_classes());
    // A larger T is clamped to S.
    hier_opt.top_t = s + 10;
    auto clamped = model->Predict(View(test.x), hier_opt);
    ASSERT_TRUE(clamped.ok());
    EXPECT_EQ(clamped->top_t, s);
    EXPECT_EQ(clamped->classes, flat->classes);
  }
}

TEST(HppcaFitTest, HierarchicalOpensTheTBestSuperclassesOnly) {
  const TwoLevelGenerator gen(SmallSpec());
  const LabelledData train = gen.Sample(40, 5), test = gen.Sample(4, 6);
  NullRunContext ctx;
  auto model = FitHppca(View(train.x), train.labels, SmallOptions(), ctx);
  ASSERT_TRUE(model.ok());
  auto sup = model->ScoreSuperclasses(View(test.x));
  auto cls = model->ScoreClasses(View(test.x));
  ASSERT_TRUE(sup.ok() && cls.ok());
  for (int32_t t : {1, 2, 3}) {
    HppcaPredictOptions po;
    po.top_t = t;
    po.top_k = 2;
    auto p = model->Predict(View(test.x), po);
    ASSERT_TRUE(p.ok());
    for (int64_t i = 0; i < test.x.rows(); ++i) {
      std::vector<int32_t> order(model->num_superclasses());
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t a, int32_t b) { return (*sup)(i, a) < (*sup)(i, b); });
      std::set<int32_t> open;
      int32_t members = 0;
      for (int32_t a = 0; a < t; ++a) {
        EXPECT_EQ(p->superclasses[i * t + a], order[a]);
        open.insert(order[a]);
        members += static_cast<int32_t>(model->superclass_members(order[a]).size());
      }
      EXPECT_EQ(p->classes_evaluated[i], members);
      // The best class among the opened super-classes' members.
      int32_t best = -1;
      for (int32_t k = 0; k < model->num_classes(); ++k) {
        if (!open.count(model->superclass_of(k))) continue;
        if (best < 0 || (*cls)(i, k) < (*cls)(i, best)) best = k;
      }
      EXPECT_EQ(p->classes[i * 2], best);
      EXPECT_TRUE(open.count(model->superclass_of(p->classes[i * 2 + 1])));
    }
    EXPECT_GT(p->OperationSpeedup(model->num_classes(), model->num_superclasses()), 0.0);
  }
}

TEST(HppcaFitTest, HierarchyHasClassesUnderSuperclassesUnderTheRoot) {
  const TwoLevelGenerator gen(SmallSpec());
  const LabelledData train = gen.Sample(30, 7);
  NullRunContext ctx;
  auto model = FitHppca(View(train.x), train.labels, SmallOptions(), ctx);
  ASSERT_TRUE(model.ok());
  // The two-level (coarse) tree; hppca_refine_test.cc checks the refined one.
  const Hierarchy& h = model->coarse_hierarchy();
  const int32_t k = model->num_classes();
  EXPECT_EQ(h.num_leaves(), k);
  int32_t multi = 0;
  for (int32_t s = 0; s < model->num_superclasses(); ++s) {
    const auto members = model->superclass_members(s);
    if (members.size() < 2) {
      EXPECT_EQ(model->superclass_coarse_node(s), -1);
      for (int32_t c : members) EXPECT_EQ(h.parent(c), h.root());
      continue;
    }
    ++multi;
    const int32_t node = model->superclass_coarse_node(s);
    ASSERT_GE(node, k);
    EXPECT_EQ(h.height(node), 1.0);
    EXPECT_EQ(h.leaf_count(node), static_cast<int32_t>(members.size()));
    for (int32_t c : members) {
      EXPECT_EQ(h.parent(c), node);
      EXPECT_EQ(model->superclass_of(c), s);
    }
  }
  EXPECT_EQ(h.num_internal(), multi + (multi > 1 ? 1 : 0));
  EXPECT_EQ(h.metadata().at("method"), "hppca");
  // point_leaf: each training row's class.
  ASSERT_EQ(h.point_leaf().size(), train.labels.size());
  for (size_t i = 0; i < train.labels.size(); ++i) {
    EXPECT_EQ(model->labels()[h.point_leaf()[i]], train.labels[i]);
  }
  // Flat: every class directly under a root at height 1.
  HppcaOptions flat = SmallOptions();
  flat.superclasses = kFlatClassifier;
  auto fm = FitHppca(View(train.x), train.labels, flat, ctx);
  ASSERT_TRUE(fm.ok());
  EXPECT_EQ(fm->num_superclasses(), 0);
  EXPECT_EQ(fm->coarse_hierarchy().num_internal(), 1);
  EXPECT_EQ(fm->coarse_hierarchy().height(fm->coarse_hierarchy().root()), 1.0);
  for (int32_t c = 0; c < k; ++c) EXPECT_EQ(fm->superclass_of(c), -1);
}

TEST(HppcaFitTest, RowOrderDoesNotChangeTheModel) {
  // Each class's mean and covariance are sums over its rows, so another row
  // order changes them by rounding only: the super-classes and every
  // prediction stay the same, and the scores agree to rounding.
  const TwoLevelGenerator gen(SmallSpec());
  const LabelledData train = gen.Sample(30, 11), test = gen.Sample(5, 12);
  LabelledData shuffled = train;
  std::mt19937_64 rng(13);
  Shuffle(shuffled, rng);
  NullRunContext ctx;
  auto a = FitHppca(View(train.x), train.labels, SmallOptions(), ctx);
  auto b = FitHppca(View(shuffled.x), shuffled.labels, SmallOptions(), ctx);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->num_classes(), b->num_classes());
  ASSERT_EQ(a->num_superclasses(), b->num_superclasses());
  ASSERT_GT(a->num_superclasses(), 1);
  for (int32_t c = 0; c < a->num_classes(); ++c) {
    ASSERT_EQ(a->labels()[c], b->labels()[c]);
    EXPECT_EQ(a->superclass_of(c), b->superclass_of(c)) << "class " << c;
  }
  HppcaPredictOptions po;
  auto pa = a->Predict(View(test.x), po);
  auto pb = b->Predict(View(test.x), po);
  ASSERT_TRUE(pa.ok() && pb.ok());
  EXPECT_EQ(pa->labels, pb->labels);
  EXPECT_EQ(pa->superclasses, pb->superclasses);
  ASSERT_EQ(pa->scores.size(), pb->scores.size());
  for (size_t i = 0; i < pa->scores.size(); ++i) {
    EXPECT_NEAR(pa->scores[i], pb->scores[i], 1e-4 * (1.0 + std::abs(pa->scores[i])));
  }
}

TEST(HppcaFitTest, SameModelWhateverTheThreadCount) {
  const TwoLevelGenerator gen(SmallSpec());
  const LabelledData train = gen.Sample(30, 21), test = gen.Sample(5, 22);
  NullRunContext ctx;
  HppcaOptions o = SmallOptions();
  o.num_threads = 1;
  auto a = FitHppca(View(train.x), train.labels, o, ctx);
  o.num_threads = 2;
  auto b = FitHppca(View(train.x), train.labels, o, ctx);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int32_t c = 0; c < a->num_classes(); ++c) {
    EXPECT_EQ(a->superclass_of(c), b->superclass_of(c)) << "class " << c;
  }
  auto sa = a->ScoreClasses(View(test.x));
  auto sb = b->ScoreClasses(View(test.x));
  ASSERT_TRUE(sa.ok() && sb.ok());
  EXPECT_TRUE(*sa == *sb) << "class scores differ between 1 and 2 threads";
}

TEST(HppcaFitTest, AutomaticSuperclassCountMinimisesTheCostModel) {
  // ChooseHppcaSuperclasses against every S in [min(T, K), K], with E = K T / S.
  for (int64_t d : {2, 8, 64, 640}) {
    for (int32_t k : {1, 2, 7, 42, 200, 1201}) {
      for (int32_t q : {0, 3, 50}) {
        for (int32_t t : {1, 3, 5, 50}) {
          const int32_t r = q == 3 ? 9 : q;
          const int32_t lo = std::min(t, k);
          int32_t best = lo;
          double best_cost = std::numeric_limits<double>::infinity();
          for (int32_t s = lo; s <= k; ++s) {
            const double opened = std::min(t, s);
            const double c =
                EstimateHppcaPredictCost(d, k, q, s, r, t, k * opened / s).hierarchical;
            if (c < best_cost) {
              best_cost = c;
              best = s;
            }
          }
          SCOPED_TRACE(absl::StrCat("d=", d, " K=", k, " q=", q, " r=", r, " T=", t));
          const int32_t chosen = ChooseHppcaSuperclasses(d, k, q, r, t);
          ASSERT_GE(chosen, std::min(t, k));
          ASSERT_LE(chosen, std::max(k, 1));
          const double opened = std::min(t, chosen);
          EXPECT_EQ(
              EstimateHppcaPredictCost(d, k, q, chosen, r, t, k * opened / chosen).hierarchical,
              best_cost);
          EXPECT_EQ(chosen, best);
        }
      }
    }
  }
  // Equal ranks: section 4.3's sqrt(K T), to the nearest count of equal cost.
  EXPECT_NEAR(ChooseHppcaSuperclasses(640, 1000, 50, 50, 5), std::sqrt(5000.0), 1.0);
  // A fit uses it.
  const TwoLevelGenerator gen(SmallSpec());
  const LabelledData train = gen.Sample(20, 8);
  NullRunContext ctx;
  HppcaOptions opt = SmallOptions();
  opt.superclasses = kAutoSuperclasses;
  for (int32_t t : {1, 3}) {
    opt.default_top_t = t;
    auto model = FitHppca(View(train.x), train.labels, opt, ctx);
    ASSERT_TRUE(model.ok());
    EXPECT_EQ(model->num_superclasses(), ChooseHppcaSuperclasses(24, 42, 6, 6, t));
  }
}

TEST(HppcaFitTest, CostModelCountsEveryScoredModelAndOpening) {
  const auto c = [](double d, double p) {
    return (p + 1) * d + kHppcaComponentCost * p + kHppcaModelCost;
  };
  const HppcaPredictCost cost = EstimateHppcaPredictCost(32, 100, 10, 8, 6, 3, 40.5);
  EXPECT_DOUBLE_EQ(cost.flat, 100 * c(32, 10));
  EXPECT_DOUBLE_EQ(cost.hierarchical, 8 * c(32, 6) + 40.5 * c(32, 10) + 3 * (32 + kHppcaOpenCost));
  // T beyond S opens S; a flat model costs the same either way.
  EXPECT_DOUBLE_EQ(EstimateHppcaPredictCost(32, 100, 10, 2, 6, 5, 100).hierarchical,
                   2 * c(32, 6) + 100 * c(32, 10) + 2 * (32 + kHppcaOpenCost));
  const HppcaPredictCost flat = EstimateHppcaPredictCost(32, 100, 10, 0, 6, 3, 100);
  EXPECT_DOUBLE_EQ(flat.hierarchical, flat.flat);
}

// The default scoring: flat exactly where the model's estimate for the
// hierarchy is not below kHppcaHierarchyShare of flat's, and then the same
// answers as flat;
// hierarchical otherwise, the same as asking for default_top_t. Forced
// either way by options.scoring; an explicit T or flat overrides it.
TEST(HppcaFitTest, DefaultScoringIsTheCheaperByTheCostModel) {
  NullRunContext ctx;
  // Few features and few classes per super-class: the per-opening work
  // outweighs the classes skipped. Many features and classes: it pays.
  TwoLevelSpec narrow = SmallSpec();
  narrow.dim = 3;
  narrow.group_rank = 2;
  narrow.class_rank = 1;
  TwoLevelSpec wide = SmallSpec();
  wide.groups = 8;
  wide.classes_per_group = 25;
  wide.dim = 256;
  int seen_flat = 0, seen_hierarchical = 0;
  for (const TwoLevelSpec& spec : {narrow, wide}) {
    const TwoLevelGenerator gen(spec);
    const LabelledData train = gen.Sample(12, 21), test = gen.Sample(3, 22);
    for (HppcaScoring scoring :
         {HppcaScoring::kAuto, HppcaScoring::kHierarchical, HppcaScoring::kFlat}) {
      HppcaOptions opt;
      opt.q = opt.r = std::min<int32_t>(6, spec.dim);
      opt.scoring = scoring;
      // The narrow shape's own choice would be one super-class (the
      // hierarchy never pays there); six make it a hierarchy to decide on.
      if (spec.dim == narrow.dim) opt.superclasses = 6;
      auto model = FitHppca(View(train.x), train.labels, opt, ctx);
      ASSERT_TRUE(model.ok()) << model.status();
      ASSERT_GT(model->num_superclasses(), 1);
      const HppcaPredictCost cost = model->predict_cost();
      const bool want_flat =
          scoring == HppcaScoring::kFlat ||
          (scoring == HppcaScoring::kAuto && cost.hierarchical >= kHppcaHierarchyShare * cost.flat);
      SCOPED_TRACE(absl::StrCat("d=", spec.dim, " scoring=", std::string(HppcaScoringName(scoring)),
                                " cost flat ", cost.flat, " hierarchical ", cost.hierarchical));
      EXPECT_EQ(model->default_flat(), want_flat);
      EXPECT_EQ(model->hierarchy().metadata().at("default_scoring"),
                want_flat ? "flat" : "hierarchical");
      if (scoring == HppcaScoring::kAuto) (want_flat ? seen_flat : seen_hierarchical)++;

      HppcaPredictOptions def, flat, hier;
      flat.flat = true;
      hier.top_t = opt.default_top_t;
      auto by_default = model->Predict(View(test.x), def);
      auto by_flat = model->Predict(View(test.x), flat);
      auto by_hier = model->Predict(View(test.x), hier);
      ASSERT_TRUE(by_default.ok() && by_flat.ok() && by_hier.ok());
      const HppcaPrediction& same = want_flat ? *by_flat : *by_hier;
      EXPECT_EQ(by_default->top_t, same.top_t);
      EXPECT_EQ(by_default->classes, same.classes);
      EXPECT_EQ(by_default->classes_evaluated, same.classes_evaluated);
      EXPECT_EQ(by_hier->top_t, std::min(opt.default_top_t, model->num_superclasses()));
      EXPECT_EQ(by_flat->top_t, 0);
    }
  }
  // The two shapes fall on either side of the rule.
  EXPECT_EQ(seen_flat, 1);
  EXPECT_EQ(seen_hierarchical, 1);
}

// The scoring option and what it decided survive Save/Load.
TEST(HppcaFitTest, ScoringOptionIsKeptBySaveLoad) {
  const TwoLevelGenerator gen(SmallSpec());
  const LabelledData train = gen.Sample(20, 31);
  NullRunContext ctx;
  for (HppcaScoring scoring : {HppcaScoring::kFlat, HppcaScoring::kHierarchical}) {
    HppcaOptions opt = SmallOptions();
    opt.scoring = scoring;
    auto model = FitHppca(View(train.x), train.labels, opt, ctx);
    ASSERT_TRUE(model.ok());
    const std::string dir =
        (std::filesystem::temp_directory_path() /
         absl::StrCat("hppca_scoring_", ::getpid(), "_", std::string(HppcaScoringName(scoring))))
            .string();
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    ASSERT_TRUE(model->Save(dir).ok());
    auto loaded = HppcaModel::Load(dir);
    std::filesystem::remove_all(dir);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->options().scoring, scoring);
    EXPECT_EQ(loaded->default_flat(), scoring == HppcaScoring::kFlat);
    EXPECT_EQ(loaded->predict_cost().hierarchical, model->predict_cost().hierarchical);
  }
}

// Each class of a fitted model as the clustering sees it.
std::vector<GaussianRef> ClassGaussians(const HppcaModel& model) {
  std::vector<GaussianRef> classes;
  for (int32_t c = 0; c < model.num_classes(); ++c) {
    classes.push_back(model.class_cluster_gaussian(c));
  }
  return classes;
}

// A flat model (no super-classes) of 30 rows per class: the seeding tests'
// classes.
absl::StatusOr<HppcaModel> FitFlat(const TwoLevelGenerator& gen) {
  const LabelledData train = gen.Sample(30, 10);
  HppcaOptions opt = SmallOptions();
  opt.superclasses = kFlatClassifier;
  NullRunContext ctx;
  return FitHppca(View(train.x), train.labels, opt, ctx);
}

// The tolerance on KL(p || q) as the assignment computes it. Its cross term
// F = tr(Sigma_q^{-1} E_p) (up to the noise) is formed in single precision,
// so the error scales with the terms that cancel in 2 KL, about d and
// tr(E_p) / noise_q, rather than with the divergence itself (a class against
// its own Theorem 2 centroid has KL 0).
double KlTolerance(const GaussianRef& p, const LowRankGaussian& q, double kl) {
  const double scale = static_cast<double>(p.dim()) + p.excess.sum() / q.noise;
  return 1e-6 * (std::fabs(kl) + scale);
}

// The clustering's inputs from a fitted model: its class Gaussians, and as
// centroids its super-classes' plus `extra` single-class Theorem 2 centroids
// (classes 0, step, 2 step, ...).
void ClusteringInputs(const HppcaModel& model, int extra, int step,
                      std::vector<GaussianRef>* classes, std::vector<LowRankGaussian>* cents) {
  *classes = ClassGaussians(model);
  for (int32_t s = 0; s < model.num_superclasses(); ++s) {
    cents->push_back(CentroidGaussian(model.superclass_centroid(s)));
  }
  for (int32_t c = 0; c < extra; ++c) {
    auto single = TheoremTwoCentroid({(*classes)[c * step]}, 6);
    ASSERT_TRUE(single.ok());
    cents->push_back(CentroidGaussian(*single));
  }
}

TEST(HppcaFitTest, KlAssignmentIsExactArgmin) {
  const TwoLevelGenerator gen(SmallSpec());
  const LabelledData train = gen.Sample(30, 9);
  NullRunContext ctx;
  auto model = FitHppca(View(train.x), train.labels, SmallOptions(), ctx);
  ASSERT_TRUE(model.ok());
  std::vector<GaussianRef> classes;
  std::vector<LowRankGaussian> cents;
  // Also against random other centroids (single classes), where bounds differ.
  ASSERT_NO_FATAL_FAILURE(ClusteringInputs(*model, 5, 7, &classes, &cents));
  // Both ways of computing the cross term, and the automatic choice.
  using hppca_internal::KlCrossTerm;
  for (KlCrossTerm how :
       {KlCrossTerm::kAuto, KlCrossTerm::kBasisProducts, KlCrossTerm::kGramProducts}) {
    SCOPED_TRACE(static_cast<int>(how));
    std::vector<double> kl;
    auto got = hppca_internal::AssignByKl(classes, cents, 2, &ctx, &kl, how);
    ASSERT_TRUE(got.ok());
    for (size_t i = 0; i < classes.size(); ++i) {
      int32_t best = 0;
      double best_v = std::numeric_limits<double>::infinity();
      for (size_t j = 0; j < cents.size(); ++j) {
        const double v = KlDivergence(classes[i], cents[j].ref());
        if (v < best_v) {
          best_v = v;
          best = static_cast<int32_t>(j);
        }
      }
      EXPECT_EQ((*got)[i], best) << "class " << i;
      EXPECT_NEAR(kl[i], best_v, KlTolerance(classes[i], cents[best], best_v));
    }
  }
  // Converged k-means: every class already sits in its KL-nearest super-class.
  ASSERT_TRUE(model->fit_stats().kmeans_converged);
  cents.resize(model->num_superclasses());
  auto again = hppca_internal::AssignByKl(classes, cents, 1, &ctx);
  ASSERT_TRUE(again.ok());
  for (int32_t c = 0; c < model->num_classes(); ++c) EXPECT_EQ((*again)[c], model->superclass_of(c));
}

TEST(HppcaFitTest, BhattacharyyaSeedsAreDistinctAndReproducible) {
  const TwoLevelGenerator gen(SmallSpec());
  NullRunContext ctx;
  auto model = FitFlat(gen);
  ASSERT_TRUE(model.ok());
  const std::vector<GaussianRef> classes = ClassGaussians(*model);
  auto a = hppca_internal::BhattacharyyaSeeds(classes, 12, 5, 2, &ctx);
  auto b = hppca_internal::BhattacharyyaSeeds(classes, 12, 5, 1, &ctx);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(std::set<int32_t>(a->begin(), a->end()).size(), 12u);
  // k-means++ spreads the seeds: the 6 first seeds cover more than one group.
  std::set<int32_t> groups;
  for (int i = 0; i < 6; ++i) groups.insert(gen.group_of((*a)[i]));
  EXPECT_GE(groups.size(), 4u);
  auto all = hppca_internal::BhattacharyyaSeeds(classes, model->num_classes(), 1, 2, &ctx);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(std::set<int32_t>(all->begin(), all->end()).size(),
            static_cast<size_t>(model->num_classes()));
}

TEST(HppcaFitTest, TopDirectionsKeepTheLeadingDirectionsAndTheTotalVariance) {
  const TwoLevelGenerator gen(SmallSpec());
  auto model = FitFlat(gen);
  ASSERT_TRUE(model.ok());
  const std::vector<GaussianRef> classes = ClassGaussians(*model);
  const int64_t d = classes[0].dim();
  auto trace = [&](const GaussianRef& g) { return g.excess.sum() + g.noise * d; };
  for (int32_t rank : {1, 3}) {
    const std::vector<GaussianRef> top = hppca_internal::TopDirections(classes, rank);
    ASSERT_EQ(top.size(), classes.size());
    for (size_t i = 0; i < classes.size(); ++i) {
      const GaussianRef& g = classes[i];
      ASSERT_GT(g.rank(), rank);
      for (int32_t j = 1; j < g.rank(); ++j) ASSERT_GE(g.excess[j - 1], g.excess[j]);
      EXPECT_EQ(top[i].rank(), rank);
      EXPECT_EQ(top[i].mean.data(), g.mean.data());  // a view, not a copy
      EXPECT_EQ(top[i].basis.data(), g.basis.data());
      EXPECT_EQ(top[i].excess[rank - 1], g.excess[rank - 1]);
      EXPECT_GT(top[i].noise, g.noise);
      EXPECT_NEAR(trace(top[i]), trace(g), 1e-12 * trace(g));
    }
  }
  // All the directions, or more than a class has: the classes unchanged.
  for (int32_t rank : {0, 6, 100}) {
    const std::vector<GaussianRef> same = hppca_internal::TopDirections(classes, rank);
    for (size_t i = 0; i < classes.size(); ++i) {
      EXPECT_EQ(same[i].rank(), classes[i].rank());
      EXPECT_EQ(same[i].noise, classes[i].noise);
    }
  }
}

TEST(HppcaFitTest, SeedingRankOfAllDirectionsIsTheUnreducedSeeding) {
  const TwoLevelGenerator gen(SmallSpec());
  const LabelledData train = gen.Sample(30, 10);
  NullRunContext ctx;
  HppcaOptions all = SmallOptions();  // q = 6
  all.seeding_rank = 0;
  HppcaOptions q = all;
  q.seeding_rank = 6;
  HppcaOptions fewer = all;
  fewer.seeding_rank = 2;
  auto a = FitHppca(View(train.x), train.labels, all, ctx);
  auto b = FitHppca(View(train.x), train.labels, q, ctx);
  auto c = FitHppca(View(train.x), train.labels, fewer, ctx);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  for (int32_t k = 0; k < a->num_classes(); ++k) EXPECT_EQ(a->superclass_of(k), b->superclass_of(k));
  // Fewer directions still give a partition into every super-class.
  std::set<int32_t> used;
  for (int32_t k = 0; k < c->num_classes(); ++k) used.insert(c->superclass_of(k));
  EXPECT_EQ(used.size(), 6u);
}

TEST(HppcaFitTest, SampledSeedingIsReproducibleAndHandlesEverySampleSize) {
  const TwoLevelGenerator gen(SmallSpec());
  NullRunContext ctx;
  auto model = FitFlat(gen);
  ASSERT_TRUE(model.ok());
  const std::vector<GaussianRef> classes = ClassGaussians(*model);
  const int32_t k = model->num_classes();
  const int32_t s = 6;
  // Samples from exactly S classes (then the seeds are the sample) to all of them.
  for (int64_t sample : {int64_t{s}, int64_t{s + 1}, int64_t{20}, int64_t{k - 1}, int64_t{k}}) {
    SCOPED_TRACE(sample);
    auto a = hppca_internal::BhattacharyyaSeeds(classes, s, 11, 2, &ctx, sample);
    auto b = hppca_internal::BhattacharyyaSeeds(classes, s, 11, 1, &ctx, sample);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(*a, *b);  // a function of the seed, not of the thread count
    ASSERT_EQ(a->size(), static_cast<size_t>(s));
    EXPECT_EQ(std::set<int32_t>(a->begin(), a->end()).size(), static_cast<size_t>(s));
    for (int32_t v : *a) {
      EXPECT_GE(v, 0);
      EXPECT_LT(v, k);
    }
  }
  // Out-of-range samples are clamped to [S, K]: above K is the unsampled
  // seeding (also the default), below S is a sample of S.
  auto full = hppca_internal::BhattacharyyaSeeds(classes, s, 11, 2, &ctx, k);
  auto above = hppca_internal::BhattacharyyaSeeds(classes, s, 11, 2, &ctx, 10 * k);
  auto deflt = hppca_internal::BhattacharyyaSeeds(classes, s, 11, 2, &ctx);
  auto exact = hppca_internal::BhattacharyyaSeeds(classes, s, 11, 2, &ctx, s);
  auto below = hppca_internal::BhattacharyyaSeeds(classes, s, 11, 2, &ctx, 1);
  ASSERT_TRUE(full.ok() && above.ok() && deflt.ok() && exact.ok() && below.ok());
  EXPECT_EQ(*above, *full);
  EXPECT_EQ(*deflt, *full);
  EXPECT_EQ(*below, *exact);
  // S = K: every class is a seed, whatever the sample asked for.
  auto all = hppca_internal::BhattacharyyaSeeds(classes, k, 3, 2, &ctx, 5);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(std::set<int32_t>(all->begin(), all->end()).size(), static_cast<size_t>(k));
  // Tiny K: two classes, one or two seeds, sampled or not.
  const std::vector<GaussianRef> two = {classes[0], classes[1]};
  for (int32_t ts : {1, 2}) {
    for (int64_t sample : {int64_t{1}, int64_t{2}}) {
      auto t = hppca_internal::BhattacharyyaSeeds(two, ts, 9, 2, &ctx, sample);
      ASSERT_TRUE(t.ok());
      EXPECT_EQ(t->size(), static_cast<size_t>(ts));
      EXPECT_EQ(std::set<int32_t>(t->begin(), t->end()).size(), static_cast<size_t>(ts));
    }
  }
  EXPECT_FALSE(hppca_internal::BhattacharyyaSeeds(two, 3, 9, 2, &ctx, 2).ok());
}

TEST(HppcaFitTest, KlCacheKeepsTheAssignmentExact) {
  const TwoLevelGenerator gen(SmallSpec());
  const LabelledData train = gen.Sample(30, 9);
  NullRunContext ctx;
  auto model = FitHppca(View(train.x), train.labels, SmallOptions(), ctx);
  ASSERT_TRUE(model.ok());
  std::vector<GaussianRef> classes;
  std::vector<LowRankGaussian> cents;
  ASSERT_NO_FATAL_FAILURE(ClusteringInputs(*model, 3, 5, &classes, &cents));
  // Brute force: argmin and the divergence of every pair.
  auto check = [&](const std::vector<int32_t>& got, const std::vector<double>& kl,
                   const hppca_internal::KlCache& cache) {
    ASSERT_EQ(cache.values.cols(), static_cast<int64_t>(cents.size()));
    for (size_t i = 0; i < classes.size(); ++i) {
      int32_t best = 0;
      double best_v = std::numeric_limits<double>::infinity();
      for (size_t j = 0; j < cents.size(); ++j) {
        const double v = KlDivergence(classes[i], cents[j].ref());
        EXPECT_TRUE(cache.valid[j]);
        EXPECT_NEAR(cache.values(i, j), v, KlTolerance(classes[i], cents[j], v)) << i << " " << j;
        if (v < best_v) {
          best_v = v;
          best = static_cast<int32_t>(j);
        }
      }
      EXPECT_EQ(got[i], best) << "class " << i;
      EXPECT_NEAR(kl[i], best_v, KlTolerance(classes[i], cents[best], best_v));
    }
  };
  using hppca_internal::KlCrossTerm;
  for (KlCrossTerm how :
       {KlCrossTerm::kAuto, KlCrossTerm::kBasisProducts, KlCrossTerm::kGramProducts}) {
    SCOPED_TRACE(static_cast<int>(how));
    std::vector<LowRankGaussian> saved = cents;
    hppca_internal::KlCache cache;
    std::vector<double> kl;
    auto got = hppca_internal::AssignByKl(classes, cents, 2, &ctx, &kl, how, &cache);
    ASSERT_TRUE(got.ok());
    check(*got, kl, cache);
    // Two centroids change (to other single classes): only their columns are
    // stale. Marking them is the caller's job; the rest is reused.
    for (int32_t j : {0, 2}) {
      auto single = TheoremTwoCentroid({classes[11 + 7 * j]}, 6);
      ASSERT_TRUE(single.ok());
      cents[j] = CentroidGaussian(*single);
      cache.valid[j] = 0;
    }
    got = hppca_internal::AssignByKl(classes, cents, 2, &ctx, &kl, how, &cache);
    ASSERT_TRUE(got.ok());
    check(*got, kl, cache);
    // A different number of centroids resets the cache.
    cents.pop_back();
    got = hppca_internal::AssignByKl(classes, cents, 1, &ctx, &kl, how, &cache);
    ASSERT_TRUE(got.ok());
    check(*got, kl, cache);
    cents = saved;
  }
}

class CancelAfter final : public RunContext {
 public:
  explicit CancelAfter(int polls) : polls_(polls) {}
  bool Cancelled() const override { return --polls_ < 0; }
  void Report(double f, std::string_view) override {
    EXPECT_GE(f, last_);
    EXPECT_LE(f, 1.0);
    last_ = f;
  }
  double last() const { return last_; }

 private:
  mutable int polls_;
  double last_ = 0.0;
};

class CancelAtStage final : public RunContext {
 public:
  explicit CancelAtStage(std::string stage) : stage_(std::move(stage)) {}
  bool Cancelled() const override { return seen_; }
  void Report(double, std::string_view stage) override { seen_ = seen_ || stage == stage_; }
  bool seen() const { return seen_; }

 private:
  std::string stage_;
  bool seen_ = false;
};

TEST(HppcaFitTest, CancellationAndMonotoneProgress) {
  const TwoLevelGenerator gen(SmallSpec());
  const LabelledData train = gen.Sample(30, 11);
  for (int polls : {0, 5, 15}) {
    CancelAfter ctx(polls);
    auto model = FitHppca(View(train.x), train.labels, SmallOptions(), ctx);
    ASSERT_FALSE(model.ok()) << polls;
    EXPECT_EQ(model.status().code(), absl::StatusCode::kCancelled);
  }
  // Cancelled while clustering (first report of that stage).
  for (bool raw : {false, true}) {
    CancelAtStage ctx("super-classes");
    HppcaOptions opt = SmallOptions();
    opt.raw_data_clustering = raw;
    auto model = FitHppca(View(train.x), train.labels, opt, ctx);
    EXPECT_EQ(model.status().code(), absl::StatusCode::kCancelled);
    EXPECT_TRUE(ctx.seen());
  }
  CancelAfter never(1 << 30);
  auto model = FitHppca(View(train.x), train.labels, SmallOptions(), never);
  ASSERT_TRUE(model.ok());
  EXPECT_EQ(never.last(), 1.0);
}

TEST(HppcaFitTest, BadInputIsRejectedWithClearErrors) {
  const TwoLevelGenerator gen(SmallSpec());
  LabelledData train = gen.Sample(10, 12);
  NullRunContext ctx;
  const HppcaOptions opt = SmallOptions();
  {  // labels length
    std::vector<int64_t> short_labels(train.labels.begin(), train.labels.end() - 1);
    auto m = FitHppca(View(train.x), short_labels, opt, ctx);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(m.status().message()), HasSubstr("labels"));
  }
  {  // one class
    std::vector<int64_t> same(train.labels.size(), 4);
    auto m = FitHppca(View(train.x), same, opt, ctx);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(m.status().message()), HasSubstr("at least 2 classes"));
  }
  {  // a class with a single point names its label
    std::vector<int64_t> labels = train.labels;
    labels[5] = 123456;
    auto m = FitHppca(View(train.x), labels, opt, ctx);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(m.status().message()), HasSubstr("class label 123456 has 1"));
  }
  {  // NaN in training rows names the row and column
    RowMatrixF x = train.x;
    x(37, 3) = std::numeric_limits<float>::quiet_NaN();
    x(90, 1) = std::numeric_limits<float>::infinity();
    auto m = FitHppca(View(x), train.labels, opt, ctx);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(m.status().message()), HasSubstr("row 37, column 3 is NaN"));
  }
  {  // options
    HppcaOptions bad = opt;
    bad.q = 25;
    EXPECT_THAT(std::string(FitHppca(View(train.x), train.labels, bad, ctx).status().message()),
                HasSubstr("q = 25"));
    bad = opt;
    bad.lambda = 0.0;
    EXPECT_THAT(std::string(FitHppca(View(train.x), train.labels, bad, ctx).status().message()),
                HasSubstr("lambda"));
    bad = opt;
    bad.superclasses = 43;
    EXPECT_THAT(std::string(FitHppca(View(train.x), train.labels, bad, ctx).status().message()),
                HasSubstr("exceeds the number of classes (42)"));
    bad = opt;
    bad.superclasses = -2;
    EXPECT_FALSE(FitHppca(View(train.x), train.labels, bad, ctx).ok());
    bad = opt;
    bad.seeding_rank = -1;
    EXPECT_THAT(std::string(FitHppca(View(train.x), train.labels, bad, ctx).status().message()),
                HasSubstr("seeding_rank = -1 must be >= 0"));
  }
  auto model = FitHppca(View(train.x), train.labels, opt, ctx);
  ASSERT_TRUE(model.ok());
  {  // wrong d at predict
    RowMatrixF x = RowMatrixF::Zero(3, 23);
    auto p = model->Predict(View(x), {});
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(p.status().message()), HasSubstr("rows have 23 columns; the model expects 24"));
    EXPECT_FALSE(model->ScoreClasses(View(x)).ok());
  }
  {  // NaN at predict
    RowMatrixF x = train.x.topRows(4);
    x(2, 5) = std::numeric_limits<float>::quiet_NaN();
    auto p = model->Predict(View(x), {});
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(p.status().message()), HasSubstr("row 2, column 5 is NaN"));
  }
  {  // top_k
    HppcaPredictOptions po;
    po.top_k = 0;
    EXPECT_EQ(model->Predict(View(train.x), po).status().code(), absl::StatusCode::kInvalidArgument);
    po.top_k = 1000;  // clamped to K
    auto p = model->Predict(View(train.x), po);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->top_k, 42);
  }
}

// Asked for more classes than the T best super-classes hold, a row opens
// more super-classes: every answer slot is a real class with a finite
// score, best first, and never a padding label.
TEST(HppcaFitTest, TopKBeyondTheOpenedClassesOpensMoreSuperclasses) {
  const TwoLevelGenerator gen(SmallSpec());
  const LabelledData train = gen.Sample(40, 21), test = gen.Sample(3, 22);
  NullRunContext ctx;
  auto model = FitHppca(View(train.x), train.labels, SmallOptions(), ctx);
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<size_t> sizes;
  for (int32_t j = 0; j < model->num_superclasses(); ++j) {
    sizes.push_back(model->superclass_members(j).size());
  }
  std::sort(sizes.begin(), sizes.end());
  const std::set<int64_t> real(train.labels.begin(), train.labels.end());
  auto cls = model->ScoreClasses(View(test.x));
  ASSERT_TRUE(cls.ok());
  for (int32_t top_k : {1, static_cast<int32_t>(sizes[0]) + 1, 20, 42}) {
    HppcaPredictOptions po;
    po.top_t = 1;
    po.top_k = top_k;
    auto p = model->Predict(View(test.x), po);
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_EQ(p->top_k, top_k);
    // The fewest super-classes whose smallest members cover top_k.
    int32_t need = 0;
    size_t covered = 0;
    while (covered < static_cast<size_t>(top_k)) covered += sizes[need++];
    EXPECT_EQ(p->top_t, std::max(1, need)) << "top_k " << top_k;
    for (int64_t i = 0; i < test.x.rows(); ++i) {
      EXPECT_GE(p->classes_evaluated[i], top_k);
      for (int32_t a = 0; a < top_k; ++a) {
        const int64_t o = i * top_k + a;
        ASSERT_GE(p->classes[o], 0) << "row " << i << " slot " << a;
        EXPECT_EQ(p->labels[o], model->labels()[p->classes[o]]);
        EXPECT_TRUE(real.count(p->labels[o]));
        EXPECT_TRUE(std::isfinite(p->scores[o]));
        if (a > 0) {
          EXPECT_LE(p->scores[o - 1], p->scores[o]);
        }
      }
    }
  }
}

// Rows are checked against the documented range before any arithmetic, so
// no input yields a NaN or infinite score; at the range's edge every
// score is finite.
TEST(HppcaFitTest, ScoresAreFiniteForEveryAcceptedRow) {
  const TwoLevelGenerator gen(SmallSpec());
  const LabelledData train = gen.Sample(40, 23);
  NullRunContext ctx;
  auto model = FitHppca(View(train.x), train.labels, SmallOptions(), ctx);
  ASSERT_TRUE(model.ok()) << model.status();
  RowMatrixF huge = RowMatrixF::Constant(2, 24, std::numeric_limits<float>::max());
  huge.row(1) *= -1.0f;
  auto refused = model->Predict(View(huge), {});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("row 0, column 0 is 3.40282e+38; values must lie in [-1e+09, 1e+09]"));
  RowMatrixF edge(4, 24);
  edge.row(0).setConstant(kHppcaMaxAbsValue);
  edge.row(1).setConstant(-kHppcaMaxAbsValue);
  for (int j = 0; j < 24; ++j) {
    edge(2, j) = j % 2 ? kHppcaMaxAbsValue : -kHppcaMaxAbsValue;
    edge(3, j) = j % 3 ? 0.0f : kHppcaMaxAbsValue;
  }
  for (bool flat : {false, true}) {
    HppcaPredictOptions po;
    po.flat = flat;
    po.top_k = 5;
    auto p = model->Predict(View(edge), po);
    ASSERT_TRUE(p.ok()) << p.status();
    for (float score : p->scores) EXPECT_TRUE(std::isfinite(score)) << score;
  }
  // Training rows obey the same range.
  RowMatrixF x = train.x;
  x(3, 2) = -2e9f;
  auto bad = FitHppca(View(x), train.labels, SmallOptions(), ctx);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("training data: row 3, column 2 is -2e+09"));
}

TEST(HppcaFitTest, TinyClassesFallBackToFewerComponentsWithoutNaN) {
  std::mt19937_64 rng(13);
  LabelledData data = RandomClasses({2, 3, 50, 50}, {10, 20, 30, 40}, 8, rng);
  HppcaOptions opt;
  opt.q = 5;
  opt.r = 4;
  opt.superclasses = 2;
  NullRunContext ctx;
  auto model = FitHppca(View(data.x), data.labels, opt, ctx);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->class_rank(0), 1);
  EXPECT_EQ(model->class_rank(1), 2);
  EXPECT_EQ(model->class_rank(2), 5);
  EXPECT_EQ(model->fit_stats().reduced_rank_classes, 2);
  auto scores = model->ScoreClasses(View(data.x));
  ASSERT_TRUE(scores.ok());
  EXPECT_TRUE(scores->allFinite());
  // Duplicate points: zero variance, still finite.
  RowMatrixF dup(4, 3);
  dup << 1, 2, 3, 1, 2, 3, 5, 5, 5, 5, 5, 6;
  std::vector<int64_t> labels = {0, 0, 1, 1};
  opt.q = 2;
  opt.r = 2;
  opt.superclasses = 1;
  auto m2 = FitHppca(View(dup), labels, opt, ctx);
  ASSERT_TRUE(m2.ok()) << m2.status();
  auto s2 = m2->ScoreClasses(View(dup));
  ASSERT_TRUE(s2.ok());
  EXPECT_TRUE(s2->allFinite());
  auto p = m2->Predict(View(dup), {});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->labels, labels);
}

TEST(HppcaFitTest, AddClassesFitsOnlyNewClassesAndUpdatesTheirSuperclasses) {
  const TwoLevelGenerator gen(SmallSpec());
  const LabelledData old_data = gen.Sample(30, 14, 0, 30);
  const LabelledData new_data = gen.Sample(30, 15, 30, 42);
  NullRunContext ctx;
  auto base = FitHppca(View(old_data.x), old_data.labels, SmallOptions(), ctx);
  ASSERT_TRUE(base.ok());
  HppcaAddOptions add;
  auto grown = AddClasses(*base, View(new_data.x), new_data.labels, add, ctx);
  ASSERT_TRUE(grown.ok()) << grown.status();
  ASSERT_EQ(grown->num_classes(), 42);
  EXPECT_EQ(grown->num_superclasses(), base->num_superclasses());
  // Old classes unchanged, in their old super-class.
  for (int32_t c = 0; c < base->num_classes(); ++c) {
    const int32_t g = grown->ClassOfLabel(base->labels()[c]);
    ASSERT_GE(g, 0);
    EXPECT_EQ(grown->class_mean(g), base->class_mean(c));
    EXPECT_EQ(grown->class_basis(g), base->class_basis(c));
    EXPECT_EQ(grown->superclass_of(g), base->superclass_of(c));
  }
  // New classes: the KL-nearest base super-class; that super-class's centroid
  // is Theorem 2 over all its members now.
  std::set<int32_t> grew;
  for (int32_t k = 30; k < 42; ++k) {
    const int32_t g = grown->ClassOfLabel(gen.label_of(k));
    ASSERT_GE(g, 0);
    int32_t best = 0;
    double best_v = std::numeric_limits<double>::infinity();
    for (int32_t s = 0; s < base->num_superclasses(); ++s) {
      const LowRankGaussian cg = CentroidGaussian(base->superclass_centroid(s));
      const double v = KlDivergence(grown->class_cluster_gaussian(g), cg.ref());
      if (v < best_v) {
        best_v = v;
        best = s;
      }
    }
    EXPECT_EQ(grown->superclass_of(g), best);
    grew.insert(best);
  }
  for (int32_t s = 0; s < grown->num_superclasses(); ++s) {
    std::vector<GaussianRef> members;
    for (int32_t c : grown->superclass_members(s)) members.push_back(grown->class_cluster_gaussian(c));
    auto want = TheoremTwoCentroid(members, 6);
    ASSERT_TRUE(want.ok());
    const Centroid& got = grown->superclass_centroid(s);
    EXPECT_LT((got.mean - want->mean).norm(), 1e-9 * (1 + want->mean.norm()));
    EXPECT_NEAR(got.trace, want->trace, 1e-9 * want->trace);
    if (!grew.count(s)) {
      EXPECT_EQ(got.mean, base->superclass_centroid(s).mean);
    }
  }
  // point_leaf covers both datasets.
  EXPECT_EQ(grown->hierarchy().point_leaf().size(), old_data.labels.size() + new_data.labels.size());
  // Errors.
  auto dup = AddClasses(*base, View(old_data.x), old_data.labels, add, ctx);
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(dup.status().message()), HasSubstr("already a class"));
  RowMatrixF narrow = RowMatrixF::Zero(4, 5);
  auto wrong = AddClasses(*base, View(narrow), {100, 100, 101, 101}, add, ctx);
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("the model expects 24"));
  // Recluster keeps S and reassigns everything.
  add.recluster = true;
  auto re = AddClasses(*base, View(new_data.x), new_data.labels, add, ctx);
  ASSERT_TRUE(re.ok());
  EXPECT_EQ(re->num_classes(), 42);
  EXPECT_EQ(re->num_superclasses(), 6);
  // A flat base stays flat.
  HppcaOptions flat = SmallOptions();
  flat.superclasses = kFlatClassifier;
  auto fb = FitHppca(View(old_data.x), old_data.labels, flat, ctx);
  ASSERT_TRUE(fb.ok());
  auto fg = AddClasses(*fb, View(new_data.x), new_data.labels, {}, ctx);
  ASSERT_TRUE(fg.ok());
  EXPECT_EQ(fg->num_superclasses(), 0);
  EXPECT_EQ(fg->num_classes(), 42);
}

}  // namespace
}  // namespace dendro
