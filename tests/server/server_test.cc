// dendrod in-process, driven over real gRPC on loopback with the generated
// stubs (not the client library), so status codes and messages are checked
// exactly as any client sees them.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/hierarchy/export.h"
#include "core/io/npy.h"
#include "core/l2h/l2h.h"
#include "dendro/v1/dendro.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/server/server_fixture.h"

namespace dendro::server {
namespace {

using ::testing::HasSubstr;

// The same leaves for every point and the same merges, in order.
void ExpectSameTree(const Hierarchy& got, const Hierarchy& want) {
  EXPECT_EQ(got.point_leaf(), want.point_leaf());
  const auto got_merges = got.ToMerges();
  const auto want_merges = want.ToMerges();
  ASSERT_EQ(got_merges.size(), want_merges.size());
  for (size_t t = 0; t < got_merges.size(); ++t) {
    EXPECT_EQ(got_merges[t].a, want_merges[t].a) << "merge " << t;
    EXPECT_EQ(got_merges[t].b, want_merges[t].b) << "merge " << t;
  }
}

TEST_F(ServerTest, UploadFitAssignEndToEnd) {
  StartServer();
  const int n = 3000, groups = 3, per = 4, k = groups * per;
  std::vector<int64_t> labels;
  const std::vector<float> x = MakeLogits(n, groups, per, 42, &labels);
  v1::Dataset ds;
  // Odd chunk size: chunks split floats and rows.
  ASSERT_TRUE(Upload(x, n, k, &ds, &labels, 4099).ok());
  EXPECT_EQ(ds.rows(), n);
  EXPECT_EQ(ds.cols(), k);
  EXPECT_TRUE(ds.has_labels());

  grpc::Status st;
  v1::Job job = Submit(ds.id(), "demo", &st);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED);
  job = Wait(job.id());
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.error().message();
  EXPECT_EQ(job.model_name(), "demo");
  EXPECT_EQ(job.model_version(), 1);
  EXPECT_DOUBLE_EQ(job.progress(), 1.0);

  // The served tree is the one the core algorithm computes on the same data.
  NullRunContext null_ctx;
  auto expected = RunL2h(MatrixView(x.data(), n, k), L2hOptions{}, null_ctx);
  ASSERT_TRUE(expected.ok());
  grpc::ClientContext tctx;
  v1::GetTreeRequest treq;
  treq.mutable_model()->set_name("demo");
  treq.set_format(v1::TREE_FORMAT_JSON);
  treq.set_include_points(true);
  v1::GetTreeResponse tresp;
  ASSERT_TRUE(models_->GetTree(&tctx, treq, &tresp).ok());
  auto tree = ParseJson(tresp.content());
  ASSERT_TRUE(tree.ok()) << tree.status();
  EXPECT_EQ(tree->num_leaves(), k);
  ExpectSameTree(*tree, expected->hierarchy);
  EXPECT_EQ(tresp.model().version(), 1);

  // Linkage as .npy: (K-1) x 4 float64.
  grpc::ClientContext lctx;
  treq.set_format(v1::TREE_FORMAT_LINKAGE_NPY);
  ASSERT_TRUE(models_->GetTree(&lctx, treq, &tresp).ok());
  auto header = ParseNpyHeader(tresp.content());
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->dtype, DType::kFloat64);
  EXPECT_EQ(header->shape, (std::vector<int64_t>{k - 1, 4}));

  // Assign: leaves are the argmax, clusters the cut at level 3.
  v1::AssignResponse aresp;
  ASSERT_TRUE(Assign("demo", x, n, k, 3, &aresp).ok());
  auto cut = tree->CutToK(3);
  ASSERT_TRUE(cut.ok());
  ASSERT_EQ(aresp.leaf_size(), n);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(aresp.leaf(i), expected->hierarchy.point_leaf()[i]);
    EXPECT_EQ(aresp.cluster(i), (*cut)[aresp.leaf(i)]);
  }

  // A second fit under the same name is version 2; both are listed.
  job = Submit(ds.id(), "demo", &st);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(Wait(job.id()).model_version(), 2);
  grpc::ClientContext mctx;
  v1::ListModelsRequest mreq;
  mreq.set_name("demo");
  v1::ListModelsResponse mresp;
  ASSERT_TRUE(models_->ListModels(&mctx, mreq, &mresp).ok());
  ASSERT_EQ(mresp.models_size(), 2);
  EXPECT_EQ(mresp.models(0).version(), 1);
  EXPECT_EQ(mresp.models(1).version(), 2);
  EXPECT_EQ(mresp.models(1).num_leaves(), k);
}

