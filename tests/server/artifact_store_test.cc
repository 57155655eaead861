// The ArtifactStore contract, run against both implementations through one
// fixture, and what the shared-volume store does beyond it.
#include "server/storage/artifact_store.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/storage/checksum.h"
#include "server/storage/local_artifact_store.h"
#include "server/storage/shared_volume_store.h"

namespace dendro::server {
namespace {

namespace fs = std::filesystem;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct StoreKind {
  std::string name;
  std::function<std::unique_ptr<ArtifactStore>(const std::string&)> make;
};

class ArtifactStoreContract : public ::testing::TestWithParam<StoreKind> {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            absl::StrCat("dendro_artifacts_", GetParam().name, "_", ::getpid());
    fs::remove_all(root_);
    fs::create_directories(root_);
    store_ = GetParam().make(root_.string());
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(root_);
  }
  // Regular files anywhere under `dir`, trash excluded.
  int FilesUnder(const fs::path& dir) {
    int n = 0;
    if (!fs::exists(dir)) return 0;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      if (e.path().string().find("/trash/") != std::string::npos) continue;
      n += e.is_regular_file() ? 1 : 0;
    }
    return n;
  }
  absl::Status Put(const std::string& key, const std::string& bytes) {
    auto w = store_->Create(key, Durability::kDurable);
    if (!w.ok()) return w.status();
    if (absl::Status s = (*w)->Append(bytes); !s.ok()) return s;
    return (*w)->Commit();
  }

  fs::path root_;
  std::unique_ptr<ArtifactStore> store_;
};

TEST_P(ArtifactStoreContract, AnObjectAppearsOnlyWhenCommittedAndWhole) {
  auto w = store_->Create("datasets/ds-1/X.npy", Durability::kDurable);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->Append("hello, ").ok());
  ASSERT_TRUE((*w)->Append(std::string(3 << 20, 'x')).ok());
  EXPECT_EQ((*w)->size(), 7 + (3 << 20));
  EXPECT_EQ(store_->LocalPath("datasets/ds-1/X.npy").status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE((*w)->Commit().ok());
  auto path = store_->LocalPath("datasets/ds-1/X.npy");
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(Slurp(*path), "hello, " + std::string(3 << 20, 'x'));
  EXPECT_EQ(store_->Bytes("datasets/ds-1/X.npy"), 7 + (3 << 20));
  EXPECT_EQ(store_->Bytes("datasets/ds-1"), 7 + (3 << 20));
  EXPECT_EQ(store_->Bytes("datasets/absent"), 0);
  // The writer's checksum is that of the bytes as they lie on disk.
  auto on_disk = ChecksumFile(*path);
  ASSERT_TRUE(on_disk.ok());
  EXPECT_EQ((*w)->checksum(), *on_disk);
  EXPECT_NE((*w)->checksum(), ChecksumFile(*path + ".absent").value_or(""));
}

TEST(Checksums, NameTheFileThatDiffersIsMissingOrIsExtra) {
  const ChecksumMap recorded = {{"a.json", "0123456789abcdef"}, {"b.npy", "fedcba9876543210"}};
  EXPECT_TRUE(CompareChecksums(recorded, recorded, "model 'm' version 1").ok());
  ChecksumMap changed = recorded;
  changed["b.npy"] = "fedcba9876543211";
  absl::Status s = CompareChecksums(recorded, changed, "model 'm' version 1");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("model 'm' version 1 is damaged: b.npy"), std::string::npos) << s;
  ChecksumMap missing = recorded;
  missing.erase("a.json");
  EXPECT_NE(CompareChecksums(recorded, missing, "x").message().find("a.json is missing"),
            std::string::npos);
  ChecksumMap extra = recorded;
  extra["c.bin"] = "0000000000000000";
  EXPECT_NE(CompareChecksums(recorded, extra, "x").message().find("c.bin"), std::string::npos);
  // XXH3-64 of the empty input, a published test vector.
  EXPECT_EQ(Checksum().Hex(), "2d06800538d394c2");
}

