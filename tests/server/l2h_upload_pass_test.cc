// L2H's first pass during uploads: L2hUploadPass on its own (chunks cut
// anywhere, failures, abandonment) and through DatasetStore (kept with the
// dataset, given to the dataset's users, dropped with it, refused when the
// header asks for something else).
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/l2h/first_pass.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/storage/dataset_store.h"
#include "server/methods/l2h_upload_pass.h"
#include "server/methods/method.h"
#include "server/storage/local_artifact_store.h"
#include "server/catalogue/sqlite_catalogue.h"
#include "tests/temp_dir.h"

namespace dendro::server {
namespace {

using ::testing::HasSubstr;

std::vector<float> RandomLogits(int64_t rows, int32_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.f, 2.f);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (float& v : x) v = noise(rng);
  return x;
}

// The bytes of `x` cut into pieces of the given sizes, cycled.
std::vector<std::string> Cut(const std::vector<float>& x, const std::vector<size_t>& sizes) {
  const char* p = reinterpret_cast<const char*>(x.data());
  const size_t total = x.size() * sizeof(float);
  std::vector<std::string> out;
  for (size_t at = 0, j = 0; at < total; ++j) {
    const size_t n = std::min(sizes[j % sizes.size()], total - at);
    out.emplace_back(p + at, n);
    at += n;
  }
  return out;
}

void ExpectSameStates(const L2hFirstPass& got, const L2hFirstPass& want) {
  ASSERT_EQ(got.rows_added(), want.rows_added());
  for (int64_t i = 0; i < want.rows_added(); ++i) {
    const auto& a = got.states()[i];
    const auto& b = want.states()[i];
    ASSERT_EQ(std::memcmp(&a, &b, sizeof a), 0) << "row " << i;
  }
}

TEST(L2hUploadPass, ChunksCutAnywhereGiveTheWholeMatrixPass) {
  const int64_t rows = 700;
  const int32_t cols = 37;  // a row is 148 bytes
  const std::vector<float> x = RandomLogits(rows, cols, 3);
  L2hFirstPass want(rows, cols);
  ASSERT_TRUE(want.AddRows(x.data(), rows).ok());
  // Pieces inside a float, inside a row, across many rows, and larger than
  // the queue bound (let in alone).
  for (const std::vector<size_t>& sizes :
       std::vector<std::vector<size_t>>{{1}, {3, 5, 150}, {4099}, {4 * 37 * 3}, {40 << 20}}) {
    L2hUploadPass pass(rows, cols);
    for (std::string& piece : Cut(x, sizes)) {
      pass.Take(&piece);
      EXPECT_TRUE(piece.empty());
    }
    auto got = pass.Finish();
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE((*got)->complete());
    ExpectSameStates(**got, want);
  }
}

TEST(L2hUploadPass, AnIncompleteOrBadStreamGivesNoPass) {
  const std::vector<float> x = RandomLogits(10, 4, 5);
  {
    L2hUploadPass pass(10, 4);
    std::string part(reinterpret_cast<const char*>(x.data()), 9 * 16 + 5);
    pass.Take(&part);
    auto got = pass.Finish();
    EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(got.status().message()), HasSubstr("9 of 10 rows arrived"));
  }
  {
    std::vector<float> bad = x;
    bad[4 * 6 + 2] = std::numeric_limits<float>::infinity();
    L2hUploadPass pass(10, 4);
    for (std::string& piece : Cut(bad, {24})) pass.Take(&piece);
    auto got = pass.Finish();
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(got.status().message()), HasSubstr("row 6, column 2"));
  }
  {
    // Abandoned with work queued: the destructor stops the thread.
    L2hUploadPass pass(10, 4);
    for (std::string& piece : Cut(x, {7})) pass.Take(&piece);
  }
}