// Appends (DatasetHeader.append_to): a fit naming the lineage runs on its
// newest generation, all of its rows, and the job says which generation.
TEST_F(ServerTest, FitsOnALineageUseItsNewestGenerationAndSayWhich) {
  StartServer();
  const int n = 900, n1 = 600, k = 12;
  const std::vector<float> x = MakeLogits(n, 3, 4, 7);
  const std::vector<float> head(x.begin(), x.begin() + n1 * k);
  const std::vector<float> tail(x.begin() + n1 * k, x.end());
  v1::Dataset first, second;
  ASSERT_TRUE(Upload(head, n1, k, &first).ok());
  grpc::Status st = Upload(tail, n - n1, k, &second, nullptr, 1 << 20, false, "", first.id());
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(second.lineage(), first.id());
  EXPECT_EQ(second.generation(), 2);
  EXPECT_EQ(second.rows(), n);

  // Over the wire, refusals carry their codes.
  v1::Dataset refused;
  st = Upload(tail, n - n1, k - 1, &refused, nullptr, 1 << 20, false, "", first.id());
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  st = Upload(tail, n - n1, k, &refused, nullptr, 1 << 20, false, "", first.id() + ":1");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("whose newest is generation 2"));

  grpc::ClientContext gctx;
  v1::GetDatasetRequest greq;
  greq.set_id(first.id());
  v1::Dataset got;
  ASSERT_TRUE(datasets_->GetDataset(&gctx, greq, &got).ok());
  EXPECT_EQ(got.id(), second.id());

  const auto submit = [&](const std::string& dataset, const std::string& request_id) {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    req.mutable_spec()->set_dataset_id(dataset);
    req.mutable_spec()->set_model_name("grown");
    req.mutable_spec()->mutable_l2h();
    req.set_request_id(request_id);
    v1::Job job;
    const grpc::Status s = jobs_->SubmitJob(&ctx, req, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  };
  v1::Job job = submit(first.id(), "grow-1");
  EXPECT_EQ(job.spec().dataset_id(), second.id());
  EXPECT_EQ(job.dataset_ref(), first.id());
  job = Wait(job.id());
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.error().message();
  NullRunContext null_ctx;
  auto expected = RunL2h(MatrixView(x.data(), n, k), L2hOptions{}, null_ctx);
  ASSERT_TRUE(expected.ok());
  auto tree = ServedTree("grown");
  ASSERT_TRUE(tree.ok()) << tree.status();
  ExpectSameTree(*tree, expected->hierarchy);

  // A retry of the same request after another append is the same job.
  v1::Dataset third;
  ASSERT_TRUE(Upload(tail, n - n1, k, &third, nullptr, 1 << 20, false, "", first.id()).ok());
  EXPECT_EQ(third.generation(), 3);
  EXPECT_EQ(submit(first.id(), "grow-1").id(), job.id());
  // A generation named outright.
  v1::Job pinned = submit(first.id() + ":1", "grow-2");
  EXPECT_EQ(pinned.spec().dataset_id(), first.id());
  EXPECT_EQ(pinned.dataset_ref(), first.id() + ":1");
  EXPECT_EQ(Wait(pinned.id()).state(), v1::JOB_STATE_SUCCEEDED);
}

