// The in-memory model table (server/models/model_table.h) and the registry that
// keeps it: reads ordered by ticket, references resolved without the
// catalogue, this process's writes seen before they are answered (both
// catalogues), and other replicas' writes arriving by notification or, when
// one is lost, by reconciliation (a real PostgreSQL the test starts).
#include "server/models/model_table.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/catalogue/catalogue.h"
#include "server/catalogue/open_catalogue.h"
#include "server/storage/local_artifact_store.h"
#include "server/models/model_registry.h"
#include "tests/server/catalogue_fixture.h"
#include "tests/server/postgres_harness.h"

namespace dendro::server {
namespace {

using ::testing::HasSubstr;

StoredModel Version(const std::string& name, int64_t version,
                    std::vector<std::string> labels = {}) {
  StoredModel s;
  s.model.set_name(name);
  s.model.set_version(version);
  for (const std::string& l : labels) s.model.add_labels(l);
  s.dir = "models/" + name + "/v" + std::to_string(version);
  return s;
}

int64_t Found(const std::optional<absl::StatusOr<ModelTable::Entry>>& found) {
  if (!found.has_value()) return -1;
  if (!found->ok()) return -2;
  return (**found)->model.version();
}

TEST(ModelTableTest, ResolvesVersionsLatestAndLabelsOfHeldNamesOnly) {
  ModelTable table;
  EXPECT_FALSE(table.Find("m", 0, "").has_value());
  ASSERT_TRUE(table.Install("m", {Version("m", 1, {"prod"}), Version("m", 3)},
                            table.NextTicket()));
  EXPECT_EQ(Found(table.Find("m", 0, "")), 3);
  EXPECT_EQ(Found(table.Find("m", 1, "")), 1);
  EXPECT_EQ(Found(table.Find("m", 0, "prod")), 1);
  const auto missing = table.Find("m", 2, "");
  ASSERT_TRUE(missing.has_value());
  EXPECT_TRUE(absl::IsNotFound(missing->status()));
  EXPECT_THAT(std::string(missing->status().message()), HasSubstr("'m'"));
  const auto no_label = table.Find("m", 0, "canary");
  ASSERT_TRUE(no_label.has_value());
  EXPECT_TRUE(absl::IsNotFound(no_label->status()));
  EXPECT_THAT(std::string(no_label->status().message()), HasSubstr("canary"));
  EXPECT_FALSE(table.Find("other", 0, "").has_value());
}

TEST(ModelTableTest, AReadOlderThanTheOneHeldIsDiscarded) {
  ModelTable table;
  const uint64_t slow = table.NextTicket();   // read before a delete
  const uint64_t after = table.NextTicket();  // read after it
  ASSERT_TRUE(table.Install("m", {Version("m", 2)}, after));
  ModelTable::Dropped dropped;
  EXPECT_FALSE(table.Install("m", {Version("m", 1), Version("m", 2)}, slow, false, &dropped));
  EXPECT_TRUE(dropped.empty());
  EXPECT_EQ(Found(table.Find("m", 1, "")), -2);  // deleted stays deleted
}

TEST(ModelTableTest, ARemovedNameIsNotBroughtBackByAnOlderRead) {
  ModelTable table;
  ASSERT_TRUE(table.Install("m", {Version("m", 1)}, table.NextTicket()));
  const uint64_t slow = table.NextTicket();
  ModelTable::Dropped dropped;
  ASSERT_TRUE(table.Install("m", {}, table.NextTicket(), false, &dropped));
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0], std::make_pair(std::string("m"), int64_t{1}));
  EXPECT_FALSE(table.Find("m", 0, "").has_value());
  EXPECT_FALSE(table.Install("m", {Version("m", 1)}, slow));
  EXPECT_FALSE(table.Find("m", 0, "").has_value());
  // A newer read may add it again (a new version committed since).
  EXPECT_TRUE(table.Install("m", {Version("m", 2)}, table.NextTicket()));
  EXPECT_EQ(Found(table.Find("m", 0, "")), 2);
}

