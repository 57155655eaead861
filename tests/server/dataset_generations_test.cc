// Dataset generations (DatasetHeader.append_to) through the DatasetStore,
// on both catalogues: what an append stores, how references resolve, what
// is refused, and two appends racing for one generation.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/io/npy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/storage/dataset_store.h"
#include "server/storage/local_artifact_store.h"
#include "tests/server/catalogue_fixture.h"

namespace dendro::server {
namespace {

using ::testing::HasSubstr;

class DatasetGenerationsTest : public testing::BothCataloguesTest {
 protected:
  void SetUp() override {
    BothCataloguesTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    std::filesystem::create_directories(dir_ / "data");
    artifacts_ = std::make_unique<LocalArtifactStore>((dir_ / "data").string());
    store_ = std::make_unique<DatasetStore>(artifacts_.get(), cat_.get(),
                                            DiskGuard(dir_.string(), MinFreeDisk{}));
  }
  void TearDown() override {
    store_.reset();
    artifacts_.reset();
    BothCataloguesTest::TearDown();
  }

  // Rows r0 .. r0 + n - 1 of a 3-column matrix whose element (r, c) is
  // r * 10 + c, with label r % 4.
  static std::vector<float> Rows(int64_t r0, int64_t n) {
    std::vector<float> x;
    for (int64_t r = r0; r < r0 + n; ++r) {
      for (int c = 0; c < 3; ++c) x.push_back(static_cast<float>(r * 10 + c));
    }
    return x;
  }
  static std::vector<int64_t> Labels(int64_t r0, int64_t n) {
    std::vector<int64_t> y;
    for (int64_t r = r0; r < r0 + n; ++r) y.push_back(r % 4);
    return y;
  }

  // Starts an upload of rows r0 .. r0 + n - 1 (all but Finish).
  absl::StatusOr<std::unique_ptr<DatasetUpload>> Start(int64_t r0, int64_t n,
                                                       const std::string& append_to,
                                                       bool labels = true, int64_t cols = 3,
                                                       bool transient = false) {
    std::unique_ptr<DatasetUpload> up = store_->StartUpload();
    v1::DatasetHeader h;
    h.set_rows(n);
    h.set_cols(cols);
    h.set_has_labels(labels);
    h.set_transient(transient);
    h.set_append_to(append_to);
    if (append_to.empty()) h.set_display_name("first");
    absl::Status s = up->Begin(h);
    if (!s.ok()) return s;
    const std::vector<float> x = Rows(r0, n);
    s = up->AppendData(std::string_view(reinterpret_cast<const char*>(x.data()), x.size() * 4));
    if (!s.ok()) return s;
    if (labels) {
      const std::vector<int64_t> y = Labels(r0, n);
      s = up->AppendLabels(std::string_view(reinterpret_cast<const char*>(y.data()), y.size() * 8));
      if (!s.ok()) return s;
    }
    return up;
  }
  absl::StatusOr<v1::Dataset> Upload(int64_t r0, int64_t n, const std::string& append_to = "") {
    absl::StatusOr<std::unique_ptr<DatasetUpload>> up = Start(r0, n, append_to);
    if (!up.ok()) return up.status();
    return (*up)->Finish();
  }
  // The dataset's rows as opened for a job, checked against Rows/Labels.
  void ExpectRows(const std::string& id, int64_t n) {
    auto ds = store_->Open(id);
    ASSERT_TRUE(ds.ok()) << ds.status();
    ASSERT_EQ((*ds)->matrix().rows(), n);
    const std::vector<float> want = Rows(0, n);
    EXPECT_EQ(std::memcmp((*ds)->matrix().data(), want.data(), want.size() * 4), 0) << id;
    const std::vector<int64_t> labels = Labels(0, n);
    ASSERT_EQ((*ds)->labels().size(), labels.size());
    EXPECT_TRUE(std::equal(labels.begin(), labels.end(), (*ds)->labels().begin())) << id;
  }

  std::unique_ptr<LocalArtifactStore> artifacts_;
  std::unique_ptr<DatasetStore> store_;
};

TEST_P(DatasetGenerationsTest, AnAppendIsANewDatasetWithEveryRowAndTheOldOneStays) {
  auto first = Upload(0, 30);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->lineage(), first->id());
  EXPECT_EQ(first->generation(), 1);

  auto second = Upload(30, 20, first->id());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_NE(second->id(), first->id());
  EXPECT_EQ(second->lineage(), first->id());
  EXPECT_EQ(second->generation(), 2);
  EXPECT_EQ(second->rows(), 50);
  EXPECT_EQ(second->display_name(), "first");  // inherited when not given
  EXPECT_EQ(second->checksums().size(), 2u);
  EXPECT_TRUE(second->stats().computed());
  EXPECT_EQ(second->stats().num_classes(), 4);
  ExpectRows(second->id(), 50);
  ExpectRows(first->id(), 30);  // untouched

  // Pinned to the newest generation: accepted.
  auto third = Upload(50, 5, absl::StrCat(first->id(), ":2"));
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->generation(), 3);
  ExpectRows(third->id(), 55);