TEST_F(ServerTest, AFirstPassDuringTheUploadGivesTheSameModel) {
  StartServer();
  const int n = 5000, groups = 4, per = 5, k = groups * per;
  const std::vector<float> x = MakeLogits(n, groups, per, 7);
  NullRunContext null_ctx;
  auto expected = RunL2h(MatrixView(x.data(), n, k), L2hOptions{}, null_ctx);
  ASSERT_TRUE(expected.ok());
  // Chunks that split floats and rows, transient and durable.
  for (bool transient : {true, false}) {
    v1::Dataset ds;
    ASSERT_TRUE(Upload(x, n, k, &ds, nullptr, 4099, transient, "l2h").ok());
    grpc::Status st;
    const std::string name = transient ? "prepared-transient" : "prepared";
    v1::Job job = Submit(ds.id(), name, &st);
    ASSERT_TRUE(st.ok()) << st.error_message();
    job = Wait(job.id());
    ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.error().message();
    auto tree = ServedTree(name);
    ASSERT_TRUE(tree.ok()) << tree.status();
    ExpectSameTree(*tree, expected->hierarchy);
  }
  // What cannot be prepared is refused at the header, naming the field.
  v1::Dataset ds;
  grpc::Status st = Upload(x, n, k, &ds, nullptr, 1 << 20, false, "L2H");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(st.error_message(), "upload: prepare must be empty or \"l2h\", got \"L2H\"");
  std::vector<float> column(100, 1.0f);
  st = Upload(column, 100, 1, &ds, nullptr, 1 << 20, false, "l2h");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(st.error_message(),
            "upload: prepare \"l2h\" needs at least 2 columns (clusters), got 1");
}

std::unique_ptr<grpc::ClientReader<v1::Job>> Watch(v1::JobService::Stub& jobs,
                                                   grpc::ClientContext* ctx,
                                                   const std::string& id) {
  v1::WatchJobRequest req;
  req.set_id(id);
  return jobs.WatchJob(ctx, req);
}

