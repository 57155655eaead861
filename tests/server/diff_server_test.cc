// ModelService.DiffModels against a real in-process server: the report is
// the one `dendro diff A B --json` computes from the two served trees (the
// JSON trees with their points, compared by core/diff), the tanglegram comes
// when asked, and bad references get the registry's answers.
#include <string>
#include <vector>

#include "core/diff/diff.h"
#include "gmock/gmock.h"
#include "tests/server/server_fixture.h"

namespace dendro::server {
namespace {

using ::testing::HasSubstr;

class DiffServerTest : public ServerTest {
 protected:
  // Fits L2H version after version of "grow" on the first `rows` rows.
  void Fit(const std::vector<float>& x, int64_t rows, int64_t cols) {
    v1::Dataset ds;
    const std::vector<float> part(x.begin(), x.begin() + rows * cols);
    ASSERT_TRUE(Upload(part, rows, cols, &ds).ok());
    grpc::Status st;
    const v1::Job job = Wait(Submit(ds.id(), "grow", &st).id());
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.error().message();
  }
  absl::StatusOr<Hierarchy> Version(int64_t v) {
    grpc::ClientContext ctx;
    v1::GetTreeRequest req;
    req.mutable_model()->set_name("grow");
    req.mutable_model()->set_version(v);
    req.set_format(v1::TREE_FORMAT_JSON);
    req.set_include_points(true);
    v1::GetTreeResponse resp;
    const grpc::Status st = models_->GetTree(&ctx, req, &resp);
    if (!st.ok()) return absl::UnknownError(st.error_message());
    return ParseJson(resp.content());
  }
  grpc::Status Diff(const std::string& a, int64_t va, const std::string& b, int64_t vb,
                    bool tanglegram, v1::DiffModelsResponse* resp) {
    grpc::ClientContext ctx;
    v1::DiffModelsRequest req;
    req.mutable_a()->set_name(a);
    req.mutable_a()->set_version(va);
    req.mutable_b()->set_name(b);
    req.mutable_b()->set_version(vb);
    req.set_tanglegram(tanglegram);
    return models_->DiffModels(&ctx, req, resp);
  }
};

TEST_F(DiffServerTest, ReportIsWhatTheCliComputesFromTheServedTrees) {
  StartServer();
  const int n = 1500, groups = 3, per = 4;
  const std::vector<float> x = MakeLogits(n, groups, per, 11);
  ASSERT_NO_FATAL_FAILURE(Fit(x, 1000, groups * per));
  ASSERT_NO_FATAL_FAILURE(Fit(x, n, groups * per));

  v1::DiffModelsResponse resp;
  const grpc::Status st = Diff("grow", 1, "grow", 2, /*tanglegram=*/true, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  absl::StatusOr<Hierarchy> a = Version(1);
  absl::StatusOr<Hierarchy> b = Version(2);
  ASSERT_TRUE(a.ok() && b.ok());
  absl::StatusOr<DiffReport> expected = DiffHierarchies(*a, *b);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ(resp.report_json(), DiffReportJson(*expected));
  EXPECT_THAT(resp.report_json(), HasSubstr("\"format\":\"dendro.diff\""));
  EXPECT_EQ(resp.a().version(), 1);
  EXPECT_EQ(resp.b().version(), 2);
  EXPECT_THAT(resp.tanglegram_svg(), HasSubstr("<svg"));
  EXPECT_THAT(resp.tanglegram_svg(), HasSubstr("A: grow:1"));

  // A version against itself: nothing moved; no picture unless asked.
  ASSERT_TRUE(Diff("grow", 2, "grow", 2, false, &resp).ok());
  EXPECT_TRUE(resp.tanglegram_svg().empty());
  EXPECT_THAT(resp.report_json(), HasSubstr("\"robinson_foulds\":{\"distance\":0"));
}

TEST_F(DiffServerTest, BadReferencesAreRefused) {
  StartServer();
  const std::vector<float> x = MakeLogits(300, 2, 3, 5);
  ASSERT_NO_FATAL_FAILURE(Fit(x, 300, 6));
  v1::DiffModelsResponse resp;
  grpc::Status st = Diff("grow", 1, "missing", 0, false, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(st.error_message(), HasSubstr("missing"));
  st = Diff("grow", 7, "grow", 1, false, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  st = Diff("", 0, "grow", 1, false, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("model name must be 1-128 characters"));
  // Any call naming a model: an empty name once resolved to some model.
  grpc::ClientContext ctx;
  v1::GetTreeRequest get;
  get.set_format(v1::TREE_FORMAT_NEWICK);
  v1::GetTreeResponse tree;
  st = models_->GetTree(&ctx, get, &tree);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace dendro::server
