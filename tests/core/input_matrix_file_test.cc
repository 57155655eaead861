// The input reader against files numpy wrote (tests/golden/input, made by
// gen_input_files.py there): every dtype, byte order and memory order gives
// the same values; refusals name the file and what to do.
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/input/matrix_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/source_path.h"
#include "tests/temp_dir.h"

namespace dendro {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Golden(const std::string& name) { return SourcePath("tests/golden/input/") + name; }

float Expected(const std::string& tag, int64_t r, int64_t c) {
  const int64_t v = r * 4 + c;
  if (tag.find("b1") != std::string::npos) return static_cast<float>(v % 2);
  if (tag.find("_i") != std::string::npos || tag.rfind("i1", 0) == 0) {
    return static_cast<float>(v - 5);
  }
  return static_cast<float>(v);
}

std::vector<float> ReadAll(MatrixFile& m) {
  std::vector<float> out(static_cast<size_t>(m.rows() * m.cols()), -99.0f);
  EXPECT_TRUE(m.ReadRows(0, m.rows(), out.data()).ok());
  return out;
}

class EveryDtype : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryDtype, CAndFortranOrderGiveTheSameValues) {
  for (const char* order : {"C", "F"}) {
    const std::string path = Golden(absl::StrCat("m_", GetParam(), "_", order, ".npy"));
    absl::StatusOr<std::unique_ptr<MatrixFile>> m = MatrixFile::Open(path);
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_EQ((*m)->rows(), 3);
    ASSERT_EQ((*m)->cols(), 4);
    std::vector<float> all = ReadAll(**m);
    for (int64_t r = 0; r < 3; ++r) {
      for (int64_t c = 0; c < 4; ++c) {
        EXPECT_EQ(all[r * 4 + c], Expected(GetParam(), r, c)) << path << " " << r << "," << c;
      }
    }
    // A block in the middle converts on its own.
    std::vector<float> block(4, -99.0f);
    ASSERT_TRUE((*m)->ReadRows(1, 2, block.data()).ok());
    for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(block[c], Expected(GetParam(), 1, c));
    // Only little-endian float32 in C order is handed out without a copy.
    const bool direct = GetParam() == "le_f4" && std::string(order) == "C";
    EXPECT_EQ((*m)->Float32Rows(0, 3) != nullptr, direct) << path;
    if (order == std::string("F")) {
      EXPECT_THAT((*m)->description(), HasSubstr("Fortran order"));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Npy, EveryDtype,
                         ::testing::Values("le_f2", "le_f4", "le_f8", "be_f4", "be_f8", "i1",
                                           "le_i2", "le_i4", "le_i8", "be_i8", "u1", "le_u2",
                                           "le_u4", "le_u8", "b1"));

TEST(MatrixFileTest, NpzTakesItsOnlyArrayOrTheKeyNamed) {
  auto one = MatrixFile::Open(Golden("one.npz"));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_THAT((*one)->description(), HasSubstr("member 'x'"));
  EXPECT_EQ(ReadAll(**one)[11], 11.0f);

  auto ambiguous = MatrixFile::Open(Golden("two.npz"));
  ASSERT_FALSE(ambiguous.ok());
  EXPECT_THAT(ambiguous.status().message(), HasSubstr("first, second"));
  EXPECT_THAT(ambiguous.status().message(), HasSubstr("--key"));

  auto second = MatrixFile::Open(Golden("two.npz"), {.npz_key = "second"});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(ReadAll(**second)[5], 10.0f);

  auto missing = MatrixFile::Open(Golden("two.npz"), {.npz_key = "third"});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("no array 'third'"));

  // savez_compressed, Fortran-order float64 inside.
  auto packed = MatrixFile::Open(Golden("compressed.npz"));
  ASSERT_TRUE(packed.ok()) << packed.status();
  std::vector<float> v = ReadAll(**packed);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(v[i], static_cast<float>(i));
}

TEST(MatrixFileTest, TextTablesWithAndWithoutHeader) {
  for (const char* name : {"m.csv", "m.tsv", "m.txt"}) {
    auto m = MatrixFile::Open(Golden(name));
    ASSERT_TRUE(m.ok()) << name << ": " << m.status();
    EXPECT_EQ((*m)->rows(), 3) << name;
    EXPECT_EQ((*m)->cols(), 4) << name;
    std::vector<float> v = ReadAll(**m);
    for (int i = 0; i < 12; ++i) EXPECT_EQ(v[i], static_cast<float>(i)) << name;
  }
  auto csv = MatrixFile::Open(Golden("m.csv"));
  EXPECT_THAT((*csv)->column_names(), ElementsAre("a", "b", "c", "d"));
}

std::string Write(const ScopedTempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.path() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(MatrixFileTest, TextRefusalsNameTheLineAndColumn) {
  ScopedTempDir dir;
  auto ragged = MatrixFile::Open(Write(dir, "r.csv", "1,2,3\n4,5\n"));
  ASSERT_FALSE(ragged.ok());
  EXPECT_THAT(ragged.status().message(), HasSubstr("line 2 has 2 fields"));
  auto word = MatrixFile::Open(Write(dir, "w.csv", "a,b\n1,2\n3,x\n"));
  ASSERT_FALSE(word.ok());
  EXPECT_THAT(word.status().message(), HasSubstr("line 3, column 1: 'x' is not a number"));
  auto hole = MatrixFile::Open(Write(dir, "h.csv", "1,2\n3,\n"));
  ASSERT_FALSE(hole.ok());
  EXPECT_THAT(hole.status().message(), HasSubstr("line 2, column 1 is empty"));
  auto header_only = MatrixFile::Open(Write(dir, "o.csv", "a,b\n"));
  ASSERT_FALSE(header_only.ok());
  EXPECT_THAT(header_only.status().message(), HasSubstr("no rows"));
}

TEST(MatrixFileTest, RefusalsSayWhatToDo) {
  struct Case {
    std::string file;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {"three_d.npy", "1-D or 2-D"},
           {"complex.npy", "complex64"},
           {"strings_matrix.npy", "only labels may be strings"},
           {"y_unicode.npy", "not numbers"},
           {"y_float.npy", "x.reshape(-1, 1)"},
       }) {
    auto m = MatrixFile::Open(Golden(c.file));
    ASSERT_FALSE(m.ok()) << c.file;
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << c.file;
    EXPECT_THAT(m.status().message(), HasSubstr(c.says)) << c.file;
    EXPECT_THAT(m.status().message(), HasSubstr(c.file)) << "names the file";
  }
  ScopedTempDir dir;
  auto unknown = MatrixFile::Open(Write(dir, "x.parquet", "PAR1...."));
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr(".npy, .npz, .csv, .tsv and .txt"));
  auto fake = MatrixFile::Open(Write(dir, "x.npy", "1,2\n"));
  ASSERT_FALSE(fake.ok());
  EXPECT_THAT(fake.status().message(), HasSubstr("numpy.save"));
  auto missing = MatrixFile::Open(dir.path() + "/absent.npy");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST(LabelFileTest, StringsMapToSortedIdsAndKeepTheirNames) {
  for (const char* name : {"y_unicode.npy", "y_bytes.npy", "y_names.txt"}) {
    auto y = ReadLabelFile(Golden(name));
    ASSERT_TRUE(y.ok()) << name << ": " << y.status();
    EXPECT_THAT(y->ids, ElementsAre(1, 0, 2, 0, 1)) << name;
    EXPECT_THAT(y->names, ElementsAre("cat", "dog", "emu")) << name;
  }
}

TEST(LabelFileTest, NumbersInAnySpelling) {
  for (const char* name : {"y_float.npy", "y_uint8_column.npy", "y.npz", "y_header.csv"}) {
    auto y = ReadLabelFile(Golden(name));
    ASSERT_TRUE(y.ok()) << name << ": " << y.status();
    EXPECT_THAT(y->ids, ElementsAre(1, 0, 2, 0, 1)) << name;
    EXPECT_TRUE(y->names.empty()) << name;
  }
  auto half = ReadLabelFile(Golden("y_half_float.npy"));
  ASSERT_FALSE(half.ok());
  EXPECT_THAT(half.status().message(), HasSubstr("label 1.5 at row 0 is not a whole number"));
  auto wide = ReadLabelFile(Golden("y_two_columns.npy"));
  ASSERT_FALSE(wide.ok());
  EXPECT_THAT(wide.status().message(), HasSubstr("one column"));
}

TEST(LabelFileTest, EmptyStringIsRefused) {
  auto y = LabelsFromStrings({"a", "", "b"}, "labels");
  ASSERT_FALSE(y.ok());
  EXPECT_THAT(y.status().message(), HasSubstr("row 1 is empty"));
}

}  // namespace
}  // namespace dendro