TEST_F(ServerTest, WatchStreamsMonotoneProgressToTheEnd) {
  StartServer();
  const int n = 40000, k = 200;
  const std::vector<float> x = MakeLogits(n, 20, 10, 3);
  v1::Dataset ds;
  ASSERT_TRUE(Upload(x, n, k, &ds).ok());
  grpc::Status st;
  v1::Job job = Submit(ds.id(), "watched", &st);
  ASSERT_TRUE(st.ok());
  grpc::ClientContext ctx;
  auto reader = Watch(*jobs_, &ctx, job.id());
  std::vector<v1::Job> updates;
  v1::Job update;
  while (reader->Read(&update)) updates.push_back(update);
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_FALSE(updates.empty());
  for (size_t i = 1; i < updates.size(); ++i) {
    EXPECT_GE(updates[i].progress(), updates[i - 1].progress()) << "update " << i;
  }
  EXPECT_EQ(updates.back().state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_DOUBLE_EQ(updates.back().progress(), 1.0);
}

// Reports progress as fast as it can within one stage once the test lets it
// start, then enters another stage, waits until the watcher has seen it, and
// fails (no model needed).
class ChattyMethod final : public TestMethod {
 public:
  absl::StatusOr<std::unique_ptr<FittedModel>> Fit(const LoadedDataset&, const v1::JobSpec&,
                                                   RunContext& ctx) const override {
    ctx.Report(0, "waiting");
    while (!go.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 1; i <= kReports; ++i) ctx.Report(0.5 * i / kReports, "busy");
    busy_ms.store(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    ctx.Report(0.5, "last");
    // Until the watcher has seen the last stage (or 60 s, and the test fails).
    for (int i = 0; i < 60000 && !seen_last.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return absl::InternalError("chatty method: done talking");
  }
  static constexpr int kReports = 20000;
  mutable std::atomic<bool> go{false};
  mutable std::atomic<bool> seen_last{false};
  mutable std::atomic<double> busy_ms{-1};
};

TEST_F(ServerTest, WatchersGetEveryStageButProgressAtMostTenTimesASecond) {
  ChattyMethod method;
  StartServerWithMethod(&method);
  const v1::Job job = SubmitOnSmallDataset("chatty");
  ASSERT_FALSE(job.id().empty());
  grpc::ClientContext ctx;
  auto reader = Watch(*jobs_, &ctx, job.id());
  std::vector<v1::Job> updates;
  v1::Job update;
  // Wait until the watch shows the fit's first stage, then let it talk.
  while (reader->Read(&update)) {
    updates.push_back(update);
    if (update.stage() == "waiting") break;
  }
  ASSERT_EQ(updates.empty() ? "" : updates.back().stage(), "waiting");
  method.go.store(true);
  while (reader->Read(&update)) {
    updates.push_back(update);
    if (update.stage() == "last") method.seen_last.store(true);
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_TRUE(method.seen_last.load()) << "a new stage is always published";
  int busy = 0;
  for (const v1::Job& u : updates) busy += u.stage() == "busy";
  const double ms = method.busy_ms.load();
  ASSERT_GE(ms, 0);
  // Within the stage, progress at most once per 100 ms of the loop, besides
  // the stage's first report (one more for rounding); 0.5% steps alone
  // would let 100 through.
  EXPECT_LE(busy, 2 + static_cast<int>(ms / 100)) << "the loop took " << ms << " ms";
  EXPECT_EQ(updates.back().state(), v1::JOB_STATE_FAILED);
}

TEST_F(ServerTest, UploadRejectsNonFiniteNamingRowAndColumn) {
  StartServer();
  const int n = 50, k = 6;
  std::vector<float> x = MakeLogits(n, 2, 3, 5);
  x[5 * k + 2] = std::nanf("");
  v1::Dataset ds;
  grpc::Status st = Upload(x, n, k, &ds);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("row 5, column 2 is NaN"));

  // An infinity in a later chunk, with chunks that split floats.
  x[5 * k + 2] = 0.f;
  x[37 * k + 4] = -INFINITY;
  st = Upload(x, n, k, &ds, nullptr, 7);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("row 37, column 4 is -inf"));

  // Nothing was stored, and the server still serves.
  grpc::ClientContext ctx;
  v1::ListDatasetsResponse resp;
  ASSERT_TRUE(datasets_->ListDatasets(&ctx, v1::ListDatasetsRequest(), &resp).ok());
  EXPECT_EQ(resp.datasets_size(), 0);
  std::vector<std::string> leftovers;
  if (std::filesystem::exists(dir_ / "datasets")) {
    for (const auto& e : std::filesystem::directory_iterator(dir_ / "datasets")) {
      leftovers.push_back(e.path().string());
    }
  }
  EXPECT_TRUE(leftovers.empty());
  x[37 * k + 4] = 1.f;
  EXPECT_TRUE(Upload(x, n, k, &ds).ok());
}

TEST_F(ServerTest, UploadRejectsShapeMismatchAndEmptyShapes) {
  StartServer();
  const std::vector<float> x = MakeLogits(10, 2, 2, 9);
  v1::Dataset ds;
  grpc::Status st = Upload(x, 11, 4, &ds);  // too few bytes
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("shape mismatch"));
  st = Upload(x, 9, 4, &ds);  // too many bytes
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("more data"));
  st = Upload({}, 0, 4, &ds);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("rows must be >= 1"));
  std::vector<int64_t> short_labels(3, 1);
  st = Upload(x, 10, 4, &ds, &short_labels);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("labels"));
}

