// The Catalogue contract, run on both implementations: SQLite in a
// temporary directory and a real PostgreSQL 15 (postgres_harness.h). Every
// case here must pass on both, so the two cannot drift.
#include "server/catalogue/catalogue.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <pqxx/pqxx>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/catalogue/open_catalogue.h"
#include "server/catalogue/postgres_catalogue.h"
#include "tests/server/catalogue_fixture.h"
#include "tests/server/postgres_harness.h"

namespace dendro::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class CatalogueTest : public testing::BothCataloguesTest {
 protected:
  static v1::Job Job(const std::string& id, v1::JobState state = v1::JOB_STATE_QUEUED) {
    v1::Job j;
    j.set_id(id);
    j.set_state(state);
    j.mutable_spec()->set_dataset_id("ds-1");
    return j;
  }
  // EnqueueJob, with the jobs' dataset ("ds-1") recorded first.
  absl::Status Enqueue(const v1::Job& job, int capacity) {
    if (!cat_->GetDataset("ds-1").ok()) {
      v1::Dataset d;
      d.set_id("ds-1");
      if (absl::Status s = cat_->PutDataset(d); !s.ok()) return s;
    }
    return cat_->EnqueueJob(job, capacity);
  }
  absl::StatusOr<CommitResult> Commit(const std::string& name, const std::string& job_id) {
    v1::Model m;
    m.set_name(name);
    m.set_method("l2h");
    return cat_->CommitModel(m, "models/" + name + "/" + job_id,
                             Job(job_id, v1::JOB_STATE_SUCCEEDED), /*lease_token=*/0);
  }
  std::set<int64_t> Versions(const std::string& name) {
    std::set<int64_t> out;
    auto page = cat_->ListModels(name, 0, 1000);
    EXPECT_TRUE(page.ok()) << page.status();
    for (const auto& m : page->items) out.insert(m.version());
    return out;
  }
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

TEST_P(CatalogueTest, DatasetGenerationsAreIndexedAndUnique) {
  const auto put = [&](const std::string& id, const std::string& lineage, int generation,
                       int64_t rows) {
    v1::Dataset d;
    d.set_id(id);
    d.set_lineage(lineage);
    d.set_generation(generation);
    d.set_rows(rows);
    return cat_->PutDataset(d);
  };
  // A record without generation fields is generation 1 of its own lineage.
  v1::Dataset plain;
  plain.set_id("ds-a");
  plain.set_rows(10);
  ASSERT_TRUE(cat_->PutDataset(plain).ok());
  auto newest = cat_->GetDatasetGeneration("ds-a", 0);
  ASSERT_TRUE(newest.ok()) << newest.status();
  EXPECT_EQ(newest->id(), "ds-a");
  ASSERT_TRUE(put("ds-b", "ds-a", 2, 15).ok());
  ASSERT_TRUE(put("ds-c", "ds-a", 3, 20).ok());
  ASSERT_TRUE(put("ds-x", "ds-x", 1, 7).ok());
  // A second generation 3 of ds-a loses, whatever its id.
  EXPECT_EQ(put("ds-d", "ds-a", 3, 25).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(cat_->GetDataset("ds-d").status().code(), absl::StatusCode::kNotFound);

  newest = cat_->GetDatasetGeneration("ds-a", 0);
  ASSERT_TRUE(newest.ok()) << newest.status();
  EXPECT_EQ(newest->id(), "ds-c");
  for (const auto& [g, id] :
       std::vector<std::pair<int, std::string>>{{1, "ds-a"}, {2, "ds-b"}, {3, "ds-c"}}) {
    auto got = cat_->GetDatasetGeneration("ds-a", g);
    ASSERT_TRUE(got.ok()) << g << ": " << got.status();
    EXPECT_EQ(got->id(), id);
  }
  EXPECT_EQ(cat_->GetDatasetGeneration("ds-a", 4).status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(cat_->GetDatasetGeneration("ds-a", 4).status().message()),
              HasSubstr("'ds-a' has no generation 4"));
  EXPECT_EQ(cat_->GetDatasetGeneration("ds-b", 0).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(cat_->GetDatasetGeneration("ds-x", 0)->id(), "ds-x");
  // Deleting the newest makes the one before it the newest again.
  ASSERT_TRUE(cat_->DeleteDataset("ds-c").ok());
  EXPECT_EQ(cat_->GetDatasetGeneration("ds-a", 0)->id(), "ds-b");
  ASSERT_TRUE(cat_->DeleteDataset("ds-a").ok());
  EXPECT_EQ(cat_->GetDatasetGeneration("ds-a", 0)->id(), "ds-b");
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
  auto page = cat_->ListJobs(0, 10, JobListing());
  ASSERT_TRUE(page.ok());
  std::vector<std::string> ids;
  for (const auto& j : page->items) ids.push_back(j.id());
  EXPECT_THAT(ids, ElementsAre("job-b", "job-r"));
}

// Newest first, a state filter, and pages that continue where the last
// ended in both orders.
TEST_P(CatalogueTest, ListJobsInEitherOrderFilteredByState) {
  const v1::JobState states[] = {v1::JOB_STATE_QUEUED, v1::JOB_STATE_SUCCEEDED,
                                 v1::JOB_STATE_FAILED, v1::JOB_STATE_SUCCEEDED,
                                 v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED};
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(cat_->PutJob(Job("job-" + std::to_string(i), states[i])).ok());
  }
  // A later upsert keeps a job's place in the order.
  ASSERT_TRUE(cat_->PutJob(Job("job-0", v1::JOB_STATE_CANCELLED)).ok());
  auto ids_of = [](const Page<v1::Job>& page) {
    std::vector<std::string> ids;
    for (const auto& j : page.items) ids.push_back(j.id());
    return ids;
  };
  JobListing newest;
  newest.newest_first = true;
  auto all = cat_->ListJobs(0, 10, newest);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_THAT(ids_of(*all), ElementsAre("job-5", "job-4", "job-3", "job-2", "job-1", "job-0"));
  EXPECT_FALSE(all->more);

  // Pages of two, newest first: each continues below the last seq.
  std::vector<std::string> paged;
  int64_t cursor = 0;
  for (int pages = 0; pages < 5; ++pages) {
    auto page = cat_->ListJobs(cursor, 2, newest);
    ASSERT_TRUE(page.ok()) << page.status();
    for (const auto& id : ids_of(*page)) paged.push_back(id);
    if (!page->more) break;
    cursor = page->last_seq;
  }
  EXPECT_EQ(paged, ids_of(*all));

  JobListing succeeded = newest;
  succeeded.state_mask = 1u << v1::JOB_STATE_SUCCEEDED;
  auto first = cat_->ListJobs(0, 2, succeeded);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_THAT(ids_of(*first), ElementsAre("job-5", "job-3"));
  EXPECT_TRUE(first->more);
  auto rest = cat_->ListJobs(first->last_seq, 2, succeeded);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_THAT(ids_of(*rest), ElementsAre("job-1"));
  EXPECT_FALSE(rest->more);

  JobListing oldest_two;
  oldest_two.state_mask = (1u << v1::JOB_STATE_CANCELLED) | (1u << v1::JOB_STATE_RUNNING);
  auto oldest = cat_->ListJobs(0, 10, oldest_two);
  ASSERT_TRUE(oldest.ok()) << oldest.status();
  EXPECT_THAT(ids_of(*oldest), ElementsAre("job-0", "job-4"));
  EXPECT_TRUE(oldest_two.Lists(v1::JOB_STATE_RUNNING));
  EXPECT_FALSE(oldest_two.Lists(v1::JOB_STATE_QUEUED));
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

TEST_P(CatalogueTest, QueueClaimsOldestFirstAndHoldsTheCapacity) {
  ASSERT_TRUE(Enqueue(Job("job-a"), 2).ok());
  ASSERT_TRUE(Enqueue(Job("job-b"), 2).ok());
  const absl::Status full = Enqueue(Job("job-c"), 2);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.message(), HasSubstr("capacity 2"));

  auto first = cat_->ClaimJob("replica-1", absl::Seconds(30));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(first->has_value());
  EXPECT_EQ((*first)->job.id(), "job-a");
  EXPECT_EQ((*first)->job.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ((*first)->job.attempts(), 1);
  EXPECT_GT((*first)->job.start_time().seconds(), 0);
  // A claimed job no longer counts against the queue.
  EXPECT_TRUE(Enqueue(Job("job-c"), 2).ok());
  auto counts = cat_->CountJobs();
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(counts->queued, 2);
  EXPECT_EQ(counts->running, 1);

  auto second = cat_->ClaimJob("replica-2", absl::Seconds(30));
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ((*second)->job.id(), "job-b");
  EXPECT_NE((*second)->token, (*first)->token);
  // Its running and queued jobs keep the dataset.
  EXPECT_EQ(cat_->DeleteUnusedDataset("ds-1", "").code(), absl::StatusCode::kFailedPrecondition);
  v1::Dataset unused;
  unused.set_id("ds-2");
  ASSERT_TRUE(cat_->PutDataset(unused).ok());
  EXPECT_TRUE(cat_->DeleteUnusedDataset("ds-2", "").ok());
}

TEST_P(CatalogueTest, ALostLeaseFencesEveryWriteOfItsHolder) {
  ASSERT_TRUE(Enqueue(Job("job-a"), 10).ok());
  auto old_claim = cat_->ClaimJob("replica-1", absl::Seconds(30));
  ASSERT_TRUE(old_claim.ok() && old_claim->has_value());
  const int64_t old_token = (*old_claim)->token;
  auto renewed = cat_->RenewJobLease("job-a", old_token, absl::Seconds(30), 0.4, "fitting");
  ASSERT_TRUE(renewed.ok()) << renewed.status();
  EXPECT_DOUBLE_EQ(cat_->GetJob("job-a")->progress(), 0.4);
  EXPECT_EQ(cat_->GetJob("job-a")->stage(), "fitting");

  // replica-1 restarts under its id: its job goes back to the queue and
  // replica-2 takes it.
  auto requeued = cat_->RequeueLostJobs("replica-1");
  ASSERT_TRUE(requeued.ok());
  ASSERT_EQ(requeued->size(), 1u);
  EXPECT_EQ(cat_->GetJob("job-a")->state(), v1::JOB_STATE_QUEUED);
  auto new_claim = cat_->ClaimJob("replica-2", absl::Seconds(30));
  ASSERT_TRUE(new_claim.ok() && new_claim->has_value());
  EXPECT_EQ((*new_claim)->job.attempts(), 2);

  // The old holder's writes are all refused.
  EXPECT_EQ(cat_->RenewJobLease("job-a", old_token, absl::Seconds(30), 0.9, "x").status().code(),
            absl::StatusCode::kAborted);
  v1::Job stale = (*old_claim)->job;
  stale.set_state(v1::JOB_STATE_FAILED);
  EXPECT_EQ(cat_->ReleaseJob(stale, old_token).code(), absl::StatusCode::kAborted);
  v1::Model m;
  m.set_name("fenced");
  stale.set_state(v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(cat_->CommitModel(m, "models/fenced/a", stale, old_token).status().code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(cat_->GetModel("fenced", 0).status().code(), absl::StatusCode::kNotFound);

  // The new holder commits exactly once; after that its lease is over too.
  v1::Job done = (*new_claim)->job;
  done.set_state(v1::JOB_STATE_SUCCEEDED);
  auto committed = cat_->CommitModel(m, "models/fenced/b", done, (*new_claim)->token);
  ASSERT_TRUE(committed.ok()) << committed.status();
  EXPECT_EQ(committed->version, 1);
  EXPECT_EQ(cat_->GetJob("job-a")->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(cat_->CommitModel(m, "models/fenced/c", done, (*new_claim)->token).status().code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(cat_->CountJobs()->running, 0);
}

TEST_P(CatalogueTest, ExpiredLeasesAreRequeuedAndLiveOnesKept) {
  ASSERT_TRUE(Enqueue(Job("job-short"), 10).ok());
  ASSERT_TRUE(Enqueue(Job("job-long"), 10).ok());
  ASSERT_TRUE(cat_->ClaimJob("replica-1", absl::Milliseconds(1)).ok());
  ASSERT_TRUE(cat_->ClaimJob("replica-1", absl::Seconds(60)).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto requeued = cat_->RequeueLostJobs("");
  ASSERT_TRUE(requeued.ok()) << requeued.status();
  ASSERT_EQ(requeued->size(), 1u);
  EXPECT_EQ((*requeued)[0].id(), "job-short");
  EXPECT_THAT((*requeued)[0].stage(), HasSubstr("lease"));
  EXPECT_EQ(cat_->GetJob("job-short")->state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(cat_->GetJob("job-long")->state(), v1::JOB_STATE_RUNNING);
}

TEST_P(CatalogueTest, ACancelRequestSurvivesTheHoldersWritesAndBlocksTheCommit) {
  ASSERT_TRUE(Enqueue(Job("job-q"), 10).ok());
  ASSERT_TRUE(Enqueue(Job("job-r"), 10).ok());
  auto claim = cat_->ClaimJob("replica-1", absl::Seconds(30));  // job-q
  ASSERT_TRUE(claim.ok() && claim->has_value());
  const int64_t token = (*claim)->token;
  auto marked = cat_->UpdateJob("job-q", [](v1::Job& j) {
    j.set_cancel_requested(true);
    return true;
  });
  ASSERT_TRUE(marked.ok());
  // The holder's renewal neither clears the request nor hides it.
  auto renewed = cat_->RenewJobLease("job-q", token, absl::Seconds(30), 0.5, "fitting");
  ASSERT_TRUE(renewed.ok());
  EXPECT_TRUE(renewed->cancel_requested());
  EXPECT_TRUE(cat_->GetJob("job-q")->cancel_requested());
  v1::Model m;
  m.set_name("cancelled");
  v1::Job done = (*claim)->job;
  done.set_state(v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(cat_->CommitModel(m, "models/cancelled/a", done, token).status().code(),
            absl::StatusCode::kCancelled);
  // A holder that re-queues it (a shutdown) ends it CANCELLED instead.
  v1::Job requeue = (*claim)->job;
  requeue.set_state(v1::JOB_STATE_QUEUED);
  ASSERT_TRUE(cat_->ReleaseJob(requeue, token).ok());
  EXPECT_EQ(cat_->GetJob("job-q")->state(), v1::JOB_STATE_CANCELLED);
  EXPECT_TRUE(cat_->GetJob("job-q")->cancel_requested());
  // UpdateJob without a change writes nothing; a missing job is NOT_FOUND.
  auto unchanged = cat_->UpdateJob("job-r", [](v1::Job&) { return false; });
  ASSERT_TRUE(unchanged.ok());
  EXPECT_EQ(unchanged->state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(cat_->UpdateJob("job-x", [](v1::Job&) { return true; }).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_P(CatalogueTest, ConcurrentClaimsTakeEachJobOnce) {
  constexpr int kJobs = 40;
  for (int i = 0; i < kJobs; ++i) {
    ASSERT_TRUE(Enqueue(Job("job-" + std::to_string(i)), kJobs).ok());
  }
  // Four replicas' worth of claimers on their own connections (PostgreSQL)
  // or the one shared file (SQLite).
  std::vector<std::unique_ptr<Catalogue>> replicas;
  for (int r = 0; r < 4; ++r) {
    auto opened = OpenCatalogue(spec_, dir_.string());
    ASSERT_TRUE(opened.ok()) << opened.status();
    replicas.push_back(*std::move(opened));
  }
  std::vector<std::vector<std::string>> taken(replicas.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < replicas.size(); ++r) {
    threads.emplace_back([&, r] {
      for (;;) {
        auto claim = replicas[r]->ClaimJob("replica-" + std::to_string(r), absl::Seconds(30));
        if (!claim.ok()) continue;  // SQLite busy: try again
        if (!claim->has_value()) return;
        taken[r].push_back((*claim)->job.id());
      }
    });
  }
  for (auto& t : threads) t.join();
  std::set<std::string> all;
  size_t total = 0;
  for (const auto& ids : taken) {
    total += ids.size();
    all.insert(ids.begin(), ids.end());
  }
  EXPECT_EQ(total, static_cast<size_t>(kJobs));
  EXPECT_EQ(all.size(), static_cast<size_t>(kJobs));
}

TEST_P(CatalogueTest, ADatasetInUseIsNotDeletedAndADeletedOneTakesNoJob) {
  v1::Dataset d;
  d.set_id("ds-2");
  ASSERT_TRUE(cat_->PutDataset(d).ok());
  v1::Job job = Job("job-a");
  job.mutable_spec()->set_dataset_id("ds-2");
  ASSERT_TRUE(cat_->EnqueueJob(job, 10).ok());
  const absl::Status used = cat_->DeleteUnusedDataset("ds-2", "");
  EXPECT_EQ(used.code(), absl::StatusCode::kFailedPrecondition) << used;
  EXPECT_NE(used.message().find("used by a queued or running job"), std::string::npos);
  EXPECT_TRUE(cat_->GetDataset("ds-2").ok());
  // The job itself does not keep its dataset (a transient one goes when it ends).
  ASSERT_TRUE(cat_->DeleteUnusedDataset("ds-2", "job-a").ok());
  EXPECT_EQ(cat_->DeleteUnusedDataset("ds-2", "").code(), absl::StatusCode::kNotFound);
  job.set_id("job-b");
  const absl::Status gone = cat_->EnqueueJob(job, 10);
  EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound) << gone;
  EXPECT_EQ(cat_->GetJob("job-b").status().code(), absl::StatusCode::kNotFound);
}

TEST_P(CatalogueTest, SubmitAndDeleteRacingNeverBothSucceed) {
  // Another replica's connection (PostgreSQL), or this server's one
  // catalogue from two threads (SQLite: one process owns the file).
  std::unique_ptr<Catalogue> other_owned;
  Catalogue* other = cat_.get();
  if (GetParam() == "postgres") {
    auto opened = OpenCatalogue(spec_, dir_.string());
    ASSERT_TRUE(opened.ok()) << opened.status();
    other_owned = *std::move(opened);
    other = other_owned.get();
  }
  int both = 0, jobs = 0, deletes = 0;
  for (int i = 0; i < 40; ++i) {
    const std::string ds = "ds-race-" + std::to_string(i);
    v1::Dataset d;
    d.set_id(ds);
    ASSERT_TRUE(cat_->PutDataset(d).ok());
    v1::Job job = Job("job-race-" + std::to_string(i));
    job.mutable_spec()->set_dataset_id(ds);
    absl::Status enqueued, deleted;
    std::thread a([&] { enqueued = cat_->EnqueueJob(job, 1000); });
    std::thread b([&] { deleted = other->DeleteUnusedDataset(ds, ""); });
    a.join();
    b.join();
    if (enqueued.ok() && deleted.ok()) ++both;
    jobs += enqueued.ok();
    deletes += deleted.ok();
    // Exactly one wins (SQLite may also answer busy; neither then).
    EXPECT_TRUE(enqueued.ok() || absl::IsNotFound(enqueued) || absl::IsUnavailable(enqueued))
        << enqueued;
    EXPECT_TRUE(deleted.ok() || absl::IsFailedPrecondition(deleted) ||
                absl::IsUnavailable(deleted))
        << deleted;
    // What the catalogue holds agrees with the answers.
    EXPECT_EQ(cat_->GetJob(job.id()).ok(), enqueued.ok());
    EXPECT_EQ(cat_->GetDataset(ds).ok(), !deleted.ok());
  }
  EXPECT_EQ(both, 0);
  EXPECT_EQ(jobs + deletes, 40);
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

// Binaries of two schema versions on one database, as in a rolling upgrade:
// after an additive step the older binary still starts and works (it is
// also what a rollback runs); after a step marked incompatible it is refused
// with a message naming the version it needs.
TEST(PostgresCatalogueTest, OlderBinariesRunOnACompatibleNewerSchemaOnly) {
  auto& pg = testing::PostgresHarness::Get();
  if (!pg.Available()) GTEST_SKIP() << "PostgreSQL not available: " << pg.Why();
  auto current = PostgresMigrations();
  ASSERT_TRUE(current.ok()) << current.status();
  ASSERT_EQ(current->size(), static_cast<size_t>(kPostgresSchemaVersion));
  std::vector<SchemaMigration> additive = *current;
  additive.push_back({"CREATE TABLE upgrade_probe (x INTEGER)", kPostgresSchemaVersion});
  std::vector<SchemaMigration> breaking = *current;
  breaking.push_back({"CREATE TABLE upgrade_probe (x INTEGER)", kPostgresSchemaVersion + 1});

  const std::string uri = pg.NewDatabase();
  auto old_binary = PostgresCatalogue::Open(uri, 1, *current);
  ASSERT_TRUE(old_binary.ok()) << old_binary.status();
  v1::Dataset d;
  d.set_id("ds-before");
  ASSERT_TRUE((*old_binary)->PutDataset(d).ok());
  auto new_binary = PostgresCatalogue::Open(uri, 1, additive);
  ASSERT_TRUE(new_binary.ok()) << new_binary.status();
  d.set_id("ds-after");
  ASSERT_TRUE((*new_binary)->PutDataset(d).ok());
  // The running old replica goes on, and a restarted one starts.
  EXPECT_TRUE((*old_binary)->GetDataset("ds-after").ok());
  auto restarted = PostgresCatalogue::Open(uri, 1, *current);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  EXPECT_TRUE((*restarted)->GetDataset("ds-before").ok());
  // The migration ran once, whoever opens next.
  ASSERT_TRUE(PostgresCatalogue::Open(uri, 1, additive).ok());
  pqxx::connection check(uri);
  pqxx::work txn(check);
  const pqxx::row schema = txn.exec1("SELECT version, compatible_from FROM dendro_schema");
  EXPECT_EQ(schema[0].as<int>(), kPostgresSchemaVersion + 1);
  EXPECT_EQ(schema[1].as<int>(), kPostgresSchemaVersion);
  txn.commit();

  const std::string uri2 = pg.NewDatabase();
  ASSERT_TRUE(PostgresCatalogue::Open(uri2, 1, *current).ok());
  ASSERT_TRUE(PostgresCatalogue::Open(uri2, 1, breaking).ok());
  auto refused = PostgresCatalogue::Open(uri2, 1, *current);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr(absl::StrCat("needs a dendrod of schema version ",
                                     kPostgresSchemaVersion + 1, " or later")));
}

// A catalogue written by a binary of schema 2 (before dataset generations)
// gains them in place: its datasets become generation 1 of themselves, and
// a binary of schema 2 still inserts (NULL lineage) beside a newer one.
TEST(PostgresCatalogueTest, DatasetsFromBeforeGenerationsAreFirstGenerations) {
  auto& pg = testing::PostgresHarness::Get();
  if (!pg.Available()) GTEST_SKIP() << "PostgreSQL not available: " << pg.Why();
  auto current = PostgresMigrations();
  ASSERT_TRUE(current.ok()) << current.status();
  ASSERT_GE(current->size(), 3u);
  const std::vector<SchemaMigration> v2(current->begin(), current->begin() + 2);
  const std::string uri = pg.NewDatabase();
  {
    auto old_binary = PostgresCatalogue::Open(uri, 1, v2);
    ASSERT_TRUE(old_binary.ok()) << old_binary.status();
    pqxx::connection c(uri);
    pqxx::work txn(c);
    v1::Dataset d;
    d.set_id("ds-old");
    txn.exec_params("INSERT INTO datasets (id, record) VALUES ($1, $2)", d.id(),
                    pqxx::binarystring(d.SerializeAsString()));
    txn.commit();
  }
  auto upgraded = PostgresCatalogue::Open(uri, 1, *current);
  ASSERT_TRUE(upgraded.ok()) << upgraded.status();
  auto first = (*upgraded)->GetDatasetGeneration("ds-old", 1);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->id(), "ds-old");
  // A schema-2 binary still running beside it keeps working.
  auto old_binary = PostgresCatalogue::Open(uri, 1, v2);
  ASSERT_TRUE(old_binary.ok()) << old_binary.status();
}

// With a pool, a transaction that waits (here on a table lock held by
// another session) holds one connection, not the whole catalogue: other
// operations go on meanwhile. With a single shared connection the GetDataset
// below would queue behind the blocked GetJob.
TEST(PostgresCatalogueTest, ABlockedTransactionDoesNotHoldUpTheOthers) {
  auto& pg = testing::PostgresHarness::Get();
  if (!pg.Available()) GTEST_SKIP() << "PostgreSQL not available: " << pg.Why();
  const std::string uri = pg.NewDatabase();
  // lock_timeout only turns a regression (the GetDataset queued behind the
  // blocked GetJob, which waits for the lock taken below until the
  // GetDataset returns) into a failure instead of a hang.
  auto cat = PostgresCatalogue::Open(uri + "?options=-c%20lock_timeout%3D20s",
                                     /*connections=*/2);
  ASSERT_TRUE(cat.ok()) << cat.status();
  v1::Dataset d;
  d.set_id("ds-1");
  ASSERT_TRUE((*cat)->PutDataset(d).ok());

  pqxx::connection locker(uri);
  pqxx::work lock_txn(locker);
  lock_txn.exec("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE");
  std::atomic<bool> blocked_done{false};
  std::thread blocked([&] {
    auto job = (*cat)->GetJob("job-1");  // waits for the lock
    EXPECT_EQ(job.status().code(), absl::StatusCode::kNotFound) << job.status();
    blocked_done = true;
  });
  // Until the GetJob's session is seen waiting for the lock.
  pqxx::connection watcher(uri);
  for (;;) {
    pqxx::nontransaction q(watcher);
    if (q.exec("SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
               "AND query LIKE '%jobs%'").size() == 1) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto got = (*cat)->GetDataset("ds-1");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(blocked_done.load()) << "GetDataset returned only after the blocked GetJob";
  lock_txn.commit();
  blocked.join();
  EXPECT_TRUE(blocked_done.load());
}

TEST(PostgresCatalogueTest, AnEmptyPoolIsRefused) {
  auto c = PostgresCatalogue::Open("postgresql://dendro@127.0.0.1:1/none", 0);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
}

TEST(PostgresCatalogueTest, UnreachableDatabaseIsUnavailable) {
  auto c = PostgresCatalogue::Open("postgresql://dendro@127.0.0.1:1/none?connect_timeout=2");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable) << c.status();
}

}  // namespace
}  // namespace dendro::server