TEST(L2hUploadPass, APassThatFallsBehindKeepsTheRowsItDid) {
  // Chunks of a quarter of the queue bound, handed over far faster than a
  // pass can consume them (each is milliseconds of work): it falls behind
  // and stops. What it keeps is the first rows, whole, with the states of a
  // pass over them alone (how many depends on when its thread ran: none if
  // it never started before the queue was full).
  const int32_t cols = 64;
  const int64_t chunk_bytes = L2hUploadPass::kMaxQueuedBytes / 4;
  const int64_t rows = 12 * chunk_bytes / (4 * cols);
  const std::vector<float> x = RandomLogits(rows, cols, 7);
  L2hUploadPass pass(rows, cols);
  for (std::string& piece : Cut(x, {static_cast<size_t>(chunk_bytes)})) pass.Take(&piece);
  std::string behind;
  auto got = pass.Finish(&behind);
  ASSERT_TRUE(got.ok()) << got.status();
  const int64_t done = (*got)->rows_added();
  EXPECT_LT(done, rows);
  EXPECT_THAT(behind, HasSubstr("MiB behind the upload"));
  EXPECT_THAT(behind, HasSubstr(absl::StrCat("after ", done, " of ", rows, " rows")));
  // Behind by at least the chunk it could not take.
  const size_t stopped = behind.find("stopped ");
  ASSERT_NE(stopped, std::string::npos) << behind;
  EXPECT_GE(std::stoll(behind.substr(stopped + 8)), chunk_bytes >> 20) << behind;
  L2hFirstPass want(rows, cols);
  ASSERT_TRUE(want.AddRows(x.data(), done).ok());
  ExpectSameStates(**got, want);
}

class DatasetStoreFirstPassTest : public ::testing::Test {
 protected:
  void SetUp() override {
    artifacts_ = std::make_unique<LocalArtifactStore>(dir_.Path("data"));
    auto meta = SqliteCatalogue::Open(dir_.Path("meta.db"));
    ASSERT_TRUE(meta.ok()) << meta.status();
    meta_ = *std::move(meta);
    store_ = std::make_unique<DatasetStore>(artifacts_.get(), meta_.get(),
                                            DiskGuard(dir_.path(), MinFreeDisk{}),
                                            DatasetStore::kDefaultMaxDatasetBytes,
                                            UploadPreparers());
  }

  absl::StatusOr<v1::Dataset> Upload(const std::vector<float>& x, int64_t rows, int64_t cols,
                                     const std::string& prepare, size_t chunk) {
    auto upload = store_->StartUpload();
    v1::DatasetHeader h;
    h.set_rows(rows);
    h.set_cols(cols);
    h.set_transient(true);
    h.set_prepare(prepare);
    if (absl::Status s = upload->Begin(h); !s.ok()) return s;
    for (std::string& piece : Cut(x, {chunk})) {
      if (absl::Status s = upload->TakeData(&piece); !s.ok()) return s;
    }
    return upload->Finish();
  }

  ScopedTempDir dir_;
  std::unique_ptr<ArtifactStore> artifacts_;
  std::unique_ptr<Catalogue> meta_;
  std::unique_ptr<DatasetStore> store_;
};

TEST_F(DatasetStoreFirstPassTest, KeptWithTheDatasetUntilItIsDeleted) {
  const int64_t rows = 2000;
  const int32_t cols = 12;
  const std::vector<float> x = RandomLogits(rows, cols, 8);
  auto ds = Upload(x, rows, cols, "l2h", 1001);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_TRUE(store_->HasPrepared(ds->id()));
  auto loaded = store_->Open(ds->id());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const L2hFirstPass* pass = L2hFirstPassOf((*loaded)->prepared().get());
  ASSERT_NE(pass, nullptr);
  L2hFirstPass want(rows, cols);
  ASSERT_TRUE(want.AddRows(x.data(), rows).ok());
  ExpectSameStates(*pass, want);

  // Without prepare there is none.
  auto plain = Upload(x, rows, cols, "", 1001);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(store_->HasPrepared(plain->id()));
  auto plain_loaded = store_->Open(plain->id());
  ASSERT_TRUE(plain_loaded.ok());
  EXPECT_EQ((*plain_loaded)->prepared(), nullptr);

  loaded->reset();
  ASSERT_TRUE(store_->Delete(ds->id()).ok());
  EXPECT_FALSE(store_->HasPrepared(ds->id()));
}

TEST_F(DatasetStoreFirstPassTest, HeaderAsksForSomethingItCannotHave) {
  const std::vector<float> x = RandomLogits(4, 2, 1);
  auto ds = Upload(x, 4, 2, "tneb", 8);
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ds.status().message(), "upload: prepare must be empty or \"l2h\", got \"tneb\"");
  ds = Upload(x, 8, 1, "l2h", 8);
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ds.status().message(),
            "upload: prepare \"l2h\" needs at least 2 columns (clusters), got 1");
}

}  // namespace
}  // namespace dendro::server
