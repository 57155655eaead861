// The Catalogue contract, run on both implementations: SQLite in a
// temporary directory and a real PostgreSQL 15 (postgres_harness.h). Every
// case here must pass on both, so the two cannot drift.
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/catalogue.h"
#include "server/postgres_catalogue.h"
#include "tests/server/postgres_harness.h"

namespace dendro::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class CatalogueTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("dendro_catalogue_test_" + std::to_string(::getpid()) + "_" +
            std::to_string(counter_++));
    std::filesystem::create_directories(dir_);
    if (GetParam() == "postgres") {
      auto& pg = testing::PostgresHarness::Get();
      if (!pg.Available()) GTEST_SKIP() << "PostgreSQL not available: " << pg.Why();
      spec_ = pg.NewDatabase();
    }
    auto opened = OpenCatalogue(spec_, dir_.string());
    ASSERT_TRUE(opened.ok()) << opened.status();
    cat_ = *std::move(opened);
  }
  void TearDown() override {
    cat_.reset();
    std::filesystem::remove_all(dir_);
  }

  static v1::Job Job(const std::string& id, v1::JobState state = v1::JOB_STATE_QUEUED) {
    v1::Job j;
    j.set_id(id);
    j.set_state(state);
    j.mutable_spec()->set_dataset_id("ds-1");
    return j;
  }
  absl::StatusOr<CommitResult> Commit(const std::string& name, const std::string& job_id) {
    v1::Model m;
    m.set_name(name);
    m.set_method("l2h");
    return cat_->CommitModel(m, "models/" + name + "/" + job_id,
                             Job(job_id, v1::JOB_STATE_SUCCEEDED));
  }
  std::set<int64_t> Versions(const std::string& name) {
    std::set<int64_t> out;
    auto page = cat_->ListModels(name, 0, 1000);
    EXPECT_TRUE(page.ok()) << page.status();
    for (const auto& m : page->items) out.insert(m.version());
    return out;
  }

  static inline int counter_ = 0;
  std::filesystem::path dir_;
  std::string spec_;
  std::unique_ptr<Catalogue> cat_;
};

TEST_P(CatalogueTest, DatasetsPutGetListDelete) {
  for (int i = 0; i < 5; ++i) {
    v1::Dataset d;
    d.set_id("ds-" + std::to_string(i));
    d.set_rows(10 + i);
    ASSERT_TRUE(cat_->PutDataset(d).ok());
  }
  v1::Dataset dup;
  dup.set_id("ds-0");
  EXPECT_EQ(cat_->PutDataset(dup).code(), absl::StatusCode::kAlreadyExists);
  auto got = cat_->GetDataset("ds-3");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->rows(), 13);
  EXPECT_EQ(cat_->GetDataset("ds-9").status().code(), absl::StatusCode::kNotFound);
  auto p1 = cat_->ListDatasets(0, 2);
  ASSERT_TRUE(p1.ok());
  ASSERT_EQ(p1->items.size(), 2u);
  EXPECT_TRUE(p1->more);
  auto p2 = cat_->ListDatasets(p1->last_seq, 10);
  ASSERT_TRUE(p2.ok());
  EXPECT_EQ(p2->items.size(), 3u);
  EXPECT_FALSE(p2->more);
  EXPECT_EQ(p2->items.front().id(), "ds-2");
  ASSERT_TRUE(cat_->DeleteDataset("ds-1").ok());
  EXPECT_EQ(cat_->DeleteDataset("ds-1").code(), absl::StatusCode::kNotFound);
  auto ids = cat_->AllDatasetIds();
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(std::set<std::string>(ids->begin(), ids->end()),
            (std::set<std::string>{"ds-0", "ds-2", "ds-3", "ds-4"}));
}

