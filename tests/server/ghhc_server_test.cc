// The "ghhc" method through dendrod in-process over real gRPC: submit-time
// validation, the served tree against the core algorithm, dendrogram purity
// in the model metadata, Assign, cancellation, and reloading the model after
// a restart.
#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/ghhc/ghhc.h"
#include "core/hierarchy/export.h"
#include "core/metrics/metrics.h"
#include "dendro/v1/dendro.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/server_fixture.h"

namespace dendro::server {
namespace {

using ::testing::HasSubstr;

// Six Gaussian blobs in 8-D.
std::vector<float> Blobs(int n, std::vector<int64_t>* labels) {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> nd;
  std::vector<double> centres(6 * 8);
  for (double& c : centres) c = 4.0 * nd(rng);
  std::vector<float> x;
  for (int i = 0; i < n; ++i) {
    const int c = i % 6;
    labels->push_back(c);
    for (int j = 0; j < 8; ++j) x.push_back(static_cast<float>(centres[c * 8 + j] + nd(rng)));
  }
  return x;
}

class GhhcServerTest : public ServerTest {
 protected:
  v1::Job Submit(const std::string& dataset, const std::string& model, const v1::GhhcParams& p,
                 grpc::Status* st) {
    v1::JobSpec spec;
    spec.set_dataset_id(dataset);
    spec.set_model_name(model);
    *spec.mutable_ghhc() = p;
    return SubmitSpec(spec, st);
  }

  // Uploads n x 8 rows with labels and fits `model` with `p` to success.
  void UploadAndFit(const std::vector<float>& x, int n, const std::vector<int64_t>& labels,
                    const std::string& model, const v1::GhhcParams& p) {
    v1::Dataset ds;
    ASSERT_TRUE(Upload(x, n, 8, &ds, &labels).ok());
    grpc::Status st;
    v1::Job job = Submit(ds.id(), model, p, &st);
    ASSERT_TRUE(st.ok()) << st.error_message();
    job = Wait(job.id());
    ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.error().message();
    EXPECT_DOUBLE_EQ(job.progress(), 1.0);
  }

  // The served metadata of the latest version of `model`.
  std::map<std::string, std::string> Metadata(const std::string& model) {
    grpc::ClientContext ctx;
    v1::GetModelRequest req;
    req.mutable_model()->set_name(model);
    v1::Model m;
    EXPECT_TRUE(models_->GetModel(&ctx, req, &m).ok());
    EXPECT_EQ(m.input_dim(), 8);
    return {m.metadata().begin(), m.metadata().end()};
  }

  // Assign of the n training rows gives `expected`, and the same again after
  // a restart (the model then comes from disk).
  void ExpectAssignAcrossRestart(const std::string& model, const std::vector<float>& x, int n,
                                 const std::vector<int32_t>& expected) {
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 1) {
        StopServer();
        StartServer();
      }
      v1::AssignResponse resp;
      ASSERT_TRUE(Assign(model, x, n, 8, 0, &resp).ok());
      ASSERT_EQ(resp.leaf_size(), n);
      for (int i = 0; i < n; ++i) {
        ASSERT_EQ(resp.leaf(i), expected[i]) << "pass " << pass << ", row " << i;
      }
    }
  }
};

// The core options SmallParams() stands for.
GhhcOptions SmallOptions() {
  GhhcOptions o;
  o.internal_nodes = 30;
  o.triples = 6000;
  o.batch_size = 50;
  o.seed = 4;
  return o;
}

v1::GhhcParams SmallParams() {
  v1::GhhcParams p;
  p.set_internal_nodes(30);
  p.set_triples(6000);
  p.set_batch_size(50);
  p.set_seed(4);
  return p;
}