TEST(Checksums, EveryFileOfATreeWhateverItsSizeAndOrder) {
  // Files read through one reused block: none may see another's bytes,
  // whether smaller, equal to or larger than the block (256 KiB), a
  // multiple of it or not, before or after a larger one.
  const fs::path dir =
      fs::temp_directory_path() / ("dendro_checksum_tree_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "sub");
  const std::vector<std::pair<std::string, size_t>> files = {
      {"a_big.npy", (size_t{1} << 20) + 3},
      {"b_small.json", 5},
      {"c_empty", 0},
      {"sub/d_block", size_t{256} << 10},
      {"sub/e_block1", (size_t{256} << 10) + 1}};
  ChecksumMap expected;
  for (size_t f = 0; f < files.size(); ++f) {
    std::string bytes(files[f].second, '\0');
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 131 + f) % 251);
    std::ofstream(dir / files[f].first, std::ios::binary) << bytes;
    Checksum sum;
    sum.Update(bytes);
    expected[files[f].first] = sum.Hex();
    auto one = ChecksumFile((dir / files[f].first).string());
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_EQ(*one, sum.Hex()) << files[f].first;
  }
  auto tree = ChecksumTree(dir.string());
  ASSERT_TRUE(tree.ok()) << tree.status();
  EXPECT_EQ(*tree, expected);
  fs::remove_all(dir);
}

TEST_P(ArtifactStoreContract, VolatileObjectsAreAlsoAtomicForReaders) {
  auto w = store_->Create("transient/ds-2/X.npy", Durability::kVolatile);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->Append("abc").ok());
  EXPECT_FALSE(store_->LocalPath("transient/ds-2/X.npy").ok());
  ASSERT_TRUE((*w)->Commit().ok());
  EXPECT_EQ(Slurp(*store_->LocalPath("transient/ds-2/X.npy")), "abc");
}

TEST_P(ArtifactStoreContract, AnAbandonedWriterLeavesNoFile) {
  {
    auto w = store_->Create("datasets/ds-3/X.npy", Durability::kDurable);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Append(std::string(1 << 20, 'y')).ok());
  }
  EXPECT_FALSE(store_->LocalPath("datasets/ds-3/X.npy").ok());
  EXPECT_EQ(FilesUnder(root_), 0);
}

TEST_P(ArtifactStoreContract, AStagedDirectoryIsPublishedOrRemoved) {
  {
    auto staged = store_->Stage("models/m/m-1");
    ASSERT_TRUE(staged.ok()) << staged.status();
    std::ofstream((*staged)->path() + "/tree.json") << "{}";
    ASSERT_TRUE((*staged)->Publish().ok());
  }
  auto path = store_->LocalPath("models/m/m-1");
  ASSERT_TRUE(path.ok());
  EXPECT_EQ(Slurp(*path + "/tree.json"), "{}");
  EXPECT_EQ(store_->Bytes("models/m/m-1"), 2);
  EXPECT_EQ(store_->Stage("models/m/m-1").status().code(), absl::StatusCode::kAlreadyExists);
  {
    auto staged = store_->Stage("models/m/m-2");
    ASSERT_TRUE(staged.ok());
    std::ofstream((*staged)->path() + "/tree.json") << "{\"half\":";
  }
  EXPECT_EQ(store_->LocalPath("models/m/m-2").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(FilesUnder(root_), 1);
}

TEST_P(ArtifactStoreContract, RemoveHidesAnObjectAndIsIdempotent) {
  ASSERT_TRUE(Put("datasets/ds-4/X.npy", "1234").ok());
  ASSERT_TRUE(Put("datasets/ds-5/X.npy", "5678").ok());
  // A reader that opened the file before the removal keeps reading it.
  std::ifstream reader(*store_->LocalPath("datasets/ds-4/X.npy"), std::ios::binary);
  ASSERT_TRUE(store_->Remove("datasets/ds-4").ok());
  ASSERT_TRUE(store_->Remove("datasets/ds-4").ok());
  ASSERT_TRUE(store_->Remove("datasets/never-there").ok());
  EXPECT_EQ(store_->LocalPath("datasets/ds-4/X.npy").status().code(),
            absl::StatusCode::kNotFound);
  std::string got(4, '\0');
  reader.read(got.data(), 4);
  EXPECT_EQ(got, "1234");
  auto listed = store_->List("datasets");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].key, "datasets/ds-5");
}

TEST_P(ArtifactStoreContract, ListGivesChildrenAndTheirNewestChange) {
  EXPECT_TRUE(store_->List("models")->empty());
  const absl::Time before = absl::Now() - absl::Seconds(2);
  ASSERT_TRUE(Put("models/a/m-1/tree.json", "{}").ok());
  ASSERT_TRUE(Put("models/b/m-1/tree.json", "{}").ok());
  auto listed = store_->List("models");
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 2u);
  for (const ArtifactEntry& e : *listed) {
    EXPECT_TRUE(e.key == "models/a" || e.key == "models/b") << e.key;
    EXPECT_GE(e.modified, before);
    EXPECT_LE(e.modified, absl::Now() + absl::Seconds(2));
  }
}