TEST(ModelTableTest, HeldOnlyAndReconciliationTouchOnlyHeldNames) {
  ModelTable table;
  EXPECT_FALSE(table.Install("a", {Version("a", 1)}, table.NextTicket(), /*held_only=*/true));
  EXPECT_FALSE(table.Holds("a"));
  ASSERT_TRUE(table.Install("a", {Version("a", 1)}, table.NextTicket()));
  ASSERT_TRUE(table.Install("b", {Version("b", 1), Version("b", 2)}, table.NextTicket()));
  ModelTable::Dropped dropped;
  // "a" is gone from the catalogue, "b" lost version 1, "c" is not held.
  table.InstallAll({Version("b", 2, {"prod"}), Version("c", 1)}, table.NextTicket(), &dropped);
  EXPECT_FALSE(table.Holds("a"));
  EXPECT_FALSE(table.Holds("c"));
  EXPECT_EQ(Found(table.Find("b", 0, "prod")), 2);
  EXPECT_EQ(dropped.size(), 2u);
}

TEST(ModelTableTest, ConcurrentLookupsAndInstallsSeeWholeReads) {
  ModelTable table;
  ASSERT_TRUE(table.Install("m", {Version("m", 1, {"prod"})}, table.NextTicket()));
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        // "prod" always points at a version the same read holds.
        const auto found = table.Find("m", 0, "prod");
        if (!found.has_value() || !found->ok()) ++torn;
      }
    });
  }
  for (int64_t v = 2; v < 300; ++v) {
    table.Install("m", {Version("m", v - 1), Version("m", v, {"prod"})}, table.NextTicket());
  }
  stop.store(true);
  for (std::thread& r : readers) r.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(Found(table.Find("m", 0, "prod")), 299);
}

// --- the registry over a real catalogue --------------------------------------

// Records the next version of `name` through `cat` (a job's commit without
// files: the tests here never load the model).
int64_t CommitVersion(Catalogue* cat, const std::string& name) {
  static std::atomic<int> jobs{0};
  v1::Model m;
  m.set_name(name);
  m.set_method("l2h");
  v1::Job job;
  job.set_id("job-" + std::to_string(++jobs));
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  auto committed = cat->CommitModel(m, "models/" + name + "/" + job.id(), job, 0);
  EXPECT_TRUE(committed.ok()) << committed.status();
  return committed.ok() ? committed->version : 0;
}

absl::StatusOr<v1::Model> GetRef(ModelRegistry& registry, const std::string& name,
                                 int64_t version, const std::string& label = "") {
  v1::ModelRef ref;
  ref.set_name(name);
  ref.set_version(version);
  ref.set_label(label);
  return registry.Get(ref);
}

class RegistryTableTest : public testing::BothCataloguesTest {
 protected:
  void SetUp() override {
    BothCataloguesTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    cat_->set_observer([this](const char*, double) { ++catalogue_ops_; });
    artifacts_ = std::make_unique<LocalArtifactStore>(dir_.string());
    registry_ = std::make_unique<ModelRegistry>(artifacts_.get(), cat_.get(), 1 << 20);
  }
  void TearDown() override {
    registry_.reset();
    BothCataloguesTest::TearDown();
  }

  std::atomic<int> catalogue_ops_{0};
  std::unique_ptr<LocalArtifactStore> artifacts_;
  std::unique_ptr<ModelRegistry> registry_;
};

TEST_P(RegistryTableTest, ReferencesResolveWithoutTheCatalogueOnceANameIsHeld) {
  CommitVersion(cat_.get(), "m");
  CommitVersion(cat_.get(), "m");
  ASSERT_TRUE(registry_->SetLabel("m", "prod", 1).ok());
  ASSERT_EQ(GetRef(*registry_, "m", 0)->version(), 2);  // held from here on
  const int before = catalogue_ops_.load();
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(GetRef(*registry_, "m", 0)->version(), 2);
    ASSERT_EQ(GetRef(*registry_, "m", 1)->version(), 1);
    auto labelled = GetRef(*registry_, "m", 0, "prod");
    ASSERT_TRUE(labelled.ok()) << labelled.status();
    ASSERT_EQ(labelled->version(), 1);
    ASSERT_THAT(labelled->labels(), ::testing::ElementsAre("prod"));
  }
  EXPECT_EQ(catalogue_ops_.load(), before);
}

