// The "tneb" method through dendrod in-process over real gRPC: submit-time
// validation, the served tree against the core algorithm, label metrics in
// the model metadata, Assign, and reloading the model after a restart.
#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/hierarchy/export.h"
#include "core/metrics/metrics.h"
#include "core/tneb/tneb.h"
#include "dendro/v1/dendro.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/server_fixture.h"

namespace dendro::server {
namespace {

using ::testing::HasSubstr;

// Three Gaussian blobs in 3-D, the third column on a much larger scale.
std::vector<float> Blobs(int n, std::vector<int64_t>* labels) {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> nd;
  const double centre[3][2] = {{0, 0}, {10, 0}, {5, 9}};
  std::vector<float> x;
  for (int i = 0; i < n; ++i) {
    const int c = i % 3;
    labels->push_back(c);
    x.push_back(static_cast<float>(centre[c][0] + nd(rng)));
    x.push_back(static_cast<float>(centre[c][1] + nd(rng)));
    x.push_back(static_cast<float>(1000.0 * nd(rng)));
  }
  return x;
}

class TnebServerTest : public ServerTest {
 protected:
  v1::Job Submit(const std::string& dataset, const std::string& model, const v1::TnebParams& p,
                 grpc::Status* st) {
    v1::JobSpec spec;
    spec.set_dataset_id(dataset);
    spec.set_model_name(model);
    *spec.mutable_tneb() = p;
    return SubmitSpec(spec, st);
  }

  // Starts the server and uploads Blobs(n), with its labels, as `ds`.
  void StartWithBlobs(int n, std::vector<float>* x, v1::Dataset* ds) {
    StartServer();
    std::vector<int64_t> labels;
    *x = Blobs(n, &labels);
    ASSERT_TRUE(Upload(*x, n, 3, ds, &labels).ok());
  }

