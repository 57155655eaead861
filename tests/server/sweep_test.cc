// Start-up sweeps of unlisted files: at once for a data directory one
// server owns, only after a quiet period for one that replicas share.

#include <sys/time.h>
#include <utime.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "server/catalogue/catalogue.h"
#include "server/catalogue/open_catalogue.h"
#include "server/storage/dataset_store.h"
#include "server/storage/local_artifact_store.h"
#include "server/models/model_registry.h"
#include "server/storage/shared_volume_store.h"

namespace dendro::server {
namespace {

namespace fs = std::filesystem;

// Sets the modification time of `path` and everything under it to `age` ago.
void Age(const fs::path& path, absl::Duration age) {
  const int64_t t = absl::ToUnixSeconds(absl::Now() - age);
  const utimbuf times{static_cast<time_t>(t), static_cast<time_t>(t)};
  if (fs::is_directory(path)) {
    for (const auto& e : fs::recursive_directory_iterator(path)) {
      ASSERT_EQ(::utime(e.path().c_str(), &times), 0);
    }
  }
  ASSERT_EQ(::utime(path.c_str(), &times), 0);
}

void Touch(const fs::path& file) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << "partial";
}

class SweepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dendro_sweep_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    auto cat = OpenCatalogue("", dir_.string());
    ASSERT_TRUE(cat.ok()) << cat.status();
    cat_ = *std::move(cat);
  }
  void TearDown() override {
    cat_.reset();
    fs::remove_all(dir_);
  }
  fs::path dir_;
  std::unique_ptr<Catalogue> cat_;
};

// True if `path` and everything under it is unchanged for `grace`.
bool Quiet(const fs::path& path, absl::Duration grace) {
  absl::Time newest;
  return NewestChange(path.string(), &newest) && newest <= absl::Now() - grace;
}

TEST_F(SweepTest, NewestChangeLooksAtEverythingUnderThePath) {
  Touch(dir_ / "a" / "b" / "x.npy");
  EXPECT_FALSE(Quiet(dir_ / "a", absl::Hours(1)));
  Age(dir_ / "a", absl::Hours(2));
  EXPECT_TRUE(Quiet(dir_ / "a", absl::Hours(1)));
  // One file still being written keeps the whole directory.
  Touch(dir_ / "a" / "b" / "y.npy.tmp.host.1.0");
  Age(dir_ / "a" / "b", absl::Hours(2));
  Age(dir_ / "a", absl::Hours(2));
  std::ofstream(dir_ / "a" / "b" / "y.npy.tmp.host.1.0", std::ios::app) << "more";
  EXPECT_FALSE(Quiet(dir_ / "a", absl::Hours(1)));
  EXPECT_FALSE(Quiet(dir_ / "missing", absl::Hours(1)));
}

TEST_F(SweepTest, SharedDirectoriesKeepRecentUnlistedFilesAndDropOldOnes) {
  SharedVolumeStore shared(dir_.string());
  DatasetStore datasets(&shared, cat_.get(), DiskGuard(dir_.string(), {}));
  ModelRegistry models(&shared, cat_.get(), 0);
  // Another replica's upload and model save in progress, and the leftovers
  // of a replica that crashed long ago.
  Touch(dir_ / "datasets" / "ds-inflight" / "x.npy.tmp.other.7.0");
  Touch(dir_ / "transient" / "ds-inflight2" / "x.npy.tmp.other.7.1");
  Touch(dir_ / "models" / "m" / "m-inflight" / "tree.json");
  Touch(dir_ / "datasets" / "ds-stale" / "x.npy");
  Touch(dir_ / "models" / "m" / "m-stale" / "tree.json");
  Age(dir_ / "datasets" / "ds-stale", absl::Hours(3));
  Age(dir_ / "models" / "m" / "m-stale", absl::Hours(3));

  ASSERT_TRUE(datasets.RemoveOrphans().ok());
  ASSERT_TRUE(models.RemoveOrphans().ok());
  EXPECT_TRUE(fs::exists(dir_ / "datasets" / "ds-inflight"));
  EXPECT_TRUE(fs::exists(dir_ / "transient" / "ds-inflight2"));
  EXPECT_TRUE(fs::exists(dir_ / "models" / "m" / "m-inflight"));
  EXPECT_FALSE(fs::exists(dir_ / "datasets" / "ds-stale"));
  EXPECT_FALSE(fs::exists(dir_ / "models" / "m" / "m-stale"));

  // A server that owns the directory removes them all at once.
  LocalArtifactStore owned(dir_.string());
  DatasetStore owned_datasets(&owned, cat_.get(), DiskGuard(dir_.string(), {}));
  ModelRegistry owned_models(&owned, cat_.get(), 0);
  ASSERT_TRUE(owned_datasets.RemoveOrphans().ok());
  ASSERT_TRUE(owned_models.RemoveOrphans().ok());
  EXPECT_FALSE(fs::exists(dir_ / "datasets" / "ds-inflight"));
  EXPECT_FALSE(fs::exists(dir_ / "transient" / "ds-inflight2"));
  EXPECT_FALSE(fs::exists(dir_ / "models" / "m" / "m-inflight"));
}

TEST_F(SweepTest, SharedTransientDatasetsStayWhileAJobNeedsThem) {
  SharedVolumeStore shared(dir_.string());
  DatasetStore datasets(&shared, cat_.get(), DiskGuard(dir_.string(), {}));
  for (const std::string id : {"ds-used", "ds-idle"}) {
    v1::Dataset d;
    d.set_id(id);
    d.set_transient(true);
    ASSERT_TRUE(cat_->PutDataset(d).ok());
    Touch(dir_ / "transient" / id / "x.npy");
    Age(dir_ / "transient" / id, absl::Hours(3));
  }
  v1::Job job;
  job.set_id("job-1");
  job.set_state(v1::JOB_STATE_QUEUED);
  job.mutable_spec()->set_dataset_id("ds-used");
  ASSERT_TRUE(cat_->EnqueueJob(job, 10).ok());
  ASSERT_TRUE(datasets.RemoveOrphans().ok());
  EXPECT_TRUE(cat_->GetDataset("ds-used").ok());
  EXPECT_TRUE(fs::exists(dir_ / "transient" / "ds-used"));
  EXPECT_EQ(cat_->GetDataset("ds-idle").status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(dir_ / "transient" / "ds-idle"));
}

}  // namespace
}  // namespace dendro::server
