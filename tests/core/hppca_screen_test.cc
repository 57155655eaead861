// Single-row hierarchical prediction screened with binary16 bases
// (HppcaPredictOptions::screen_in_half): the kernels against double
// references within their stated bounds, and whole predictions against
// float32 scoring of every opened model, on random rows, on rows on the
// boundary between two answers (near ties that only rescoring gets right),
// and on extreme rows.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/hppca/half.h"
#include "core/hppca/hppca.h"
#include "core/hppca/synthetic.h"
#include "gtest/gtest.h"

namespace dendro {
namespace {

using hppca_internal::FromHalf;
using hppca_internal::Gamma;
using hppca_internal::HalfAvailable;
using hppca_internal::HalfGemvRows;
using hppca_internal::ToHalf;

MatrixView View(const RowMatrixF& m) { return MatrixView(m.data(), m.rows(), m.cols()); }

#define SKIP_WITHOUT_F16C() \
  if (!HalfAvailable()) GTEST_SKIP() << "this CPU lacks AVX2, FMA or F16C: nothing is screened"

TEST(HalfTest, RoundTripsAndRoundsToNearest) {
  SKIP_WITHOUT_F16C();
  // Exactly representable values come back unchanged; others to the nearest
  // binary16 (11 significant bits), overflow to infinity; any length.
  const std::vector<float> in = {
      0.0f, 1.0f, -2.5f, 65504.0f, 0x1p-14f, 0x1p-24f, 1.0f + 0x1p-11f, 1.0f + 0x1.8p-11f,
      1e6f, 0.1f, -3.0f};
  std::vector<uint16_t> h(in.size());
  std::vector<float> back(in.size());
  ToHalf(in.data(), static_cast<int64_t>(in.size()), h.data());
  FromHalf(h.data(), static_cast<int64_t>(in.size()), back.data());
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(back[i], in[i]) << i;
  EXPECT_EQ(back[6], 1.0f);             // a tie: to even
  EXPECT_EQ(back[7], 1.0f + 0x1p-10f);  // above the tie: up
  EXPECT_TRUE(std::isinf(back[8]));     // beyond 65504
  EXPECT_NEAR(back[9], 0.1f, 0.1f * 0x1p-11f);
  EXPECT_EQ(back[10], -3.0f);
}

TEST(HalfTest, ProductsAreWithinTheirBoundOfExact) {
  SKIP_WITHOUT_F16C();
  std::mt19937_64 rng(5);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (int64_t d : {1, 7, 8, 13, 64, 128, 301}) {
    for (int64_t rows : {1, 3, 4, 5, 9}) {
      std::vector<float> v(rows * d), x(d), y(rows);
      for (float& a : v) a = n(rng);
      for (float& a : x) a = 10.0f * n(rng);
      std::vector<uint16_t> h(v.size());
      ToHalf(v.data(), static_cast<int64_t>(v.size()), h.data());
      std::vector<float> hv(v.size());
      FromHalf(h.data(), static_cast<int64_t>(h.size()), hv.data());
      HalfGemvRows(h.data(), rows, d, x.data(), 1, d, y.data(), rows);
      for (int64_t r = 0; r < rows; ++r) {
        double exact = 0, abs_sum = 0;
        for (int64_t i = 0; i < d; ++i) {
          exact += static_cast<double>(x[i]) * hv[r * d + i];
          abs_sum += std::abs(static_cast<double>(x[i]) * hv[r * d + i]);
        }
        EXPECT_LE(std::abs(y[r] - exact), Gamma(d) * abs_sum) << "d " << d << " row " << r;
      }
    }
  }
}

TEST(HalfTest, ProductsOfSeveralRowsAreWithinTheBoundAndMatchOneRowAtATime) {
  SKIP_WITHOUT_F16C();
  std::mt19937_64 rng(6);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (int64_t d : {5, 8, 40, 131}) {
    for (int64_t rows : {1, 2, 3, 7}) {
      for (int64_t nx : {1, 3, 4, 5, 9}) {
        std::vector<float> v(rows * d), x(nx * (d + 2)), y(nx * (rows + 1), -1.0f);
        for (float& a : v) a = n(rng);
        for (float& a : x) a = n(rng);
        std::vector<uint16_t> h(v.size());
        ToHalf(v.data(), static_cast<int64_t>(v.size()), h.data());
        std::vector<float> hv(v.size());
        FromHalf(h.data(), static_cast<int64_t>(h.size()), hv.data());
        // Rows of x and of y with strides wider than their lengths.
        HalfGemvRows(h.data(), rows, d, x.data(), nx, d + 2, y.data(), rows + 1);
        for (int64_t j = 0; j < nx; ++j) {
          for (int64_t r = 0; r < rows; ++r) {
            double exact = 0, abs_sum = 0;
            for (int64_t i = 0; i < d; ++i) {
              const double t = static_cast<double>(x[j * (d + 2) + i]) * hv[r * d + i];
              exact += t;
              abs_sum += std::abs(t);
            }
            EXPECT_LE(std::abs(y[j * (rows + 1) + r] - exact), Gamma(d) * abs_sum)
                << "d " << d << " rows " << rows << " nx " << nx;
          }
          EXPECT_EQ(y[j * (rows + 1) + rows], -1.0f) << "wrote past a row of y";
        }
      }
    }
  }
}

// Predictions with and without screening, compared field by field.
void ExpectSamePrediction(const HppcaModel& model, const RowMatrixF& x, HppcaPredictOptions po) {
  po.screen_in_half = true;
  auto screened = model.Predict(View(x), po);
  po.screen_in_half = false;
  auto reference = model.Predict(View(x), po);
  ASSERT_TRUE(screened.ok()) << screened.status();
  ASSERT_TRUE(reference.ok()) << reference.status();
  EXPECT_EQ(screened->top_t, reference->top_t);
  EXPECT_EQ(screened->superclasses, reference->superclasses);
  EXPECT_EQ(screened->classes, reference->classes);
  EXPECT_EQ(screened->labels, reference->labels);
  EXPECT_EQ(screened->classes_evaluated, reference->classes_evaluated);
  // Scores agree to float32's rounding of |x - mean|^2 - |projection|^2 (two
  // float32 computations of one score, grouped differently, differ by that
  // much: 1e-3 at lambda = 0.01 on these rows, as flat and hierarchical do).
  ASSERT_EQ(screened->scores.size(), reference->scores.size());
  for (size_t i = 0; i < screened->scores.size(); ++i) {
    EXPECT_NEAR(screened->scores[i], reference->scores[i],
                1e-5 * std::abs(reference->scores[i]) + 2e-3)
        << i;
  }
}

class HppcaScreenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TwoLevelSpec spec;
    spec.groups = 8;
    spec.classes_per_group = 9;
    spec.dim = 40;
    spec.group_rank = 5;
    spec.class_rank = 5;
    spec.group_spread = 0.8;
    spec.class_spread = 0.15;
    spec.class_scale = 0.3;
    spec.noise = 0.15;
    gen_.emplace(spec);
    train_ = gen_->Sample(30, 11);
    HppcaOptions opt;
    opt.q = 8;
    opt.r = 8;
    opt.superclasses = 8;
    opt.scoring = HppcaScoring::kHierarchical;
    NullRunContext ctx;
    auto model = FitHppca(View(train_.x), train_.labels, opt, ctx);
    ASSERT_TRUE(model.ok()) << model.status();
    model_.emplace(std::move(*model));
  }
  std::optional<TwoLevelGenerator> gen_;
  LabelledData train_;
  std::optional<HppcaModel> model_;
};

