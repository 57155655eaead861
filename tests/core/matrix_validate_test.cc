#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/matrix/matrix.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dendro {
namespace {

using ::testing::HasSubstr;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

// A rows x cols matrix of finite, varied values.
std::vector<float> Finite(int64_t rows, int64_t cols) {
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 1000) * 0.25f - 100.0f;
  return v;
}

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

TEST(ValidateFinite, AcceptsFiniteExtremes) {
  const std::vector<float> v = {std::numeric_limits<float>::max(),
                                std::numeric_limits<float>::lowest(),
                                std::numeric_limits<float>::min(),
                                std::numeric_limits<float>::denorm_min(),
                                -0.0f,
                                0.0f};
  EXPECT_TRUE(ValidateFinite(v.data(), 2, 3).ok());
  EXPECT_TRUE(ValidateFinite(MatrixView(v.data(), 3, 2)).ok());
  EXPECT_TRUE(ValidateFinite(nullptr, 0, 0).ok());
  EXPECT_TRUE(ValidateFinite(nullptr, 0, 5).ok());
  EXPECT_TRUE(ValidateFinite(nullptr, 5, 0).ok());
}

TEST(ValidateFinite, ReportsFirstBadEntryInRowMajorOrder) {
  std::vector<float> v = Finite(4, 3);
  v[3 * 3 + 0] = kInf;   // row 3, column 0
  v[2 * 3 + 2] = -kInf;  // row 2, column 2
  v[2 * 3 + 1] = kNaN;   // row 2, column 1: first in row-major order
  const absl::Status s = ValidateFinite(v.data(), 4, 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(s), HasSubstr("row 2, column 1 is NaN"));
  EXPECT_THAT(Msg(s), HasSubstr("finite"));
  // The same data seen as 3 x 4: flat index 7 is row 1, column 3.
  EXPECT_THAT(Msg(ValidateFinite(MatrixView(v.data(), 3, 4))),
              HasSubstr("row 1, column 3 is NaN"));
}

TEST(ValidateFinite, NamesTheKindOfValue) {
  struct Case {
    float value;
    const char* text;
  };
  for (const Case& c : {Case{kNaN, "is NaN"}, Case{-kNaN, "is NaN"},
                        Case{std::numeric_limits<float>::signaling_NaN(), "is NaN"},
                        Case{FromBits(0x7f800001u), "is NaN"},   // smallest-payload NaN
                        Case{FromBits(0xffffffffu), "is NaN"},   // negative NaN
                        Case{kInf, "is +inf"}, Case{-kInf, "is -inf"}}) {
    SCOPED_TRACE(c.text);
    std::vector<float> v = Finite(2, 5);
    v[7] = c.value;
    const absl::Status s = ValidateFinite(v.data(), 2, 5);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Msg(s), HasSubstr(std::string("row 1, column 2 ") + c.text));
  }
}

TEST(ValidateFinite, RowOffsetIsAddedToReportedRows) {
  std::vector<float> v = Finite(10, 4);
  v[6 * 4 + 3] = -kInf;
  EXPECT_THAT(Msg(ValidateFinite(v.data(), 10, 4, /*row_offset=*/1000)),
              HasSubstr("row 1006, column 3 is -inf"));
  EXPECT_THAT(Msg(ValidateFinite(MatrixView(v.data(), 10, 4), 5)),
              HasSubstr("row 11, column 3 is -inf"));
  // The offset does not change which part of the data is checked.
  EXPECT_TRUE(ValidateFinite(v.data(), 6, 4, 1000).ok());
}

TEST(ValidateFinite, LargeMatrixWithOneBadValueAtTheEnd) {
  const int64_t rows = 200003, cols = 7;  // many 64 Ki-element blocks, ragged end
  std::vector<float> v = Finite(rows, cols);
  EXPECT_TRUE(ValidateFinite(v.data(), rows, cols).ok());
  v.back() = kNaN;
  EXPECT_THAT(Msg(ValidateFinite(v.data(), rows, cols)),
              HasSubstr("row 200002, column 6 is NaN"));
  EXPECT_THAT(Msg(ValidateFinite(MatrixView(v.data(), rows, cols), 17)),
              HasSubstr("row 200019, column 6 is NaN"));
}

TEST(ValidateFinite, BadValuesAroundBlockBoundaries) {
  const int64_t rows = 70000, cols = 3;
  for (int64_t index : {int64_t{65535}, int64_t{65536}, int64_t{131071}, int64_t{131072}}) {
    SCOPED_TRACE(index);
    std::vector<float> v = Finite(rows, cols);
    v[static_cast<size_t>(index)] = kInf;
    v[static_cast<size_t>(index) + 5] = kNaN;  // later, must not be reported
    const std::string want = "row " + std::to_string(index / cols) + ", column " +
                             std::to_string(index % cols) + " is +inf";
    EXPECT_THAT(Msg(ValidateFinite(v.data(), rows, cols)), HasSubstr(want));
  }
}

}  // namespace
}  // namespace dendro