TEST_P(ArtifactStoreContract, KeysThatCouldEscapeTheStoreAreRefused) {
  for (const std::string key : {"", "/etc/passwd", "../x", "a/../../x", "a//b", "a/./b", "a/",
                                "a b", "a\\b"}) {
    SCOPED_TRACE(key);
    EXPECT_EQ(store_->Create(key, Durability::kDurable).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(store_->Stage(key).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(store_->LocalPath(key).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(store_->Remove(key).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(store_->List(key).status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE(ValidateArtifactKey("models/my.model_v-2/m-0a1b").ok());
}

INSTANTIATE_TEST_SUITE_P(
    Stores, ArtifactStoreContract,
    ::testing::Values(
        StoreKind{"local",
                  [](const std::string& root) { return std::make_unique<LocalArtifactStore>(root); }},
        StoreKind{"shared_volume",
                  [](const std::string& root) { return std::make_unique<SharedVolumeStore>(root); }}),
    [](const ::testing::TestParamInfo<StoreKind>& info) { return info.param.name; });

// --- What differs ---------------------------------------------------------------

TEST(LocalArtifactStore, OwnsItsDirectorySoOrphansNeedNoGraceAndRemovedFilesGoAtOnce) {
  const fs::path root = fs::temp_directory_path() / absl::StrCat("dendro_local_", ::getpid());
  fs::remove_all(root);
  {
    LocalArtifactStore store(root.string());
    EXPECT_EQ(store.orphan_grace(), absl::ZeroDuration());
    auto w = store.Create("datasets/ds-1/X.npy", Durability::kDurable);
    ASSERT_TRUE(w.ok() && (*w)->Append("x").ok() && (*w)->Commit().ok());
    // A reader that opened the file before the removal keeps reading it.
    std::ifstream reader(root / "datasets" / "ds-1" / "X.npy");
    ASSERT_TRUE(store.Remove("datasets/ds-1").ok());
    EXPECT_FALSE(fs::exists(root / "datasets" / "ds-1"));
    EXPECT_EQ(store.Bytes("datasets/ds-1"), 0);
    char c = 0;
    EXPECT_TRUE(reader.get(c) && c == 'x');
    // Deleted in the background; the store's destruction waits for it.
  }
  EXPECT_TRUE(!fs::exists(root / "trash") || fs::is_empty(root / "trash"));

  // Trash a crash left behind goes at the next start's housekeeping.
  fs::create_directories(root / "trash" / "1700000000-t-0-datasets+ds-2");
  std::ofstream(root / "trash" / "1700000000-t-0-datasets+ds-2" / "X.npy") << "y";
  LocalArtifactStore store(root.string());
  ASSERT_TRUE(store.Maintain().ok());
  EXPECT_FALSE(fs::exists(root / "trash"));
  fs::remove_all(root);
}

TEST(SharedVolumeStore, DefersRemovalThroughTrashForReadersOnOtherReplicas) {
  const fs::path root = fs::temp_directory_path() / absl::StrCat("dendro_shared_", ::getpid());
  fs::remove_all(root);
  SharedVolumeStore store(root.string(), absl::Hours(1), absl::Minutes(10));
  EXPECT_EQ(store.orphan_grace(), absl::Hours(1));
  auto w = store.Create("models/m/m-1/tree.json", Durability::kDurable);
  ASSERT_TRUE(w.ok() && (*w)->Append("{}").ok() && (*w)->Commit().ok());
  ASSERT_TRUE(store.Remove("models/m/m-1").ok());
  EXPECT_FALSE(fs::exists(root / "models" / "m" / "m-1"));
  // Still on the volume, under a name that says when it was removed.
  std::vector<fs::path> trash;
  for (const auto& e : fs::directory_iterator(root / "trash")) trash.push_back(e.path());
  ASSERT_EQ(trash.size(), 1u);
  const std::string name = trash[0].filename().string();
  EXPECT_NE(name.find("models+m+m-1"), std::string::npos) << name;
  EXPECT_EQ(fs::file_size(trash[0] / "tree.json"), 2u);
  ASSERT_TRUE(store.Maintain().ok());
  EXPECT_TRUE(fs::exists(trash[0]));  // younger than the trash grace
  // Eleven minutes later, the next housekeeping deletes it.
  const std::string aged = absl::StrCat(absl::ToUnixSeconds(absl::Now() - absl::Minutes(11)),
                                        name.substr(name.find('-')));
  fs::rename(trash[0], root / "trash" / aged);
  ASSERT_TRUE(store.Maintain().ok());
  EXPECT_FALSE(fs::exists(root / "trash" / aged));
  fs::remove_all(root);
}

}  // namespace
}  // namespace dendro::server