TEST_P(CatalogueTest, JobsUpsertRequestKeysUnfinishedAndExpiry) {
  ASSERT_TRUE(cat_->PutJob(Job("job-a")).ok());
  ASSERT_TRUE(cat_->PutJob(Job("job-b", v1::JOB_STATE_RUNNING)).ok());
  v1::Job done = Job("job-c", v1::JOB_STATE_SUCCEEDED);
  done.mutable_end_time()->set_seconds(1000);
  ASSERT_TRUE(cat_->PutJob(done).ok());
  // Upsert: job-a finishes.
  v1::Job a = Job("job-a", v1::JOB_STATE_FAILED);
  a.mutable_end_time()->set_seconds(5000);
  ASSERT_TRUE(cat_->PutJob(a).ok());
  EXPECT_EQ(cat_->GetJob("job-a")->state(), v1::JOB_STATE_FAILED);
  auto unfinished = cat_->UnfinishedJobs();
  ASSERT_TRUE(unfinished.ok());
  ASSERT_EQ(unfinished->size(), 1u);
  EXPECT_EQ(unfinished->front().id(), "job-b");

  v1::Job r = Job("job-r");
  r.set_owner("ann");
  r.set_request_id("retry-1");
  ASSERT_TRUE(cat_->PutJob(r).ok());
  auto found = cat_->FindJobByRequest("ann", "retry-1");
  ASSERT_TRUE(found.ok());
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->id(), "job-r");
  EXPECT_FALSE(cat_->FindJobByRequest("bob", "retry-1")->has_value());
  r.set_id("job-r2");
  EXPECT_EQ(cat_->PutJob(r).code(), absl::StatusCode::kAlreadyExists);

  auto expired = cat_->DeleteJobsEndedBefore(2000);
  ASSERT_TRUE(expired.ok());
  EXPECT_EQ(*expired, 1);  // job-c; job-a ended later, job-b runs
  EXPECT_EQ(cat_->GetJob("job-c").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(cat_->DeleteJob("job-a").ok());
  EXPECT_EQ(cat_->DeleteJob("job-a").code(), absl::StatusCode::kNotFound);
  auto page = cat_->ListJobs(0, 10);
  ASSERT_TRUE(page.ok());
  std::vector<std::string> ids;
  for (const auto& j : page->items) ids.push_back(j.id());
  EXPECT_THAT(ids, ElementsAre("job-b", "job-r"));
}

TEST_P(CatalogueTest, ModelVersionsLabelsAndDeletes) {
  for (int i = 1; i <= 3; ++i) {
    auto c = Commit("m", "job-" + std::to_string(i));
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->version, i);
    EXPECT_EQ(cat_->GetJob("job-" + std::to_string(i))->model_version(), i);
  }
  ASSERT_TRUE(Commit("other", "job-o").ok());
  auto latest = cat_->GetModel("m", 0, "");
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->model.version(), 3);
  EXPECT_EQ(latest->dir, "models/m/job-3");
  EXPECT_EQ(cat_->GetModel("m", 7, "").status().code(), absl::StatusCode::kNotFound);

  auto labelled = cat_->SetModelLabel("m", "stable", 2);
  ASSERT_TRUE(labelled.ok()) << labelled.status();
  EXPECT_THAT(labelled->labels(), ElementsAre("stable"));
  ASSERT_TRUE(cat_->SetModelLabel("m", "canary", 0).ok());
  EXPECT_EQ(cat_->GetModel("m", 0, "stable")->model.version(), 2);
  EXPECT_EQ(cat_->GetModel("m", 0, "canary")->model.version(), 3);
  EXPECT_THAT(cat_->GetModel("m", 0, "nope").status().message(), HasSubstr("no label 'nope'"));
  EXPECT_EQ(cat_->SetModelLabel("m", "x", 9).status().code(), absl::StatusCode::kNotFound);

  absl::StatusOr<std::vector<StoredModel>> refused = cat_->DeleteModels("m", 2);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("labelled 'stable'"));
  auto removed_label = cat_->DeleteModelLabel("m", "stable");
  ASSERT_TRUE(removed_label.ok());
  EXPECT_EQ(*removed_label, 2);
  EXPECT_EQ(cat_->DeleteModelLabel("m", "stable").status().code(), absl::StatusCode::kNotFound);
  auto one = cat_->DeleteModels("m", 2);
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ(one->front().dir, "models/m/job-2");
  EXPECT_EQ(Versions("m"), (std::set<int64_t>{1, 3}));
  auto all = cat_->DeleteModels("m", 0);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 2u);
  EXPECT_EQ(cat_->DeleteModels("m", 0).status().code(), absl::StatusCode::kNotFound);
  // Versions are never reused; the name's labels went with its versions.
  EXPECT_EQ(Commit("m", "job-4")->version, 4);
  EXPECT_EQ(cat_->GetModel("m", 0, "canary").status().code(), absl::StatusCode::kNotFound);
  auto dirs = cat_->AllModelDirs();
  ASSERT_TRUE(dirs.ok());
  EXPECT_EQ(std::set<std::string>(dirs->begin(), dirs->end()),
            (std::set<std::string>{"models/m/job-4", "models/other/job-o"}));
}