TEST_F(GhhcServerTest, FitAssignAndReload) {
  StartServer();
  const int n = 900;
  std::vector<int64_t> labels;
  const std::vector<float> x = Blobs(n, &labels);
  ASSERT_NO_FATAL_FAILURE(UploadAndFit(x, n, labels, "blobs", SmallParams()));

  // The served tree is what the core computes with the same options (the
  // exact neighbour search makes it independent of the thread count).
  NullRunContext null_ctx;
  auto expected = FitGhhc(MatrixView(x.data(), n, 8), SmallOptions(), null_ctx);
  ASSERT_TRUE(expected.ok()) << expected.status();
  grpc::ClientContext tctx;
  v1::GetTreeRequest treq;
  treq.mutable_model()->set_name("blobs");
  treq.set_format(v1::TREE_FORMAT_JSON);
  treq.set_include_points(true);
  v1::GetTreeResponse tresp;
  ASSERT_TRUE(models_->GetTree(&tctx, treq, &tresp).ok());
  auto tree = ParseJson(tresp.content());
  ASSERT_TRUE(tree.ok()) << tree.status();
  EXPECT_EQ(tree->num_leaves(), expected->hierarchy.num_leaves());
  EXPECT_EQ(tree->num_nodes(), expected->hierarchy.num_nodes());
  EXPECT_EQ(tree->point_leaf(), expected->hierarchy.point_leaf());
  const auto& md = tree->metadata();
  EXPECT_EQ(md.at("method"), "ghhc");
  EXPECT_EQ(md.at("internal_nodes"), "30");
  EXPECT_EQ(md.at("triples"), "6000");
  // Purity as the paper defines it (on the extracted tree), and of the
  // served refinement.
  auto dp = DendrogramPurity(expected->coarse_hierarchy, {}, labels);
  ASSERT_TRUE(dp.ok());
  EXPECT_NEAR(std::stod(md.at("dendrogram_purity")), *dp, 1e-6);
  auto dp_refined = DendrogramPurity(expected->hierarchy, {}, labels);
  ASSERT_TRUE(dp_refined.ok());
  EXPECT_NEAR(std::stod(md.at("dendrogram_purity_refined")), *dp_refined, 1e-6);
  EXPECT_TRUE(tree->is_binary());

  // Assign: the training rows land in their training leaves.
  v1::AssignResponse aresp;
  ASSERT_TRUE(Assign("blobs", x, n, 8, 0, &aresp).ok());
  ASSERT_EQ(aresp.leaf_size(), n);
  for (int i = 0; i < n; ++i) EXPECT_EQ(aresp.leaf(i), tree->point_leaf()[i]);
  v1::AssignResponse bad;
  EXPECT_EQ(Assign("blobs", std::vector<float>(8, 0.f), 2, 4, 0, &bad).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  // After a restart the model is loaded from disk and assigns the same way.
  StopServer();
  StartServer();
  v1::AssignResponse again;
  ASSERT_TRUE(Assign("blobs", x, n, 8, 0, &again).ok());
  ASSERT_EQ(again.leaf_size(), n);
  for (int i = 0; i < n; ++i) EXPECT_EQ(again.leaf(i), aresp.leaf(i));
}

TEST_F(GhhcServerTest, ParametersReachTheCoreAndProjectionSurvivesReload) {
  StartServer();
  const int n = 600;
  std::vector<int64_t> labels;
  const std::vector<float> x = Blobs(n, &labels);
  v1::GhhcParams p = SmallParams();
  p.set_projection_dim(4);
  p.set_projection("random");
  p.set_no_center(true);
  p.set_margin_every(-1);
  p.set_link("softplus");
  ASSERT_NO_FATAL_FAILURE(UploadAndFit(x, n, labels, "projected", p));

  GhhcOptions o = SmallOptions();
  o.projection_dim = 4;
  o.projection = GhhcProjection::kRandom;
  o.center = false;
  o.margin_every = 0;
  o.link = GhhcLink::kSoftplus;
  NullRunContext null_ctx;
  auto expected = FitGhhc(MatrixView(x.data(), n, 8), o, null_ctx);
  ASSERT_TRUE(expected.ok()) << expected.status();
  const auto md = Metadata("projected");
  EXPECT_EQ(md.at("ball_dim"), "4");
  EXPECT_EQ(md.at("projection"), "random");
  EXPECT_EQ(md.at("center"), "false");
  EXPECT_EQ(md.at("margin_every"), "0");
  EXPECT_EQ(md.at("link"), "softplus");
  ExpectAssignAcrossRestart("projected", x, n, expected->hierarchy.point_leaf());
}

// The learned-point, noise, validation and seed parameters reach the core:
// seed 0 is seed 0 (not the default 1), gumbel_temperature -1 is no noise,
// validation_triples -1 keeps the last state; Assign of a learned-point model
// goes through the nearest training row, before and after a restart.
TEST_F(GhhcServerTest, LearnedPointsSeedZeroAndValidationReachTheCore) {
  StartServer();
  const int n = 600;
  std::vector<int64_t> labels;
  const std::vector<float> x = Blobs(n, &labels);
  v1::GhhcParams p = SmallParams();
  p.set_seed(0);
  p.set_learn_points(true);
  p.set_point_learning_rate(0.002);
  p.set_gumbel_temperature(-1);
  p.set_validation_triples(-1);
  ASSERT_NO_FATAL_FAILURE(UploadAndFit(x, n, labels, "learned", p));
  GhhcOptions o = SmallOptions();
  o.seed = 0;
  o.learn_points = true;
  o.point_learning_rate = 0.002;
  o.gumbel_temperature = 0;
  o.validation_triples = 0;
  NullRunContext null_ctx;
  auto expected = FitGhhc(MatrixView(x.data(), n, 8), o, null_ctx);
  ASSERT_TRUE(expected.ok()) << expected.status();
  o.seed = 1;
  auto seed_one = FitGhhc(MatrixView(x.data(), n, 8), o, null_ctx);
  ASSERT_TRUE(seed_one.ok()) << seed_one.status();
  ASSERT_NE(expected->model.nodes, seed_one->model.nodes);  // seeds 0 and 1 differ
  const auto md = Metadata("learned");
  EXPECT_EQ(md.at("seed"), "0");
  EXPECT_EQ(md.at("learn_points"), "true");
  EXPECT_EQ(md.at("point_learning_rate"), "0.002");
  EXPECT_EQ(md.at("gumbel_temperature"), "0");
  EXPECT_EQ(md.at("validation_triples"), "0");
  ExpectAssignAcrossRestart("learned", x, n, expected->hierarchy.point_leaf());
}

// A run longer than the default length takes scaled node steps (the step
// budget) unless constant_step_size asks for the learning rate as given.
TEST_F(GhhcServerTest, LongRunsHaveAStepBudgetUnlessConstantStepSizeIsSet) {
  StartServer();
  const int n = 300;
  std::vector<int64_t> labels;
  const std::vector<float> x = Blobs(n, &labels);
  v1::GhhcParams p = SmallParams();
  p.set_internal_nodes(8);
  p.set_triples(kGhhcDefaultTriples * 5 / 4);
  ASSERT_NO_FATAL_FAILURE(UploadAndFit(x, n, labels, "budget", p));
  p.set_constant_step_size(true);
  ASSERT_NO_FATAL_FAILURE(UploadAndFit(x, n, labels, "constant", p));
  EXPECT_EQ(Metadata("budget").at("step_scale"), "0.8");
  EXPECT_EQ(Metadata("constant").at("step_scale"), "1");
}

// points "auto" reaches the core: the served tree is what the core's
// choose_points gives, and its metadata say how it was chosen. Unset, a
// dataset this small is chosen for too (choose_points_max_rows); "fixed"
// turns that off.
TEST_F(GhhcServerTest, PointsAutoChoosesByValidation) {
  StartServer();
  const int n = 600;
  std::vector<int64_t> labels;
  const std::vector<float> x = Blobs(n, &labels);
  v1::GhhcParams p = SmallParams();
  p.set_points("auto");
  ASSERT_NO_FATAL_FAILURE(UploadAndFit(x, n, labels, "auto", p));
  GhhcOptions o = SmallOptions();
  o.choose_points = true;
  NullRunContext null_ctx;
  auto expected = FitGhhc(MatrixView(x.data(), n, 8), o, null_ctx);
  ASSERT_TRUE(expected.ok()) << expected.status();
  const auto md = Metadata("auto");
  EXPECT_EQ(md.at("points_chosen_by"), "validation");
  EXPECT_EQ(md.at("learn_points"), expected->hierarchy.metadata().at("learn_points"));
  EXPECT_EQ(md.at("learned_points_validation_accuracy"),
            expected->hierarchy.metadata().at("learned_points_validation_accuracy"));
  ExpectAssignAcrossRestart("auto", x, n, expected->hierarchy.point_leaf());

  ASSERT_NO_FATAL_FAILURE(UploadAndFit(x, n, labels, "default", SmallParams()));
  EXPECT_EQ(Metadata("default").at("points_chosen_by"), "validation");
  EXPECT_EQ(Metadata("default").at("learned_points_validation_accuracy"),
            md.at("learned_points_validation_accuracy"));
  p = SmallParams();
  p.set_points("fixed");
  ASSERT_NO_FATAL_FAILURE(UploadAndFit(x, n, labels, "fixed", p));
  EXPECT_EQ(Metadata("fixed").count("points_chosen_by"), 0u);
  EXPECT_EQ(Metadata("fixed").at("learn_points"), "false");
}

// standardize reaches the core: "on" divides the columns (the served model
// assigns its training rows back to their leaves through the stored
// divisors); the default leaves blobs of one scale as they are.
TEST_F(GhhcServerTest, StandardizeReachesTheCore) {
  StartServer();
  const int n = 300;
  std::vector<int64_t> labels;
  const std::vector<float> x = Blobs(n, &labels);
  v1::GhhcParams p = SmallParams();
  p.set_standardize("on");
  ASSERT_NO_FATAL_FAILURE(UploadAndFit(x, n, labels, "std_on", p));
  EXPECT_EQ(Metadata("std_on").at("standardized"), "true");
  GhhcOptions o = SmallOptions();
  o.standardize = GhhcStandardize::kOn;
  NullRunContext null_ctx;
  auto expected = FitGhhc(MatrixView(x.data(), n, 8), o, null_ctx);
  ASSERT_TRUE(expected.ok()) << expected.status();
  ExpectAssignAcrossRestart("std_on", x, n, expected->hierarchy.point_leaf());
  ASSERT_NO_FATAL_FAILURE(UploadAndFit(x, n, labels, "std_default", SmallParams()));
  EXPECT_EQ(Metadata("std_default").at("standardized"), "false");
}

TEST_F(GhhcServerTest, BadParametersAreRejectedAtSubmit) {
  StartServer();
  std::vector<int64_t> labels;
  const std::vector<float> x = Blobs(30, &labels);
  v1::Dataset ds;
  ASSERT_TRUE(Upload(x, 30, 8, &ds).ok());
  // Each case: one change to the small parameters, and what the message says.
  struct BadCase {
    std::function<void(v1::GhhcParams&)> change;
    const char* message;
  };
  const std::vector<BadCase> cases = {
      {[](v1::GhhcParams& p) { p.set_internal_nodes(-2); }, "ghhc.internal_nodes must be >= 0"},
      {[](v1::GhhcParams& p) { p.set_internal_nodes(1); }, "internal_nodes (M) must be >= 2"},
      {[](v1::GhhcParams& p) { p.set_max_node_norm(0.95); }, "max_node_norm"},
      {[](v1::GhhcParams& p) { p.set_projection_dim(8); },
       "projection_dim must be below the dataset's 8"},
      {[](v1::GhhcParams& p) { p.set_projection("svd"); }, "ghhc.projection must be pca or random"},
      {[](v1::GhhcParams& p) { p.set_link("relu"); }, "ghhc.link must be"},
      {[](v1::GhhcParams& p) { p.set_points("both"); },
       "ghhc.points must be fixed, learned or auto"},
      {[](v1::GhhcParams& p) { p.set_standardize("yes"); },
       "ghhc.standardize must be auto, on or off"},
      {[](v1::GhhcParams& p) { p.set_tree("single"); }, "ghhc.tree must be ward or nodes"},
      {[](v1::GhhcParams& p) {
         p.set_points("auto");
         p.set_validation_triples(-1);
       },
       "validation_triples must not be -1"},
      {[](v1::GhhcParams& p) {
         p.set_points("fixed");
         p.set_learn_points(true);
       },
       "contradicts learn_points"},
      {[](v1::GhhcParams& p) { p.set_margin_every(-3); }, "margin_every must be >= -1"},
      {[](v1::GhhcParams& p) { p.set_gumbel_temperature(-0.5); },
       "gumbel_temperature must be >= 0"},
      {[](v1::GhhcParams& p) { p.set_validation_triples(-2); }, "validation_triples must be >= -1"},
      {[](v1::GhhcParams& p) { p.set_point_learning_rate(-1); },
       "point_learning_rate must be >= 0"},
  };
  grpc::Status st;
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.message);
    v1::GhhcParams p = SmallParams();
    c.change(p);
    Submit(ds.id(), "bad", p, &st);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr(c.message));
  }
  v1::Dataset two_rows;
  ASSERT_TRUE(Upload(std::vector<float>(16, 1.f), 2, 8, &two_rows).ok());
  Submit(two_rows.id(), "bad", SmallParams(), &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("at least 3 points"));
  // A zero row after centring fails the job with a message naming the row.
  std::vector<float> same(8 * 5, 2.f);
  v1::Dataset constant;
  ASSERT_TRUE(Upload(same, 5, 8, &constant).ok());
  v1::Job job = Submit(constant.id(), "bad", SmallParams(), &st);
  ASSERT_TRUE(st.ok()) << st.error_message();
  job = Wait(job.id());
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.error().message(), HasSubstr("row 0"));
}

TEST_F(GhhcServerTest, CancelStopsTheJob) {
  StartServer();
  const int n = 3000;
  std::vector<int64_t> labels;
  const std::vector<float> x = Blobs(n, &labels);
  v1::Dataset ds;
  ASSERT_TRUE(Upload(x, n, 8, &ds).ok());
  v1::GhhcParams p = SmallParams();
  p.set_triples(1000000000);  // the most accepted: would run for hours
  grpc::Status st;
  v1::Job job = Submit(ds.id(), "long", p, &st);
  ASSERT_TRUE(st.ok()) << st.error_message();
  grpc::ClientContext cctx;
  v1::CancelJobRequest creq;
  creq.set_id(job.id());
  v1::Job cancelled;
  ASSERT_TRUE(jobs_->CancelJob(&cctx, creq, &cancelled).ok());
  job = Wait(job.id());
  EXPECT_EQ(job.state(), v1::JOB_STATE_CANCELLED);
}

}  // namespace
}  // namespace dendro::server