TEST_F(ServerTest, BadJobsAndModelsGetClearErrors) {
  StartServer();
  // K = 1 logits upload fine but cannot be fitted.
  std::vector<float> one(20, 1.f);
  v1::Dataset ds;
  ASSERT_TRUE(Upload(one, 20, 1, &ds).ok());
  grpc::Status st;
  Submit(ds.id(), "k1", &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("at least 2 columns"));

  Submit("ds-doesnotexist", "m", &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  Submit(ds.id(), "bad name!", &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;  // no method
    req.mutable_spec()->set_dataset_id(ds.id());
    req.mutable_spec()->set_model_name("m");
    v1::Job job;
    st = jobs_->SubmitJob(&ctx, req, &job);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }

  v1::AssignResponse resp;
  st = Assign("nosuchmodel", one, 20, 1, 0, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(st.error_message(), HasSubstr("nosuchmodel"));

  FitModel("good");
  const std::vector<float> x = MakeLogits(10, 3, 4, 2);
  st = Assign("good", x, 10, 11, 0, &resp);  // wrong column count
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("expects 12 columns"));
  st = Assign("good", x, 10, 12, 99, &resp);  // level beyond the leaves
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  std::vector<float> bad = x;
  bad[3 * 12 + 7] = INFINITY;
  st = Assign("good", bad, 10, 12, 0, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("row 3, column 7"));
  EXPECT_TRUE(Assign("good", x, 10, 12, 2, &resp).ok());

  // Leaf names: only where the leaves are known before the fit (l2h, with
  // one per column).
  v1::Dataset logits;
  const std::vector<float> y = MakeLogits(200, 2, 2, 3);
  ASSERT_TRUE(Upload(y, 200, 4, &logits).ok());
  auto submit_named = [&](v1::JobSpec spec, int names) {
    spec.set_dataset_id(logits.id());
    spec.set_model_name("named");
    for (int i = 0; i < names; ++i) spec.add_leaf_names("class " + std::to_string(i));
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    v1::Job job;
    return jobs_->SubmitJob(&ctx, req, &job);
  };
  v1::JobSpec tneb;
  tneb.mutable_tneb();
  st = submit_named(tneb, 4);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("leaf_names do not apply to tneb"));
  v1::JobSpec ghhc;
  ghhc.mutable_ghhc();
  st = submit_named(ghhc, 4);
  EXPECT_THAT(st.error_message(), HasSubstr("leaf_names do not apply to ghhc"));
  v1::JobSpec l2h;
  l2h.mutable_l2h();
  st = submit_named(l2h, 3);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("3 leaf names for a tree with 4 leaves"));
  EXPECT_TRUE(submit_named(l2h, 4).ok());
}

