// Version labels (NAME@label) and per-name retention through the real
// server: resolution everywhere a ModelRef goes, moves, refusals, and what
// retention deletes (rows and files).
#include <filesystem>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/server_fixture.h"

namespace dendro::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class RegistryLabelsTest : public ServerTest {
 protected:
  // Fits version after version of `name` on one dataset.
  void FitVersions(const std::string& name, int count) {
    const std::vector<float> x = MakeLogits(600, 2, 3, 7);
    v1::Dataset ds;
    ASSERT_TRUE(Upload(x, 600, 6, &ds).ok());
    for (int i = 0; i < count; ++i) {
      grpc::Status st;
      v1::Job job = Submit(ds.id(), name, &st);
      ASSERT_TRUE(st.ok()) << st.error_message();
      ASSERT_EQ(Wait(job.id()).state(), v1::JOB_STATE_SUCCEEDED);
    }
  }

  grpc::Status Label(const std::string& name, const std::string& label, int64_t version,
                     v1::Model* out = nullptr) {
    grpc::ClientContext ctx;
    v1::SetModelLabelRequest req;
    req.set_name(name);
    req.set_label(label);
    req.set_version(version);
    v1::Model m;
    grpc::Status s = models_->SetModelLabel(&ctx, req, &m);
    if (out != nullptr) *out = m;
    return s;
  }

  grpc::Status Get(const std::string& name, int64_t version, const std::string& label,
                   v1::Model* out) {
    grpc::ClientContext ctx;
    v1::GetModelRequest req;
    req.mutable_model()->set_name(name);
    req.mutable_model()->set_version(version);
    req.mutable_model()->set_label(label);
    return models_->GetModel(&ctx, req, out);
  }

  grpc::Status Delete(const std::string& name, int64_t version) {
    grpc::ClientContext ctx;
    v1::DeleteModelRequest req;
    req.set_name(name);
    req.set_version(version);
    v1::DeleteModelResponse resp;
    return models_->DeleteModel(&ctx, req, &resp);
  }

  grpc::Status Retain(const std::string& name, int keep, int* deleted) {
    grpc::ClientContext ctx;
    v1::SetModelRetentionRequest req;
    req.set_name(name);
    req.set_keep_versions(keep);
    v1::SetModelRetentionResponse resp;
    grpc::Status s = models_->SetModelRetention(&ctx, req, &resp);
    *deleted = resp.deleted();
    return s;
  }

  std::set<int64_t> Versions(const std::string& name) {
    grpc::ClientContext ctx;
    v1::ListModelsRequest req;
    req.set_name(name);
    v1::ListModelsResponse resp;
    EXPECT_TRUE(models_->ListModels(&ctx, req, &resp).ok());
    std::set<int64_t> out;
    for (const v1::Model& m : resp.models()) out.insert(m.version());
    return out;
  }

  int ModelDirs(const std::string& name) {
    int n = 0;
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(dir_ / "models" / name, ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      ++n;
    }
    return n;
  }
};