TEST_P(RegistryTableTest, ThisProcesssWritesAreSeenBeforeTheyAreAnswered) {
  CommitVersion(cat_.get(), "m");
  CommitVersion(cat_.get(), "m");
  ASSERT_EQ(GetRef(*registry_, "m", 0)->version(), 2);
  ASSERT_TRUE(registry_->SetLabel("m", "prod", 2).ok());
  EXPECT_EQ(GetRef(*registry_, "m", 0, "prod")->version(), 2);
  ASSERT_TRUE(registry_->SetLabel("m", "prod", 1).ok());
  EXPECT_EQ(GetRef(*registry_, "m", 0, "prod")->version(), 1);
  ASSERT_TRUE(registry_->DeleteLabel("m", "prod").ok());
  EXPECT_TRUE(absl::IsNotFound(GetRef(*registry_, "m", 0, "prod").status()));
  ASSERT_TRUE(registry_->Delete("m", 2).ok());
  EXPECT_TRUE(absl::IsNotFound(GetRef(*registry_, "m", 2).status()));
  EXPECT_EQ(GetRef(*registry_, "m", 0)->version(), 1);
  ASSERT_TRUE(registry_->Delete("m", 0).ok());
  EXPECT_TRUE(absl::IsNotFound(GetRef(*registry_, "m", 0).status()));
  EXPECT_TRUE(absl::IsNotFound(GetRef(*registry_, "m", 1).status()));
}

TEST_P(RegistryTableTest, AVersionUnknownToTheTableIsLookedUpNotRefused) {
  ASSERT_TRUE(absl::IsNotFound(GetRef(*registry_, "m", 0).status()));
  CommitVersion(cat_.get(), "m");  // not through this registry, no notification
  EXPECT_EQ(GetRef(*registry_, "m", 0)->version(), 1);
  CommitVersion(cat_.get(), "m");
  // Held at version 1 only; asking for 2 reads the catalogue again.
  EXPECT_EQ(GetRef(*registry_, "m", 2)->version(), 2);
  EXPECT_EQ(GetRef(*registry_, "m", 0)->version(), 2);
}

INSTANTIATE_TEST_SUITE_P(Both, RegistryTableTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& info) { return info.param; });

// --- replicas sharing a PostgreSQL catalogue ---------------------------------

class ReplicaTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto& pg = testing::PostgresHarness::Get();
    if (!pg.Available()) GTEST_SKIP() << "PostgreSQL not available: " << pg.Why();
    uri_ = pg.NewDatabase();
    dir_ = std::filesystem::temp_directory_path() /
           ("dendro_replica_table_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    for (auto* cat : {&cat_a_, &cat_b_}) {
      auto opened = OpenCatalogue(uri_, dir_.string());
      ASSERT_TRUE(opened.ok()) << opened.status();
      *cat = *std::move(opened);
    }
    artifacts_ = std::make_unique<LocalArtifactStore>(dir_.string());
    a_ = std::make_unique<ModelRegistry>(artifacts_.get(), cat_a_.get(), 1 << 20);
    b_ = std::make_unique<ModelRegistry>(artifacts_.get(), cat_b_.get(), 1 << 20);
  }
  void TearDown() override {
    a_.reset();
    b_.reset();
    cat_a_.reset();
    cat_b_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Polls `done` for up to 30 s (a generous bound for a loaded machine; the
  // time taken is printed, not asserted).
  template <typename Pred>
  static bool Eventually(const char* what, Pred done) {
    const absl::Time start = absl::Now();
    while (absl::Now() - start < absl::Seconds(30)) {
      if (done()) {
        std::printf("%s: seen after %.0f ms\n", what,
                    absl::ToDoubleMilliseconds(absl::Now() - start));
        return true;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    return false;
  }

  std::string uri_;
  std::filesystem::path dir_;
  std::unique_ptr<Catalogue> cat_a_, cat_b_;
  std::unique_ptr<LocalArtifactStore> artifacts_;
  std::unique_ptr<ModelRegistry> a_, b_;
};

TEST_F(ReplicaTableTest, AnotherReplicasDeletesAndLabelMovesArriveByNotification) {
  // No reconciliation within the test: only a notification can tell A.
  a_->StartWatching(absl::Hours(1));
  CommitVersion(cat_b_.get(), "m");
  CommitVersion(cat_b_.get(), "m");
  ASSERT_TRUE(b_->SetLabel("m", "prod", 1).ok());
  ASSERT_EQ(GetRef(*a_, "m", 0, "prod")->version(), 1);  // A holds "m"

  ASSERT_TRUE(b_->SetLabel("m", "prod", 2).ok());
  EXPECT_TRUE(Eventually("label move", [&] {
    auto m = GetRef(*a_, "m", 0, "prod");
    return m.ok() && m->version() == 2;
  }));
  ASSERT_TRUE(b_->Delete("m", 1).ok());
  EXPECT_TRUE(Eventually("delete", [&] {
    return absl::IsNotFound(GetRef(*a_, "m", 1).status());
  }));
  CommitVersion(cat_b_.get(), "m");
  EXPECT_TRUE(Eventually("new latest", [&] {
    auto m = GetRef(*a_, "m", 0);
    return m.ok() && m->version() == 3;
  }));
}

TEST_F(ReplicaTableTest, ReconciliationRepairsAChangeWhoseNotificationWasLost) {
  a_->StartWatching(absl::Seconds(1));
  CommitVersion(cat_b_.get(), "m");
  CommitVersion(cat_b_.get(), "m");
  ASSERT_TRUE(b_->SetLabel("m", "prod", 1).ok());
  ASSERT_EQ(GetRef(*a_, "m", 0, "prod")->version(), 1);
  // Moved behind Dendro's back: no NOTIFY.
  ASSERT_TRUE(testing::PostgresHarness::Get().Sql(
      uri_, "UPDATE model_labels SET version = 2 WHERE name = 'm' AND label = 'prod'"));
  EXPECT_TRUE(Eventually("reconciled label", [&] {
    auto m = GetRef(*a_, "m", 0, "prod");
    return m.ok() && m->version() == 2;
  }));
}

// Idle workers of one replica are woken by a job another replica queues
// (JobManager wakes on WatchQueue), whether new or released back.
TEST_F(ReplicaTableTest, AJobQueuedThroughOneReplicaIsNotifiedToTheOther) {
  std::atomic<int> woken{0};
  auto watch = cat_a_->WatchQueue([&] { woken.fetch_add(1); });
  ASSERT_NE(watch, nullptr);
  // The channel is up once the watch has called once ("may have missed").
  ASSERT_TRUE(Eventually("listening", [&] { return woken.load() >= 1; }));
  v1::Dataset ds;
  ds.set_id("ds-q");
  ds.set_rows(1);
  ds.set_cols(1);
  ASSERT_TRUE(cat_b_->PutDataset(ds).ok());
  v1::Job job;
  job.set_id("job-q");
  job.set_state(v1::JOB_STATE_QUEUED);
  job.mutable_spec()->set_dataset_id("ds-q");
  const int before = woken.load();
  ASSERT_TRUE(cat_b_->EnqueueJob(job, 10).ok());
  EXPECT_TRUE(Eventually("queued job", [&] { return woken.load() > before; }));
  // Claimed and released back to the queue by B: A hears of it again.
  auto claimed = cat_b_->ClaimJob("replica-b", absl::Seconds(30));
  ASSERT_TRUE(claimed.ok() && claimed->has_value()) << claimed.status();
  const int after_claim = woken.load();
  v1::Job back = (*claimed)->job;
  back.set_state(v1::JOB_STATE_QUEUED);
  ASSERT_TRUE(cat_b_->ReleaseJob(back, (*claimed)->token).ok());
  EXPECT_TRUE(Eventually("released job", [&] { return woken.load() > after_claim; }));
  watch.reset();  // the calls stop with the watch
}

}  // namespace
}  // namespace dendro::server