TEST_F(HppcaScreenTest, SingleRowsGetTheFloat32Answer) {
  SKIP_WITHOUT_F16C();
  const LabelledData test = gen_->Sample(3, 12);
  for (int32_t top_k : {1, 4}) {
    for (int32_t top_t : {0, 1, 3}) {
      HppcaPredictOptions po;
      po.top_k = top_k;
      po.top_t = top_t;
      for (int64_t i = 0; i < test.x.rows(); ++i) {
        const RowMatrixF row = test.x.row(i);
        ExpectSamePrediction(*model_, row, po);
      }
    }
  }
}

TEST_F(HppcaScreenTest, CallsOfAFewRowsGetTheFloat32Answer) {
  SKIP_WITHOUT_F16C();
  const LabelledData test = gen_->Sample(1, 13);
  for (int64_t n : {int64_t{2}, int64_t{5}, int64_t{9}, int64_t{13}, kHppcaScreenMaxRows}) {
    const RowMatrixF rows = test.x.topRows(n);
    for (int threads : {1, 2}) {
      HppcaPredictOptions po;
      po.top_k = 3;
      po.num_threads = threads;
      ExpectSamePrediction(*model_, rows, po);
    }
  }
}

// A basis entry beyond binary16's range (a model file no fit writes: bases
// are unit eigenvectors) leaves no bound to screen with; that model scores
// in float32 and answers as float32 does.
TEST_F(HppcaScreenTest, BasesBeyondHalfRangeAreScoredInFloat32) {
  SKIP_WITHOUT_F16C();
  EXPECT_TRUE(model_->screens_rows());
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("hppca_screen_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(model_->Save(dir.string()).ok());
  {
    // The last value of class_bases.npy (float32, C order) becomes 1e6.
    std::fstream f(dir / "class_bases.npy", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-4, std::ios::end);
    const float big = 1e6f;
    f.write(reinterpret_cast<const char*>(&big), 4);
  }
  auto loaded = HppcaModel::Load(dir.string());
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(loaded->screens_rows());
  const LabelledData test = gen_->Sample(1, 15);
  HppcaPredictOptions po;
  po.top_k = 2;
  ExpectSamePrediction(*loaded, test.x.topRows(5), po);
}

// What dynamic batching relies on: a row's answer does not depend on the
// rows scored with it (the same classes and bit-identical scores).
TEST_F(HppcaScreenTest, ARowGetsTheSameAnswerAloneAndInACall) {
  SKIP_WITHOUT_F16C();
  const LabelledData test = gen_->Sample(1, 14);
  const RowMatrixF rows = test.x.topRows(kHppcaScreenMaxRows);
  HppcaPredictOptions po;
  po.top_k = 3;
  auto together = model_->Predict(View(rows), po);
  ASSERT_TRUE(together.ok()) << together.status();
  for (int64_t i = 0; i < rows.rows(); ++i) {
    const RowMatrixF row = rows.row(i);
    auto alone = model_->Predict(View(row), po);
    ASSERT_TRUE(alone.ok()) << alone.status();
    for (int32_t a = 0; a < 3; ++a) {
      EXPECT_EQ(alone->classes[a], together->classes[i * 3 + a]) << i;
      EXPECT_EQ(alone->scores[a], together->scores[i * 3 + a]) << i;
    }
    for (int32_t a = 0; a < alone->top_t; ++a) {
      EXPECT_EQ(alone->superclasses[a], together->superclasses[i * alone->top_t + a]) << i;
    }
  }
}

// Rows near the boundary between two answers: on the segment between two
// training rows of different classes, bisected (with float32 scoring) to
// where the best class changes, then stepped back out, doubling the step,
// until the deciding gaps -- best class against the second among the opened
// super-classes' classes, and the T-th super-class against the next -- are
// above float32's own noise (kGap) on the row. There the binary16 errors are
// larger than those gaps, so only the rescoring the bounds ask for gets these
// answers right (with the bounds set to zero this test fails).
TEST_F(HppcaScreenTest, RowsNearTheBoundaryBetweenTwoAnswersGetTheFloat32Answer) {
  SKIP_WITHOUT_F16C();
  constexpr double kGap = 0.02;  // 10x the score noise of ExpectSamePrediction
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<int64_t> pick(0, train_.x.rows() - 1);
  HppcaPredictOptions f32;
  f32.screen_in_half = false;
  const int32_t t = 3;
  f32.top_t = t;
  const auto best = [&](const RowMatrixF& row) {
    auto p = model_->Predict(View(row), f32);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? p->classes[0] : -1;
  };
  // The smaller of the two deciding gaps at `row`.
  const auto margin = [&](const RowMatrixF& row) {
    auto sup = model_->ScoreSuperclasses(View(row));
    auto cls = model_->ScoreClasses(View(row));
    auto p = model_->Predict(View(row), f32);
    EXPECT_TRUE(sup.ok() && cls.ok() && p.ok());
    std::vector<double> s(sup->data(), sup->data() + sup->size());
    std::sort(s.begin(), s.end());
    std::vector<double> c;
    for (int32_t j : p->superclasses) {
      for (int32_t k = 0; k < model_->num_classes(); ++k) {
        if (model_->superclass_of(k) == j) c.push_back((*cls)(0, k));
      }
    }
    std::sort(c.begin(), c.end());
    return std::min(s[t] - s[t - 1], c[1] - c[0]);
  };
  int tested = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t a = pick(rng), b = pick(rng);
    const auto at = [&](double w) -> RowMatrixF {
      return (w * train_.x.row(a).cast<double>() + (1.0 - w) * train_.x.row(b).cast<double>())
          .cast<float>();
    };
    double lo = 0.0, hi = 1.0;
    const int32_t c_lo = best(at(lo));
    if (c_lo == best(at(hi))) continue;
    for (int it = 0; it < 40; ++it) {
      const double mid = 0.5 * (lo + hi);
      (best(at(mid)) == c_lo ? lo : hi) = mid;
    }
    for (double w0 : {lo, hi}) {
      const double dir = w0 == lo ? -1.0 : 1.0;
      for (double step = 1e-9; step < 0.5; step *= 2) {
        const RowMatrixF row = at(w0 + dir * step);
        if (margin(row) < kGap) continue;
        ++tested;
        ExpectSamePrediction(*model_, row, f32);
        break;
      }
    }
  }
  EXPECT_GT(tested, 40);
}

TEST_F(HppcaScreenTest, ExtremeRowsGetTheFloat32Answer) {
  SKIP_WITHOUT_F16C();
  const int64_t d = train_.x.cols();
  RowMatrixF edge(4, d);
  edge.row(0).setConstant(kHppcaMaxAbsValue);
  edge.row(1).setConstant(-kHppcaMaxAbsValue);
  for (int64_t j = 0; j < d; ++j) {
    edge(2, j) = j % 2 ? kHppcaMaxAbsValue : -kHppcaMaxAbsValue;
    edge(3, j) = j % 3 ? 0.0f : 1e-30f;
  }
  HppcaPredictOptions po;
  po.top_k = 3;
  for (int64_t i = 0; i < edge.rows(); ++i) {
    const RowMatrixF row = edge.row(i);
    ExpectSamePrediction(*model_, row, po);
  }
}

}  // namespace
}  // namespace dendro