TEST_F(ServerTest, OversizedMessageIsRefusedAndServerKeepsServing) {
  ServerOptions opts;
  opts.max_message_bytes = 1 << 20;
  StartServer(opts);
  FitModel("small");
  const int rows = 30000, cols = 12;  // 1.4 MB of floats
  const std::vector<float> x = MakeLogits(rows, 3, 4, 4);
  v1::AssignResponse resp;
  grpc::Status st = Assign("small", x, rows, cols, 0, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  // Under the limit it works.
  st = Assign("small", std::vector<float>(x.begin(), x.begin() + 1000 * cols), 1000, cols, 0,
              &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
}

TEST_F(ServerTest, ListingsPaginateWithOpaqueTokens) {
  StartServer();
  const std::vector<float> x = MakeLogits(5, 1, 2, 1);
  std::set<std::string> uploaded;
  for (int i = 0; i < 5; ++i) {
    v1::Dataset ds;
    ASSERT_TRUE(Upload(x, 5, 2, &ds).ok());
    uploaded.insert(ds.id());
  }
  std::set<std::string> listed;
  std::string token;
  int pages = 0;
  do {
    grpc::ClientContext ctx;
    v1::ListDatasetsRequest req;
    req.set_page_size(2);
    req.set_page_token(token);
    v1::ListDatasetsResponse resp;
    ASSERT_TRUE(datasets_->ListDatasets(&ctx, req, &resp).ok());
    EXPECT_LE(resp.datasets_size(), 2);
    for (const auto& d : resp.datasets()) listed.insert(d.id());
    token = resp.next_page_token();
    ++pages;
  } while (!token.empty() && pages < 10);
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(listed, uploaded);

  grpc::ClientContext ctx;
  v1::ListDatasetsRequest req;
  req.set_page_token("garbage");
  v1::ListDatasetsResponse resp;
  EXPECT_EQ(datasets_->ListDatasets(&ctx, req, &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ServerTest, CancelReachesTheRunningAlgorithm) {
  auto blocking = std::make_shared<BlockingMethod>();
  ServerOptions opts;
  opts.resolve_method = [blocking](const v1::JobSpec&) -> absl::StatusOr<const Method*> {
    return blocking.get();
  };
  StartServer(opts);
  const std::vector<float> x = MakeLogits(20, 2, 2, 1);
  v1::Dataset ds;
  ASSERT_TRUE(Upload(x, 20, 4, &ds).ok());
  grpc::Status st;
  v1::Job job = Submit(ds.id(), "blocked", &st);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(WaitUntilState(job.id(), v1::JOB_STATE_RUNNING).state(), v1::JOB_STATE_RUNNING);

  grpc::ClientContext ctx;
  v1::CancelJobRequest creq;
  creq.set_id(job.id());
  v1::Job cancelled;
  ASSERT_TRUE(jobs_->CancelJob(&ctx, creq, &cancelled).ok());
  job = Wait(job.id());
  EXPECT_EQ(job.state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(job.error().code(), static_cast<int>(grpc::StatusCode::CANCELLED));
  EXPECT_EQ(blocking->saw_cancel.load(), 1);  // the loop itself saw it
  // Cancelling again is idempotent.
  grpc::ClientContext ctx2;
  ASSERT_TRUE(jobs_->CancelJob(&ctx2, creq, &cancelled).ok());
  EXPECT_EQ(cancelled.state(), v1::JOB_STATE_CANCELLED);
}

TEST_F(ServerTest, FullQueueAnswersResourceExhausted) {
  auto blocking = std::make_shared<BlockingMethod>();
  ServerOptions opts;
  opts.workers = 1;
  opts.queue_capacity = 2;
  opts.resolve_method = [blocking](const v1::JobSpec&) -> absl::StatusOr<const Method*> {
    return blocking.get();
  };
  StartServer(opts);
  const std::vector<float> x = MakeLogits(20, 2, 2, 1);
  v1::Dataset ds;
  ASSERT_TRUE(Upload(x, 20, 4, &ds).ok());
  grpc::Status st;
  v1::Job running = Submit(ds.id(), "a", &st);
  ASSERT_TRUE(st.ok());
  WaitUntilState(running.id(), v1::JOB_STATE_RUNNING);
  v1::Job q1 = Submit(ds.id(), "b", &st);
  ASSERT_TRUE(st.ok());
  Submit(ds.id(), "c", &st);
  ASSERT_TRUE(st.ok());
  Submit(ds.id(), "d", &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(st.error_message(), HasSubstr("queue is full"));

  // The dataset is in use, so it cannot be deleted.
  {
    grpc::ClientContext ctx;
    v1::DeleteDatasetRequest req;
    req.set_id(ds.id());
    v1::DeleteDatasetResponse resp;
    EXPECT_EQ(datasets_->DeleteDataset(&ctx, req, &resp).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
  }
  // Cancelling a queued job frees a slot at once.
  grpc::ClientContext ctx;
  v1::CancelJobRequest creq;
  creq.set_id(q1.id());
  v1::Job cancelled;
  ASSERT_TRUE(jobs_->CancelJob(&ctx, creq, &cancelled).ok());
  EXPECT_EQ(cancelled.state(), v1::JOB_STATE_CANCELLED);
  Submit(ds.id(), "d", &st);
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(blocking->started.load(), 1);
}

TEST_F(ServerTest, RestartKeepsStateAndRerunsInterruptedJobs) {
  // First life: a finished model, plus one running and one queued job that
  // the shutdown interrupts.
  auto blocking = std::make_shared<BlockingMethod>();
  ServerOptions opts;
  opts.workers = 1;
  std::atomic<bool> block{false};
  opts.resolve_method = [&](const v1::JobSpec& spec) -> absl::StatusOr<const Method*> {
    if (block) return blocking.get();
    return MethodForSpec(spec);
  };
  StartServer(opts);
  const std::string ds_id = FitModel("kept");
  v1::AssignResponse before;
  const std::vector<float> probe = MakeLogits(100, 3, 4, 8);
  ASSERT_TRUE(Assign("kept", probe, 100, 12, 2, &before).ok());

  block = true;
  grpc::Status st;
  v1::Job running = Submit(ds_id, "later", &st);
  ASSERT_TRUE(st.ok());
  WaitUntilState(running.id(), v1::JOB_STATE_RUNNING);
  v1::Job queued = Submit(ds_id, "later", &st);
  ASSERT_TRUE(st.ok());
  StopServer();
  EXPECT_EQ(blocking->saw_cancel.load(), 1);

  // Second life, same data dir, real methods.
  StartServer();
  grpc::ClientContext dctx;
  v1::GetDatasetRequest dreq;
  dreq.set_id(ds_id);
  v1::Dataset ds;
  ASSERT_TRUE(datasets_->GetDataset(&dctx, dreq, &ds).ok());
  EXPECT_EQ(ds.rows(), 1500);
  v1::AssignResponse after;
  ASSERT_TRUE(Assign("kept", probe, 100, 12, 2, &after).ok());
  EXPECT_EQ(std::vector<int32_t>(after.cluster().begin(), after.cluster().end()),
            std::vector<int32_t>(before.cluster().begin(), before.cluster().end()));
  EXPECT_EQ(std::vector<int32_t>(after.leaf().begin(), after.leaf().end()),
            std::vector<int32_t>(before.leaf().begin(), before.leaf().end()));

  v1::Job r1 = Wait(running.id());
  v1::Job r2 = Wait(queued.id());
  EXPECT_EQ(r1.state(), v1::JOB_STATE_SUCCEEDED) << r1.error().message();
  EXPECT_EQ(r2.state(), v1::JOB_STATE_SUCCEEDED) << r2.error().message();
  EXPECT_EQ(r1.attempts(), 2);  // interrupted once, then completed
  EXPECT_EQ(r2.attempts(), 1);
  std::set<int64_t> versions = {r1.model_version(), r2.model_version()};
  EXPECT_EQ(versions, (std::set<int64_t>{1, 2}));
}

TEST_F(ServerTest, TransientDatasetsLastUntilTheirJobEndsOrARestart) {
  auto blocking = std::make_shared<BlockingMethod>();
  std::atomic<bool> block{false};
  ServerOptions opts;
  opts.workers = 1;
  opts.resolve_method = [&](const v1::JobSpec& spec) -> absl::StatusOr<const Method*> {
    if (block) return blocking.get();
    return MethodForSpec(spec);
  };
  StartServer(opts);
  const std::vector<float> x = MakeLogits(800, 2, 3, 6);
  v1::Dataset ds;
  ASSERT_TRUE(Upload(x, 800, 6, &ds, nullptr, 1 << 20, /*transient=*/true).ok());
  EXPECT_TRUE(ds.transient());
  grpc::Status st;
  v1::Job job = Submit(ds.id(), "from_transient", &st);
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(Wait(job.id()).state(), v1::JOB_STATE_SUCCEEDED);
  // Its only job ended: the transient dataset is gone, row and files.
  auto gone = [&](const std::string& id) {
    grpc::ClientContext ctx;
    v1::GetDatasetRequest req;
    req.set_id(id);
    v1::Dataset d;
    return datasets_->GetDataset(&ctx, req, &d).error_code() == grpc::StatusCode::NOT_FOUND &&
           !std::filesystem::exists(dir_ / "transient" / id);
  };
  EXPECT_TRUE(gone(ds.id()));

  block = true;  // a job still running when the server stops
  v1::Dataset ds2;
  ASSERT_TRUE(Upload(x, 800, 6, &ds2, nullptr, 1 << 20, /*transient=*/true).ok());
  v1::Job pending = Submit(ds2.id(), "from_transient", &st);
  ASSERT_TRUE(st.ok());
  WaitUntilState(pending.id(), v1::JOB_STATE_RUNNING);
  StopServer();
  StartServer();
  EXPECT_TRUE(gone(ds2.id()));
  // The model fitted from it persists; the interrupted job fails clearly.
  v1::AssignResponse aresp;
  EXPECT_TRUE(Assign("from_transient", x, 800, 6, 2, &aresp).ok());
  v1::Job failed = Wait(pending.id());
  EXPECT_EQ(failed.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(failed.error().code(), static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION));
  EXPECT_THAT(failed.error().message(), HasSubstr("transient"));
}

TEST_F(ServerTest, OneShotFitsLeaveNoDatasets) {
  auto blocking = std::make_shared<BlockingMethod>();
  std::atomic<bool> block{false};
  ServerOptions opts;
  opts.resolve_method = [&](const v1::JobSpec& spec) -> absl::StatusOr<const Method*> {
    if (block) return blocking.get();
    return MethodForSpec(spec);
  };
  StartServer(opts);
  const std::vector<float> x = MakeLogits(400, 2, 3, 8);
  for (int i = 0; i < 10; ++i) {
    v1::Dataset ds;
    ASSERT_TRUE(Upload(x, 400, 6, &ds, nullptr, 1 << 20, /*transient=*/true).ok());
    grpc::Status st;
    v1::Job job = Submit(ds.id(), "oneshot", &st);
    ASSERT_TRUE(st.ok());
    ASSERT_EQ(Wait(job.id()).state(), v1::JOB_STATE_SUCCEEDED);
  }
  // A cancelled job releases its dataset too, but not while another job
  // still needs it.
  block = true;
  v1::Dataset shared;
  ASSERT_TRUE(Upload(x, 400, 6, &shared, nullptr, 1 << 20, /*transient=*/true).ok());
  grpc::Status st;
  v1::Job first = Submit(shared.id(), "oneshot", &st);
  v1::Job second = Submit(shared.id(), "oneshot", &st);
  WaitUntilState(first.id(), v1::JOB_STATE_RUNNING);
  {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_id(first.id());
    v1::Job j;
    ASSERT_TRUE(jobs_->CancelJob(&ctx, req, &j).ok());
  }
  EXPECT_EQ(Wait(first.id()).state(), v1::JOB_STATE_CANCELLED);
  WaitUntilState(second.id(), v1::JOB_STATE_RUNNING);
  EXPECT_TRUE(std::filesystem::exists(dir_ / "transient" / shared.id() / "X.npy"));
  // Cancelled while queued: released at once.
  v1::Dataset queued_only;
  ASSERT_TRUE(Upload(x, 400, 6, &queued_only, nullptr, 1 << 20, /*transient=*/true).ok());
  v1::Job third = Submit(queued_only.id(), "oneshot", &st);
  ASSERT_TRUE(st.ok());
  {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_id(third.id());
    v1::Job j;
    ASSERT_TRUE(jobs_->CancelJob(&ctx, req, &j).ok());
    EXPECT_EQ(j.state(), v1::JOB_STATE_CANCELLED);
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ / "transient" / queued_only.id()));
  {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_id(second.id());
    v1::Job j;
    ASSERT_TRUE(jobs_->CancelJob(&ctx, req, &j).ok());
  }
  EXPECT_EQ(Wait(second.id()).state(), v1::JOB_STATE_CANCELLED);

  grpc::ClientContext ctx;
  v1::ListDatasetsResponse list;
  ASSERT_TRUE(datasets_->ListDatasets(&ctx, v1::ListDatasetsRequest(), &list).ok());
  EXPECT_EQ(list.datasets_size(), 0);
  EXPECT_TRUE(!std::filesystem::exists(dir_ / "transient") ||
              std::filesystem::is_empty(dir_ / "transient"));
}

TEST_F(ServerTest, DeletesRemoveRowsAndFiles) {
  StartServer();
  const std::string ds_id = FitModel("gone");
  {
    grpc::ClientContext ctx;
    v1::DeleteModelRequest req;
    req.set_name("gone");
    v1::DeleteModelResponse resp;
    ASSERT_TRUE(models_->DeleteModel(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.deleted(), 1);
  }
  v1::AssignResponse aresp;
  EXPECT_EQ(Assign("gone", MakeLogits(2, 3, 4, 1), 2, 12, 0, &aresp).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(std::filesystem::is_empty(dir_ / "models" / "gone"));
  {
    grpc::ClientContext ctx;
    v1::DeleteDatasetRequest req;
    req.set_id(ds_id);
    v1::DeleteDatasetResponse resp;
    ASSERT_TRUE(datasets_->DeleteDataset(&ctx, req, &resp).ok());
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ / "datasets" / ds_id));
  grpc::ClientContext ctx;
  v1::GetDatasetRequest req;
  req.set_id(ds_id);
  v1::Dataset ds;
  EXPECT_EQ(datasets_->GetDataset(&ctx, req, &ds).error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace dendro::server
