// The upload stream rules on their own (server/storage/upload_validator.h).
#include "server/storage/upload_validator.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dendro::server {
namespace {

std::string Floats(const std::vector<float>& v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

TEST(UploadValidator, FloatsMaySplitAcrossChunksAnywhere) {
  const std::string x = Floats({1, 2, 3, 4, 5, 6});
  for (size_t cut1 = 0; cut1 <= x.size(); ++cut1) {
    for (size_t cut2 = cut1; cut2 <= x.size(); ++cut2) {
      UploadValidator v;
      ASSERT_TRUE(v.Begin(3, 2, false, 1 << 20).ok());
      ASSERT_TRUE(v.Data(std::string_view(x).substr(0, cut1)).ok());
      ASSERT_TRUE(v.Data(std::string_view(x).substr(cut1, cut2 - cut1)).ok());
      ASSERT_TRUE(v.Data(std::string_view(x).substr(cut2)).ok());
      EXPECT_TRUE(v.Finish().ok());
    }
  }
}

std::string Labels(const std::vector<int64_t>& v) {
  std::string s(v.size() * 8, '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

// Constant columns and class sizes come out the same wherever the chunks
// split the floats and labels.
TEST(UploadValidator, StatisticsDoNotDependOnChunking) {
  // 4 rows x 3 columns: column 1 is constant (2.5), and so is column 2,
  // where -0.0 equals 0.0 as the fits compare values.
  const std::string x = Floats({1, 2.5f, 0.0f, 7, 2.5f, 0.0f, 3, 2.5f, 0.0f, 9, 2.5f, -0.0f});
  const std::string y = Labels({5, 9, 5, 5});
  for (size_t cut = 0; cut <= x.size(); cut += 3) {
    for (size_t ycut = 0; ycut <= y.size(); ycut += 5) {
      UploadValidator v;
      ASSERT_TRUE(v.Begin(4, 3, true, 1 << 20).ok());
      ASSERT_TRUE(v.Data(std::string_view(x).substr(0, cut)).ok());
      ASSERT_TRUE(v.Data(std::string_view(x).substr(cut)).ok());
      ASSERT_TRUE(v.Labels(std::string_view(y).substr(0, ycut)).ok());
      ASSERT_TRUE(v.Labels(std::string_view(y).substr(ycut)).ok());
      ASSERT_TRUE(v.Finish().ok());
      const v1::DatasetStats s = v.stats().ToProto();
      SCOPED_TRACE(testing::Message() << "cut " << cut << ", label cut " << ycut);
      EXPECT_TRUE(s.computed());
      EXPECT_EQ(s.num_constant_columns(), 2);
      ASSERT_EQ(s.constant_columns_size(), 2);
      EXPECT_EQ(s.constant_columns(0), 1);
      EXPECT_EQ(s.constant_values(0), 2.5f);
      EXPECT_EQ(s.constant_columns(1), 2);
      EXPECT_EQ(s.constant_values(1), 0.0f);
      EXPECT_EQ(s.num_classes(), 2);
      EXPECT_EQ(s.smallest_class_label(), 9);
      EXPECT_EQ(s.smallest_class_rows(), 1);
    }
  }
}

TEST(UploadValidator, ATinyDifferenceInTheLastRowMakesAColumnVary) {
  const std::string x = Floats({1, 2.5f, 0.0f, 7, 2.5f, 0.0f, 3, 2.5f, 1e-30f});
  UploadValidator v;
  ASSERT_TRUE(v.Begin(3, 3, false, 1 << 20).ok());
  ASSERT_TRUE(v.Data(x).ok());
  ASSERT_TRUE(v.Finish().ok());
  const v1::DatasetStats s = v.stats().ToProto();
  ASSERT_EQ(s.num_constant_columns(), 1);
  EXPECT_EQ(s.constant_columns(0), 1);
}

TEST(UploadValidator, OneRowHasNoConstantColumnsAndUnlabelledNoClasses) {
  UploadValidator v;
  ASSERT_TRUE(v.Begin(1, 2, false, 1 << 20).ok());
  ASSERT_TRUE(v.Data(Floats({1, 1})).ok());
  ASSERT_TRUE(v.Finish().ok());
  const v1::DatasetStats s = v.stats().ToProto();
  EXPECT_EQ(s.num_constant_columns(), 0);
  EXPECT_EQ(s.num_classes(), 0);
}

TEST(UploadValidator, EmptyAndTinyChunksAtOddAddresses) {
  // A chunk too short to hold a whole float, at a misaligned address, once
  // made the validator copy zero bytes into a null buffer (found by
  // upload_fuzz; corpus input regress_empty_misaligned_chunk).
  const std::string x = " " + Floats({1, 2});
  UploadValidator v;
  ASSERT_TRUE(v.Begin(1, 2, false, 1 << 20).ok());
  for (size_t i = 1; i < x.size(); ++i) {
    ASSERT_TRUE(v.Data(std::string_view(x).substr(i, 1)).ok()) << i;
    ASSERT_TRUE(v.Data(std::string_view(x).substr(i + 1, 0)).ok()) << i;
  }
  EXPECT_TRUE(v.Finish().ok());
}

TEST(UploadValidator, ANonFiniteFloatIsNamedByRowAndColumnEvenAcrossChunks) {
  const std::string x = Floats({1, 2, 3, std::numeric_limits<float>::quiet_NaN(), 5, 6});
  UploadValidator v;
  ASSERT_TRUE(v.Begin(3, 2, false, 1 << 20).ok());
  ASSERT_TRUE(v.Data(std::string_view(x).substr(0, 13)).ok());
  const absl::Status s = v.Data(std::string_view(x).substr(13));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "row 1, column 1 is NaN; all values must be finite");
  UploadValidator w;
  ASSERT_TRUE(w.Begin(1, 3, false, 1 << 20).ok());
  EXPECT_EQ(w.Data(Floats({0, -std::numeric_limits<float>::infinity(), 0})).message(),
            "row 0, column 1 is -inf; all values must be finite");
}

TEST(UploadValidator, OrderAndSizesAreEnforced) {
  UploadValidator v;
  EXPECT_EQ(v.Data("abcd").message(), "upload: the first message must be a header");
  EXPECT_EQ(v.Finish().message(), "upload: empty stream (no header)");
  EXPECT_FALSE(v.Begin(0, 3, false, 1 << 20).ok());
  EXPECT_FALSE(v.Begin(int64_t{1} << 30, int64_t{1} << 20, false, int64_t{1} << 62).ok());
  EXPECT_NE(v.Begin(1000, 1000, true, 1000).message().find("over this server's limit"),
            std::string::npos);
  ASSERT_TRUE(v.Begin(2, 1, true, 1 << 20).ok());
  EXPECT_EQ(v.total_bytes(), 2 * 4 + 2 * 8);
  EXPECT_FALSE(v.Begin(2, 1, true, 1 << 20).ok());  // a second header
  EXPECT_NE(v.Labels(std::string(8, '\0')).message().find("labels sent after only 0 of 8"),
            std::string::npos);
  EXPECT_FALSE(v.Data(Floats({1, 2, 3})).ok());  // more than announced
  ASSERT_TRUE(v.Data(Floats({1, 2})).ok());
  EXPECT_NE(v.Finish().message().find("expected 2 int64 labels"), std::string::npos);
  ASSERT_TRUE(v.Labels(std::string(16, '\1')).ok());
  EXPECT_FALSE(v.Labels(std::string(1, '\1')).ok());
  EXPECT_EQ(v.Data(Floats({1})).message(), "upload: data chunk after labels started");
  EXPECT_TRUE(v.Finish().ok());
}

}  // namespace
}  // namespace dendro::server
