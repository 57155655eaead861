// The request layer (server/api/api.h) through the gRPC transport: the rules
// both transports now share (the HTTP side is covered by
// tests/blackbox/http_json_test.py, which also passes a gRPC page token to
// HTTP and back).
#include "server/api/api.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/server_fixture.h"

namespace dendro::server {
namespace {

using ::testing::HasSubstr;

TEST(ModelRefFromTextTest, NamesVersionsLabelsAndLatest) {
  struct Case {
    std::string version;
    int64_t want_version;
    std::string want_label;
  };
  for (const Case& c : std::vector<Case>{
           {"", 0, ""}, {"latest", 0, ""}, {"7", 7, ""}, {"prod", 0, "prod"}, {"v2", 0, "v2"}}) {
    absl::StatusOr<v1::ModelRef> ref = ModelRefFromText("m", c.version);
    ASSERT_TRUE(ref.ok()) << c.version << ": " << ref.status();
    EXPECT_EQ(ref->name(), "m");
    EXPECT_EQ(ref->version(), c.want_version) << c.version;
    EXPECT_EQ(ref->label(), c.want_label) << c.version;
  }
  for (const std::string bad : {"0", "-1", "7x", "9lives", "a b"}) {
    absl::StatusOr<v1::ModelRef> ref = ModelRefFromText("m", bad);
    EXPECT_TRUE(absl::IsInvalidArgument(ref.status())) << bad;
  }
  EXPECT_TRUE(absl::IsInvalidArgument(ModelRefFromText("", "1").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ModelRefFromText("a/b", "").status()));
}

class ApiTest : public ServerTest {};

TEST_F(ApiTest, ANegativePageSizeIsRefusedByEveryListing) {
  StartServer();
  grpc::ClientContext c1, c2, c3;
  v1::ListDatasetsRequest dreq;
  dreq.set_page_size(-1);
  v1::ListDatasetsResponse dresp;
  grpc::Status s = datasets_->ListDatasets(&c1, dreq, &dresp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("page_size must be >= 0"));
  v1::ListJobsRequest jreq;
  jreq.set_page_size(-5);
  v1::ListJobsResponse jresp;
  EXPECT_EQ(jobs_->ListJobs(&c2, jreq, &jresp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::ListModelsRequest mreq;
  mreq.set_page_size(-1);
  v1::ListModelsResponse mresp;
  EXPECT_EQ(models_->ListModels(&c3, mreq, &mresp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ApiTest, ListJobsShowsARunningJobAsItIsNow) {
  BlockingMethod method;
  StartServerWithMethod(&method);
  const v1::Job job = SubmitOnSmallDataset("blocked");
  ASSERT_FALSE(job.id().empty());
  // The method reports the stage "blocking" once running; the catalogue
  // still holds "starting" until the lease is next renewed.
  for (int i = 0; i < 2000; ++i) {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_id(job.id());
    v1::Job now;
    ASSERT_TRUE(jobs_->GetJob(&ctx, req, &now).ok());
    if (now.stage() == "blocking") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  grpc::ClientContext ctx;
  v1::ListJobsResponse list;
  ASSERT_TRUE(jobs_->ListJobs(&ctx, v1::ListJobsRequest(), &list).ok());
  ASSERT_EQ(list.jobs_size(), 1);
  EXPECT_EQ(list.jobs(0).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(list.jobs(0).stage(), "blocking");
  grpc::ClientContext cctx;
  v1::CancelJobRequest creq;
  creq.set_id(job.id());
  v1::Job cancelled;
  ASSERT_TRUE(jobs_->CancelJob(&cctx, creq, &cancelled).ok());
  EXPECT_EQ(Wait(job.id()).state(), v1::JOB_STATE_CANCELLED);
}

TEST_F(ApiTest, ListJobsNewestFirstByStateWithTokensBoundToTheirListing) {
  BlockingMethod method;
  StartServerWithMethod(&method);
  std::vector<std::string> submitted;
  for (int i = 0; i < 3; ++i) submitted.push_back(SubmitOnSmallDataset("j" + std::to_string(i)).id());
  for (const std::string& id : submitted) ASSERT_FALSE(id.empty());
  auto list = [&](const v1::ListJobsRequest& req, v1::ListJobsResponse* resp) {
    grpc::ClientContext ctx;
    return jobs_->ListJobs(&ctx, req, resp);
  };
  v1::ListJobsRequest newest;
  newest.set_newest_first(true);
  newest.set_page_size(2);
  v1::ListJobsResponse first, second;
  ASSERT_TRUE(list(newest, &first).ok());
  ASSERT_EQ(first.jobs_size(), 2);
  EXPECT_EQ(first.jobs(0).id(), submitted[2]);
  EXPECT_EQ(first.jobs(1).id(), submitted[1]);
  ASSERT_FALSE(first.next_page_token().empty());
  newest.set_page_token(first.next_page_token());
  ASSERT_TRUE(list(newest, &second).ok());
  ASSERT_EQ(second.jobs_size(), 1);
  EXPECT_EQ(second.jobs(0).id(), submitted[0]);
  EXPECT_TRUE(second.next_page_token().empty());

  // The token of a newest-first listing continues no other listing.
  v1::ListJobsRequest oldest;
  oldest.set_page_token(first.next_page_token());
  v1::ListJobsResponse refused;
  grpc::Status s = list(oldest, &refused);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("page_token"));

  // States: the first job runs (and blocks), the others wait.
  v1::ListJobsRequest queued;
  queued.add_states(v1::JOB_STATE_QUEUED);
  queued.add_states(v1::JOB_STATE_SUCCEEDED);
  v1::ListJobsResponse waiting;
  ASSERT_TRUE(list(queued, &waiting).ok());
  for (const v1::Job& j : waiting.jobs()) EXPECT_EQ(j.state(), v1::JOB_STATE_QUEUED) << j.id();
  EXPECT_GE(waiting.jobs_size(), 2);  // one worker: at most the first runs

  v1::ListJobsRequest bad;
  bad.add_states(v1::JOB_STATE_UNSPECIFIED);
  s = list(bad, &refused);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("not a job state"));

  for (const std::string& id : submitted) {
    grpc::ClientContext cctx;
    v1::CancelJobRequest creq;
    creq.set_id(id);
    v1::Job cancelled;
    ASSERT_TRUE(jobs_->CancelJob(&cctx, creq, &cancelled).ok());
  }
  for (const std::string& id : submitted) EXPECT_EQ(Wait(id).state(), v1::JOB_STATE_CANCELLED);
}

}  // namespace
}  // namespace dendro::server