TEST_F(RegistryLabelsTest, LabelsResolveMoveAndAreListed) {
  StartServer();
  FitVersions("m", 3);
  v1::Model labelled;
  ASSERT_TRUE(Label("m", "stable", 2, &labelled).ok());
  EXPECT_EQ(labelled.version(), 2);
  EXPECT_THAT(labelled.labels(), ElementsAre("stable"));
  ASSERT_TRUE(Label("m", "canary", 0).ok());  // 0: the latest

  v1::Model m;
  ASSERT_TRUE(Get("m", 0, "stable", &m).ok());
  EXPECT_EQ(m.version(), 2);
  ASSERT_TRUE(Get("m", 0, "canary", &m).ok());
  EXPECT_EQ(m.version(), 3);
  EXPECT_THAT(m.labels(), ElementsAre("canary"));
  ASSERT_TRUE(Get("m", 1, "", &m).ok());
  EXPECT_THAT(m.labels(), IsEmpty());

  // Assign and GetTree resolve labels too.
  const std::vector<float> rows = MakeLogits(4, 2, 3, 9);
  grpc::ClientContext actx;
  v1::AssignRequest areq;
  areq.mutable_model()->set_name("m");
  areq.mutable_model()->set_label("stable");
  areq.set_rows(4);
  areq.set_cols(6);
  areq.set_data(std::string(reinterpret_cast<const char*>(rows.data()), rows.size() * 4));
  v1::AssignResponse aresp;
  ASSERT_TRUE(models_->Assign(&actx, areq, &aresp).ok());
  EXPECT_EQ(aresp.model_version(), 2);

  // Moving a label.
  ASSERT_TRUE(Label("m", "stable", 3).ok());
  ASSERT_TRUE(Get("m", 0, "stable", &m).ok());
  EXPECT_EQ(m.version(), 3);
  EXPECT_THAT(m.labels(), ElementsAre("canary", "stable"));

  // Removing one.
  grpc::ClientContext dctx;
  v1::DeleteModelLabelRequest dreq;
  dreq.set_name("m");
  dreq.set_label("canary");
  v1::DeleteModelLabelResponse dresp;
  ASSERT_TRUE(models_->DeleteModelLabel(&dctx, dreq, &dresp).ok());
  EXPECT_EQ(dresp.version(), 3);
  grpc::Status gone = Get("m", 0, "canary", &m);
  EXPECT_EQ(gone.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(gone.error_message(), HasSubstr("no label 'canary'"));
}

TEST_F(RegistryLabelsTest, BadLabelsAndRefsAreRefused) {
  StartServer();
  FitVersions("m", 1);
  for (const std::string& bad : std::vector<std::string>{"", "1st", "latest", "has space",
                                                         std::string(65, 'a')}) {
    grpc::Status s = Label("m", bad, 1);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_THAT(s.error_message(), HasSubstr("label")) << bad;
  }
  EXPECT_EQ(Label("m", "stable", 9).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Label("nope", "stable", 0).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::Model m;
  grpc::Status both = Get("m", 1, "stable", &m);
  EXPECT_EQ(both.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(both.error_message(), HasSubstr("not both"));
}

TEST_F(RegistryLabelsTest, LabelledVersionIsNotDeletedUntilTheLabelMoves) {
  StartServer();
  FitVersions("m", 2);
  ASSERT_TRUE(Label("m", "stable", 1).ok());
  grpc::Status s = Delete("m", 1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("labelled 'stable'"));
  ASSERT_TRUE(Label("m", "stable", 2).ok());
  EXPECT_TRUE(Delete("m", 1).ok());
  // Deleting every version drops the labels with them.
  EXPECT_TRUE(Delete("m", 0).ok());
  FitVersions("m", 1);  // version 3
  v1::Model m;
  EXPECT_EQ(Get("m", 0, "stable", &m).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(RegistryLabelsTest, RetentionKeepsNewestUnlabelledAndAllLabelled) {
  StartServer();
  FitVersions("m", 5);
  ASSERT_TRUE(Label("m", "stable", 1).ok());
  int deleted = -1;
  ASSERT_TRUE(Retain("m", 2, &deleted).ok());
  // Unlabelled 2..5: keep 5 and 4; labelled 1 stays.
  EXPECT_EQ(deleted, 2);
  EXPECT_EQ(Versions("m"), (std::set<int64_t>{1, 4, 5}));
  EXPECT_EQ(ModelDirs("m"), 3);
  v1::Model m;
  ASSERT_TRUE(Get("m", 0, "", &m).ok());
  EXPECT_EQ(m.keep_versions(), 2);

  // Each new version applies the policy in the same commit.
  FitVersions("m", 2);  // 6, 7
  EXPECT_EQ(Versions("m"), (std::set<int64_t>{1, 6, 7}));
  EXPECT_EQ(ModelDirs("m"), 3);
  ASSERT_TRUE(Get("m", 0, "stable", &m).ok());
  EXPECT_EQ(m.version(), 1);

  // The policy survives a restart; 0 turns it off.
  StopServer();
  StartServer();
  FitVersions("m", 1);  // 8
  EXPECT_EQ(Versions("m"), (std::set<int64_t>{1, 7, 8}));
  ASSERT_TRUE(Retain("m", 0, &deleted).ok());
  EXPECT_EQ(deleted, 0);
  FitVersions("m", 1);  // 9
  EXPECT_EQ(Versions("m"), (std::set<int64_t>{1, 7, 8, 9}));

  EXPECT_EQ(Retain("m", -1, &deleted).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Retain("nope", 1, &deleted).error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace dendro::server