TEST_P(CatalogueTest, RetentionPrunesInTheCommit) {
  for (int i = 1; i <= 4; ++i) ASSERT_TRUE(Commit("m", "job-" + std::to_string(i)).ok());
  ASSERT_TRUE(cat_->SetModelLabel("m", "stable", 1).ok());
  auto pruned = cat_->SetModelRetention("m", 2);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  ASSERT_EQ(pruned->size(), 1u);
  EXPECT_EQ(pruned->front().model.version(), 2);
  EXPECT_EQ(Versions("m"), (std::set<int64_t>{1, 3, 4}));
  auto c = Commit("m", "job-5");
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->pruned.size(), 1u);
  EXPECT_EQ(c->pruned.front().dir, "models/m/job-3");
  EXPECT_EQ(Versions("m"), (std::set<int64_t>{1, 4, 5}));
  EXPECT_EQ(cat_->GetModel("m", 0, "")->model.keep_versions(), 2);
  EXPECT_EQ(cat_->SetModelRetention("nope", 1).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(cat_->SetModelRetention("m", 0).ok());
  EXPECT_THAT(Commit("m", "job-6")->pruned, IsEmpty());
}

TEST_P(CatalogueTest, ConcurrentCommitsGetDistinctConsecutiveVersions) {
  constexpr int kThreads = 4, kEach = 10;
  std::vector<std::thread> threads;
  std::mutex mu;
  std::set<int64_t> versions;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        auto c = Commit("m", "job-" + std::to_string(t) + "-" + std::to_string(i));
        ASSERT_TRUE(c.ok()) << c.status();
        std::lock_guard<std::mutex> lock(mu);
        EXPECT_TRUE(versions.insert(c->version).second);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(versions.size(), static_cast<size_t>(kThreads * kEach));
  EXPECT_EQ(*versions.begin(), 1);
  EXPECT_EQ(*versions.rbegin(), kThreads * kEach);
}

TEST_P(CatalogueTest, ObserverSeesEveryOperation) {
  std::vector<std::string> ops;
  cat_->set_observer([&](const char* op, double seconds) {
    EXPECT_GE(seconds, 0.0);
    ops.push_back(op);
  });
  ASSERT_TRUE(cat_->PutJob(Job("job-1")).ok());
  EXPECT_EQ(cat_->GetJob("job-2").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(ops, ElementsAre("put_job", "get_job"));
}

INSTANTIATE_TEST_SUITE_P(Both, CatalogueTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& info) { return info.param; });

// --- PostgreSQL only ------------------------------------------------------------

TEST(PostgresCatalogueTest, UriWithAPasswordIsRefused) {
  EXPECT_TRUE(CheckPostgresUri("postgresql://dendro@db:5432/dendro").ok());
  EXPECT_TRUE(CheckPostgresUri("postgres://db/dendro?sslmode=require").ok());
  for (const char* bad : {"postgresql://dendro:secret@db/dendro",
                          "postgresql://db/dendro?password=secret", "mysql://db/x",
                          "host=db dbname=x"}) {
    absl::Status s = CheckPostgresUri(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), ::testing::Not(HasSubstr("secret"))) << bad;
  }
}

TEST(PostgresCatalogueTest, ReplicasStartingTogetherMigrateOnce) {
  auto& pg = testing::PostgresHarness::Get();
  if (!pg.Available()) GTEST_SKIP() << "PostgreSQL not available: " << pg.Why();
  const std::string uri = pg.NewDatabase();
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      auto c = PostgresCatalogue::Open(uri);
      EXPECT_TRUE(c.ok()) << c.status();
      if (c.ok()) ok.fetch_add(1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 4);
}

TEST(PostgresCatalogueTest, UnreachableDatabaseIsUnavailable) {
  auto c = PostgresCatalogue::Open("postgresql://dendro@127.0.0.1:1/none?connect_timeout=2");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable) << c.status();
}

}  // namespace
}  // namespace dendro::server