  // References: the lineage is its newest generation, ":G" a given one,
  // any generation's own id that generation.
  EXPECT_EQ(store_->Resolve(first->id())->id(), third->id());
  EXPECT_EQ(store_->Resolve(absl::StrCat(first->id(), ":1"))->id(), first->id());
  EXPECT_EQ(store_->Resolve(absl::StrCat(first->id(), ":2"))->id(), second->id());
  EXPECT_EQ(store_->Resolve(second->id())->id(), second->id());
  EXPECT_EQ(store_->ResolveExact(first->id())->id(), first->id());
  EXPECT_EQ(store_->Resolve(absl::StrCat(first->id(), ":9")).status().code(),
            absl::StatusCode::kNotFound);
  for (const std::string bad : {":1", "ds-x:0", "ds-x:-1", "ds-x:two", "ds-x:"}) {
    EXPECT_EQ(store_->Resolve(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }

  // Deleting one generation leaves the others; the lineage then names the
  // newest that is left.
  ASSERT_TRUE(store_->Delete(absl::StrCat(first->id(), ":3")).ok());
  EXPECT_EQ(store_->Resolve(first->id())->id(), second->id());
  ExpectRows(second->id(), 50);
  ASSERT_TRUE(store_->Delete(first->id()).ok());  // generation 1, exactly
  EXPECT_EQ(store_->Resolve(first->id())->id(), second->id());
  auto fourth = Upload(50, 10, first->id());
  ASSERT_TRUE(fourth.ok()) << fourth.status();
  EXPECT_EQ(fourth->generation(), 3);  // the next after the newest left
  ExpectRows(fourth->id(), 60);
}

TEST_P(DatasetGenerationsTest, AppendsThatCannotFollowAreRefusedAndStoreNothing) {
  auto first = Upload(0, 30);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(Upload(30, 10, first->id()).ok());
  const auto ids_before = cat_->AllDatasetIds();
  ASSERT_TRUE(ids_before.ok());

  const struct {
    absl::StatusOr<std::unique_ptr<DatasetUpload>> up;
    absl::StatusCode code;
    const char* says;
  } cases[] = {
      {Start(40, 5, absl::StrCat(first->id(), ":1")), absl::StatusCode::kFailedPrecondition,
       "whose newest is generation 2"},
      {Start(40, 5, first->id(), true, 4), absl::StatusCode::kInvalidArgument,
       "has 3 columns, the appended rows 4"},
      {Start(40, 5, first->id(), false), absl::StatusCode::kInvalidArgument,
       "is labelled; the appended rows must have labels too"},
      {Start(40, 5, first->id(), true, 3, true), absl::StatusCode::kInvalidArgument,
       "append_to and transient"},
      {Start(40, 5, "ds-nosuch"), absl::StatusCode::kNotFound, "ds-nosuch"},
      {Start(40, 5, "ds-x:y"), absl::StatusCode::kInvalidArgument, "generation G >= 1"},
  };
  for (const auto& c : cases) {
    ASSERT_FALSE(c.up.ok()) << c.says;
    EXPECT_EQ(c.up.status().code(), c.code) << c.up.status();
    EXPECT_THAT(std::string(c.up.status().message()), HasSubstr(c.says));
  }
  // Appending to a transient dataset.
  std::unique_ptr<DatasetUpload> t = store_->StartUpload();
  v1::DatasetHeader h;
  h.set_rows(2);
  h.set_cols(3);
  h.set_transient(true);
  ASSERT_TRUE(t->Begin(h).ok());
  const std::vector<float> x = Rows(0, 2);
  ASSERT_TRUE(t->AppendData(std::string_view(reinterpret_cast<const char*>(x.data()), 24)).ok());
  auto transient = t->Finish();
  ASSERT_TRUE(transient.ok()) << transient.status();
  auto onto_transient = Start(2, 2, transient->id(), false);
  EXPECT_EQ(onto_transient.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(onto_transient.status().message()), HasSubstr("is transient"));

  const auto ids_after = cat_->AllDatasetIds();
  ASSERT_TRUE(ids_after.ok());
  EXPECT_EQ(ids_after->size(), ids_before->size() + 1);  // the transient one only
}

TEST_P(DatasetGenerationsTest, OfTwoAppendsRacingForOneGenerationTheSecondIsAborted) {
  auto first = Upload(0, 30);
  ASSERT_TRUE(first.ok()) << first.status();
  auto a = Start(30, 5, first->id());
  auto b = Start(30, 7, first->id());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  auto won = (*a)->Finish();
  ASSERT_TRUE(won.ok()) << won.status();
  EXPECT_EQ(won->generation(), 2);
  auto lost = (*b)->Finish();
  ASSERT_FALSE(lost.ok());
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(lost.status().message()),
              HasSubstr(absl::StrCat("generation 2 of dataset '", first->id())));
  b->reset();  // the loser's files go with it
  EXPECT_EQ(store_->Resolve(first->id())->id(), won->id());
  ExpectRows(won->id(), 35);
  auto files = artifacts_->List("datasets");
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->size(), 2u);  // the two generations' folders
}

INSTANTIATE_TEST_SUITE_P(Both, DatasetGenerationsTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace dendro::server