  // Submits a fit and waits for it: the served tree, or why there is none
  // (the submit's error, or the job's if it did not succeed).
  absl::StatusOr<Hierarchy> FitServed(const std::string& dataset, const std::string& model,
                                      const v1::TnebParams& p) {
    grpc::Status st;
    v1::Job job = Submit(dataset, model, p, &st);
    if (!st.ok()) return absl::InternalError("submit: " + st.error_message());
    job = Wait(job.id());
    if (job.state() != v1::JOB_STATE_SUCCEEDED) {
      return absl::InternalError("job: " + job.error().message());
    }
    return ServedTree(model);
  }
};

// SmallParams() as core options.
TnebOptions SmallOptions() {
  TnebOptions o;
  o.components = 6;
  o.restarts = 3;
  o.path_points = 30;
  o.path_steps = 40;
  o.eval_points = 128;
  o.standardize = true;
  o.seed = 4;
  return o;
}

v1::TnebParams SmallParams() {
  v1::TnebParams p;
  p.set_components(6);
  p.set_restarts(3);
  p.set_path_points(30);
  p.set_path_steps(40);
  p.set_eval_points(128);
  p.set_standardize(true);
  p.set_seed(4);
  return p;
}

TEST_F(TnebServerTest, FitAssignAndReload) {
  const int n = 900;
  std::vector<float> x;
  v1::Dataset ds;
  ASSERT_NO_FATAL_FAILURE(StartWithBlobs(n, &x, &ds));
  grpc::Status st;
  v1::Job job = Submit(ds.id(), "blobs", SmallParams(), &st);
  ASSERT_TRUE(st.ok()) << st.error_message();
  job = Wait(job.id());
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.error().message();
  EXPECT_DOUBLE_EQ(job.progress(), 1.0);

  // The served tree is what the core computes with the same options.
  TnebOptions o = SmallOptions();
  NullRunContext null_ctx;
  auto expected = FitTneb(MatrixView(x.data(), n, 3), o, null_ctx);
  ASSERT_TRUE(expected.ok()) << expected.status();
  auto tree = ServedTree("blobs");
  ASSERT_TRUE(tree.ok()) << tree.status();
  EXPECT_EQ(tree->num_leaves(), expected->hierarchy.num_leaves());
  EXPECT_EQ(tree->point_leaf(), expected->hierarchy.point_leaf());
  const auto& md = tree->metadata();
  EXPECT_EQ(md.at("method"), "tneb");
  EXPECT_EQ(md.at("true_k"), "3");
  EXPECT_EQ(md.at("auto_k"), "3");
  EXPECT_EQ(md.at("standardize"), "true");
  EXPECT_EQ(md.at("merge"), "persistence");
  // The diagnostics at the auto k: three balanced blobs are not degenerate.
  EXPECT_EQ(md.at("diag_k"), "3");
  EXPECT_EQ(md.at("diag_degenerate"), "false");
  EXPECT_EQ(md.count("warning"), 0u);
  EXPECT_EQ(md.at("diagnostics").rfind("k=3 ", 0), 0u);
  EXPECT_EQ(job.stage(), "done");
  EXPECT_GT(std::stod(md.at("ari_at_true_k")), 0.99);
  EXPECT_GT(std::stod(md.at("nmi_at_true_k")), 0.97);

  // Assign: leaves as in training, clusters the cut at level 3.
  v1::AssignResponse aresp;
  ASSERT_TRUE(Assign("blobs", x, n, 3, 3, &aresp).ok());
  auto cut = tree->CutToK(3);
  ASSERT_TRUE(cut.ok());
  ASSERT_EQ(aresp.leaf_size(), n);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(aresp.leaf(i), tree->point_leaf()[i]);
    EXPECT_EQ(aresp.cluster(i), (*cut)[aresp.leaf(i)]);
  }
  // Wrong width is rejected.
  v1::AssignResponse bad;
  EXPECT_EQ(Assign("blobs", std::vector<float>(8, 0.f), 4, 2, 0, &bad).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  // After a restart the model is loaded from disk and assigns the same way.
  StopServer();
  StartServer();
  v1::AssignResponse again;
  ASSERT_TRUE(Assign("blobs", x, n, 3, 3, &again).ok());
  ASSERT_EQ(again.leaf_size(), n);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(again.leaf(i), aresp.leaf(i));
    EXPECT_EQ(again.cluster(i), aresp.cluster(i));
  }
}

// merge, auto_dof and rank_restarts_by reach the core: the served tree is
// the core's with the same options.
TEST_F(TnebServerTest, MergeOrderAndAutoDofPassThrough) {
  const int n = 600;
  std::vector<float> x;
  v1::Dataset ds;
  ASSERT_NO_FATAL_FAILURE(StartWithBlobs(n, &x, &ds));
  v1::TnebParams p = SmallParams();
  p.set_merge("density");
  p.set_auto_dof(true);
  auto tree = FitServed(ds.id(), "density", p);
  ASSERT_TRUE(tree.ok()) << tree.status();

  TnebOptions o = SmallOptions();
  o.merge = TnebMerge::kDensity;
  o.auto_dof = true;
  NullRunContext null_ctx;
  auto expected = FitTneb(MatrixView(x.data(), n, 3), o, null_ctx);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ(tree->point_leaf(), expected->hierarchy.point_leaf());
  const auto& md = tree->metadata();
  EXPECT_EQ(md.at("merge"), "density");
  EXPECT_EQ(md.at("auto_dof"), "true");
  EXPECT_EQ(md.at("learn_dof"), expected->hierarchy.metadata().at("learn_dof"));
  EXPECT_EQ(md.at("bic_fixed_dof"), expected->hierarchy.metadata().at("bic_fixed_dof"));
  EXPECT_EQ(md.at("bic_gaussian"), expected->hierarchy.metadata().at("bic_gaussian"));
  EXPECT_EQ(md.at("gaussian"), expected->hierarchy.metadata().at("gaussian"));
  EXPECT_EQ(md.at("rank_restarts_by"), "kept_log_likelihood");

  // The authors' ranking of the restarts, by the whole mixture's likelihood.
  p.set_rank_restarts_by("log_likelihood");
  auto by_all = FitServed(ds.id(), "by-all", p);
  ASSERT_TRUE(by_all.ok()) << by_all.status();
  o.rank_restarts_by = TnebRestartRanking::kLogLikelihood;
  auto expected_all = FitTneb(MatrixView(x.data(), n, 3), o, null_ctx);
  ASSERT_TRUE(expected_all.ok()) << expected_all.status();
  EXPECT_EQ(by_all->metadata().at("rank_restarts_by"), "log_likelihood");
  EXPECT_EQ(by_all->metadata().at("log_likelihood"),
            expected_all->hierarchy.metadata().at("log_likelihood"));
}

// standardize_mode reaches the core. These blobs are elongated (about 50:1
// in their raw columns): "off", the paper's raw columns, leaves no
// component through the filter and the job fails; the default (auto) then
// standardises, as the core does.
TEST_F(TnebServerTest, StandardizeModeReachesTheCore) {
  const int n = 600;
  std::vector<float> x;
  v1::Dataset ds;
  ASSERT_NO_FATAL_FAILURE(StartWithBlobs(n, &x, &ds));
  v1::TnebParams p = SmallParams();
  p.set_standardize(false);
  p.set_standardize_mode("off");
  auto raw = FitServed(ds.id(), "raw", p);
  ASSERT_FALSE(raw.ok());
  EXPECT_THAT(std::string(raw.status().message()), HasSubstr("survived filtering"));
  p.clear_standardize_mode();
  auto automatic = FitServed(ds.id(), "auto", p);
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ(automatic->metadata().at("standardize_mode"), "auto");
  TnebOptions o = SmallOptions();
  o.standardize = false;
  NullRunContext null_ctx;
  auto expected = FitTneb(MatrixView(x.data(), n, 3), o, null_ctx);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ(automatic->metadata().at("standardize"), "true");
  EXPECT_EQ(automatic->metadata().at("standardize_reason"),
            expected->hierarchy.metadata().at("standardize_reason"));
  EXPECT_EQ(automatic->point_leaf(), expected->hierarchy.point_leaf());
}

// Without a nu, a fit of 3-column data chooses it by BIC (the default for
// d <= 10); a nu given, even the paper's 1, is kept fixed.
TEST_F(TnebServerTest, AGivenDofIsFixedAndNoneIsChosenByBic) {
  const int n = 600;
  std::vector<float> x;
  v1::Dataset ds;
  ASSERT_NO_FATAL_FAILURE(StartWithBlobs(n, &x, &ds));
  v1::TnebParams p = SmallParams();
  ASSERT_EQ(p.dof(), 0.0);
  auto chosen = FitServed(ds.id(), "default-dof", p);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(chosen->metadata().at("auto_dof"), "true");
  EXPECT_EQ(chosen->metadata().count("bic_learned_dof"), 1u);
  EXPECT_EQ(chosen->metadata().count("bic_gaussian"), 1u);

  p.set_dof(1.0);
  auto fixed = FitServed(ds.id(), "fixed-dof", p);
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ(fixed->metadata().count("auto_dof"), 0u);
  EXPECT_EQ(fixed->metadata().at("learn_dof"), "false");
  EXPECT_EQ(fixed->metadata().at("dof"), "1");
}

// Without a merge order, 20-column data merge in the paper's density order
// (the default above 10 columns; the neighbour graph would replace a
// degenerate tree, which these blobs do not give); an order given is used
// in every dimension.
TEST_F(TnebServerTest, AGivenMergeOrderHoldsInHighDimensions) {
  StartServer();
  const int n = 450;
  constexpr int kDim = 20;
  std::vector<int64_t> labels;
  const std::vector<float> blobs = Blobs(n, &labels);
  std::mt19937_64 rng(6);
  std::normal_distribution<double> nd;
  std::vector<float> x;
  for (int i = 0; i < n; ++i) {
    x.push_back(blobs[3 * i]);
    x.push_back(blobs[3 * i + 1]);
    for (int c = 2; c < kDim; ++c) x.push_back(static_cast<float>(nd(rng)));
  }
  v1::Dataset ds;
  ASSERT_TRUE(Upload(x, n, kDim, &ds, &labels).ok());
  v1::TnebParams p = SmallParams();
  auto by_default = FitServed(ds.id(), "default-merge", p);
  ASSERT_TRUE(by_default.ok()) << by_default.status();
  EXPECT_EQ(by_default->metadata().at("merge"), "density");
  EXPECT_EQ(by_default->metadata().count("merge_tried"), 0u);
  p.set_merge("graph");
  auto graph = FitServed(ds.id(), "graph", p);
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(graph->metadata().at("merge"), "graph");
  p.set_merge("persistence");
  auto given = FitServed(ds.id(), "persistence", p);
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ(given->metadata().at("merge"), "persistence");
}

TEST_F(TnebServerTest, BadParametersAreRejectedAtSubmit) {
  std::vector<float> x;
  v1::Dataset ds;
  ASSERT_NO_FATAL_FAILURE(StartWithBlobs(30, &x, &ds));
  // Each case: one change to the small parameters, and what the message says.
  struct BadCase {
    std::function<void(v1::TnebParams&)> change;
    const char* message;
  };
  const std::vector<BadCase> cases = {
      {[](v1::TnebParams& p) { p.set_components(-2); }, "mixture components"},
      {[](v1::TnebParams& p) { p.set_components(40); }, "30 rows but 40 mixture components"},
      {[](v1::TnebParams& p) { p.set_learning_rate(-1); }, "learning_rate"},
      {[](v1::TnebParams& p) { p.set_merge("single"); }, "tneb.merge"},
      {[](v1::TnebParams& p) { p.set_rank_restarts_by("bic"); },
       "tneb.rank_restarts_by must be 'kept_log_likelihood' or 'log_likelihood', got 'bic'"},
      {[](v1::TnebParams& p) { p.set_standardize_mode("yes"); },
       "tneb.standardize_mode: t-NEB standardize must be auto, on or off, got 'yes'"},
      {[](v1::TnebParams& p) { p.set_standardize_mode("off"); },
       "tneb.standardize is true but tneb.standardize_mode is 'off'"},
  };
  grpc::Status st;
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.message);
    v1::TnebParams p = SmallParams();
    c.change(p);
    Submit(ds.id(), "bad", p, &st);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr(c.message));
  }
  v1::Dataset one_col;
  ASSERT_TRUE(Upload(std::vector<float>(30, 1.f), 30, 1, &one_col).ok());
  Submit(one_col.id(), "bad", SmallParams(), &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("at least 2 columns"));
}

}  // namespace
}  // namespace dendro::server
