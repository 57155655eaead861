#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/io/atomic_file.h"
#include "core/io/npy.h"
#include "core/io/whole_read.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/source_path.h"
#include "tests/temp_dir.h"

namespace dendro {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using namespace std::string_literals;  // NOLINT: headers with embedded NULs

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

std::string Golden(const std::string& name) {
  return SourcePath("tests/golden/npy/") + name;
}

std::string ReadAll(const std::string& path) {
  std::string s;
  EXPECT_TRUE(ReadFileToString(path, &s).ok()) << path;
  return s;
}

// Builds raw .npy bytes around a hand-written header dict.
std::string RawNpy(std::string_view dict, int major = 1, int minor = 0) {
  std::string out = "\x93NUMPY";
  out.push_back(static_cast<char>(major));
  out.push_back(static_cast<char>(minor));
  const size_t len_size = major == 1 ? 2 : 4;
  for (size_t i = 0; i < len_size; ++i) {
    out.push_back(static_cast<char>((dict.size() >> (8 * i)) & 0xff));
  }
  out.append(dict);
  return out;
}

absl::StatusOr<NpyHeader> ParseDict(std::string_view dict, int major = 1) {
  return ParseNpyHeader(RawNpy(dict, major));
}

// ---------------------------------------------------------------------------
// Files written by numpy (tests/golden/npy/gen_npy_fixtures.py).

std::vector<float> F32Fixture() {  // (np.arange(12).reshape(3, 4) - 5.5) / 4
  std::vector<float> v;
  for (int i = 0; i < 12; ++i) v.push_back((static_cast<float>(i) - 5.5f) / 4);
  return v;
}

TEST(NpyGolden, Float32TwoD) {
  auto a = ReadNpyFloat32(Golden("f32_2d.npy"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(a->shape, ElementsAre(3, 4));
  EXPECT_EQ(a->data, F32Fixture());

  auto m = MappedNpy::Open(Golden("f32_2d.npy"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->header().dtype, DType::kFloat32);
  EXPECT_EQ((*m)->header().rows(), 3);
  EXPECT_EQ((*m)->header().cols(), 4);
  EXPECT_EQ((*m)->header().data_offset % 64, 0u);
  auto span = (*m)->AsFloat32();
  ASSERT_TRUE(span.ok()) << span.status();
  EXPECT_EQ(std::vector<float>(span->begin(), span->end()), F32Fixture());
}

TEST(NpyGolden, Float64OneD) {
  const std::vector<double> want = {0.1, -2.5, 1e10, 3.25, -0.0};
  auto a = ReadNpyFloat64(Golden("f64_1d.npy"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(a->shape, ElementsAre(5));
  EXPECT_EQ(a->data, want);
  EXPECT_TRUE(std::signbit(a->data[4]));

  auto f = ReadNpyFloat32(Golden("f64_1d.npy"));
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->data.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(f->data[i], static_cast<float>(want[i]));

  auto m = MappedNpy::Open(Golden("f64_1d.npy"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->header().rows(), 5);
  EXPECT_EQ((*m)->header().cols(), 1);
  EXPECT_EQ((*m)->AsFloat32().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(NpyGolden, Float32ReadAsFloat64) {
  auto a = ReadNpyFloat64(Golden("f32_2d.npy"));
  ASSERT_TRUE(a.ok()) << a.status();
  const std::vector<float> want = F32Fixture();
  EXPECT_EQ(a->data, std::vector<double>(want.begin(), want.end()));
}

TEST(NpyGolden, Integers) {
  auto i32 = ReadNpyInt(Golden("i32_1d.npy"));
  ASSERT_TRUE(i32.ok()) << i32.status();
  EXPECT_THAT(i32->shape, ElementsAre(5));
  EXPECT_THAT(i32->data, ElementsAre(7, -3, 0, 2147483647, -2147483648LL));

  auto i64 = ReadNpyInt(Golden("i64_1d.npy"));
  ASSERT_TRUE(i64.ok()) << i64.status();
  EXPECT_THAT(i64->data,
              ElementsAre((int64_t{1} << 53) + 1, -(int64_t{1} << 62), 0, 42));

  auto i64_2d = ReadNpyInt(Golden("i64_2d.npy"));
  ASSERT_TRUE(i64_2d.ok()) << i64_2d.status();
  EXPECT_THAT(i64_2d->shape, ElementsAre(2, 3));
  EXPECT_THAT(i64_2d->data, ElementsAre(0, -1000, -2000, -3000, -4000, -5000));
}

TEST(NpyGolden, FormatVersions2And3) {
  auto v2 = ReadNpyFloat32(Golden("v2_f32_2d.npy"));
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_THAT(v2->shape, ElementsAre(3, 4));
  EXPECT_EQ(v2->data, F32Fixture());

  auto v3 = ReadNpyFloat64(Golden("v3_f64_2d.npy"));
  ASSERT_TRUE(v3.ok()) << v3.status();
  EXPECT_THAT(v3->shape, ElementsAre(3, 4));
  const std::vector<float> want = F32Fixture();
  EXPECT_EQ(v3->data, std::vector<double>(want.begin(), want.end()));

  for (const char* name : {"v2_f32_2d.npy", "v3_f64_2d.npy"}) {
    const std::string bytes = ReadAll(Golden(name));
    ASSERT_GE(bytes.size(), 8u);
    EXPECT_EQ(bytes[7], 0) << name;
    EXPECT_EQ(bytes[6], name[1] - '0') << name;  // the fixture really is that version
    auto h = ParseNpyHeader(bytes);
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->data_offset % 64, 0u);
  }
}

TEST(NpyGolden, EmptyTwoD) {
  auto m = MappedNpy::Open(Golden("f32_empty_2d.npy"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->header().rows(), 0);
  EXPECT_EQ((*m)->header().cols(), 5);
  EXPECT_EQ((*m)->header().num_elements(), 0);
  auto span = (*m)->AsFloat32();
  ASSERT_TRUE(span.ok()) << span.status();
  EXPECT_TRUE(span->empty());

  auto a = ReadNpyFloat32(Golden("f32_empty_2d.npy"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(a->shape, ElementsAre(0, 5));
  EXPECT_TRUE(a->data.empty());
}

TEST(NpyGolden, Float64OutsideFloat32Range) {
  auto f = ReadNpyFloat32(Golden("f64_huge.npy"));
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(f.status()), HasSubstr("f64_huge.npy"));
  EXPECT_THAT(Msg(f.status()), HasSubstr("row 1, column 0"));
  EXPECT_THAT(Msg(f.status()), HasSubstr("outside the float32 range"));
  auto d = ReadNpyFloat64(Golden("f64_huge.npy"));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(d->data, ElementsAre(1.0, 1e300));
}

struct Rejected {
  const char* file;
  std::vector<const char*> words;
};

TEST(NpyGolden, RejectedFilesNameTheProblem) {
  const std::vector<Rejected> cases = {
      {"fortran_f32.npy", {"Fortran-order"}},
      {"bigendian_f4.npy", {"big-endian", "'>f4'"}},
      {"f16.npy", {"unsupported dtype '<f2'", "float16"}},
      {"u8.npy", {"unsupported dtype '|u1'", "uint8"}},
      {"structured.npy", {"structured dtype"}},
      {"f32_3d.npy", {"expected a 1-D or 2-D array", "3-D shape (2, 3, 2)"}},
      {"f32_scalar.npy", {"expected a 1-D or 2-D array", "0-d"}},
      {"truncated_f32.npy",
       {"truncated: header says 10 x 4 float32 (160 bytes) but only 156 data bytes present"}},
      {"trailing_f32.npy", {"corrupt", "10 x 4 float32 (160 bytes)", "164 data bytes"}},
  };
  for (const Rejected& c : cases) {
    SCOPED_TRACE(c.file);
    const std::string path = Golden(c.file);
    for (const absl::Status& s :
         {MappedNpy::Open(path).status(), ReadNpyFloat32(path).status(),
          ReadNpyFloat64(path).status(), ReadNpyInt(path).status()}) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_THAT(Msg(s), StartsWith(path + ": "));
      for (const char* w : c.words) EXPECT_THAT(Msg(s), HasSubstr(w));
    }
  }
}

TEST(NpyGolden, IntegerAndFloatAreNotMixed) {
  auto f = ReadNpyFloat32(Golden("i64_1d.npy"));
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(f.status()), HasSubstr("expected a float32 or float64 array, got int64"));
  auto d = ReadNpyFloat64(Golden("i32_1d.npy"));
  EXPECT_THAT(Msg(d.status()), HasSubstr("expected a float32 or float64 array, got int32"));
  auto i = ReadNpyInt(Golden("f32_2d.npy"));
  EXPECT_EQ(i.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(i.status()), HasSubstr("expected an int32 or int64 array, got float32"));
}

// MakeNpyHeader must produce the very bytes numpy writes.
TEST(NpyGolden, MakeNpyHeaderMatchesNumpy) {
  struct Case {
    const char* file;
    DType dtype;
    std::vector<int64_t> shape;
    bool header_only;
  };
  const std::vector<Case> cases = {
      {"f32_2d.npy", DType::kFloat32, {3, 4}, false},
      {"f64_1d.npy", DType::kFloat64, {5}, false},
      {"i32_1d.npy", DType::kInt32, {5}, false},
      {"i64_1d.npy", DType::kInt64, {4}, false},
      {"i64_2d.npy", DType::kInt64, {2, 3}, false},
      {"f32_empty_2d.npy", DType::kFloat32, {0, 5}, false},
      {"hdr_f4_123456789x7.bin", DType::kFloat32, {123456789, 7}, true},
      {"hdr_f8_0.bin", DType::kFloat64, {0}, true},
      {"hdr_i4_9223372036854775807.bin", DType::kInt32, {INT64_MAX}, true},
      {"hdr_i8_1x1.bin", DType::kInt64, {1, 1}, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    std::string want = ReadAll(Golden(c.file));
    const std::string got = MakeNpyHeader(c.dtype, c.shape);
    if (!c.header_only) {
      auto h = ParseNpyHeader(want);
      ASSERT_TRUE(h.ok()) << h.status();
      want.resize(h->data_offset);
    }
    EXPECT_EQ(got, want);
    EXPECT_EQ(got.size() % 64, 0u);
  }
}

// ---------------------------------------------------------------------------
// Header parsing details (hand-written headers).

TEST(NpyHeaderParse, AcceptsPythonLiteralVariants) {
  struct Case {
    const char* dict;
    DType dtype;
    std::vector<int64_t> shape;
  };
  const std::vector<Case> cases = {
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }\n", DType::kFloat32, {5}},
      {"{'shape': (3, 4), 'fortran_order': False, 'descr': '<f8'}", DType::kFloat64, {3, 4}},
      {"  {\n 'fortran_order' :False ,\t'shape':( 3 ,4 , ),'descr':'<i4' ,}  \n",
       DType::kInt32, {3, 4}},
      {"{\"descr\": \"<i8\", \"fortran_order\": False, \"shape\": (7,)}", DType::kInt64, {7}},
      {"{'descr': '|f4', 'fortran_order': False, 'shape': (2,)}", DType::kFloat32, {2}},
      {"{'descr': '=f8', 'fortran_order': False, 'shape': (2,)}", DType::kFloat64, {2}},
      {"{'descr': '|i4', 'fortran_order': False, 'shape': (2,)}", DType::kInt32, {2}},
      {"{'descr': '=i8', 'fortran_order': False, 'shape': (2,)}", DType::kInt64, {2}},
      {"{'descr': u'<f4', 'fortran_order': False, 'shape': (3L, 4L), }", DType::kFloat32, {3, 4}},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (0,)}", DType::kFloat32, {0}},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (+2, 0)}", DType::kFloat32, {2, 0}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.dict);
    for (int major : {1, 2, 3}) {
      auto h = ParseDict(c.dict, major);
      ASSERT_TRUE(h.ok()) << h.status();
      EXPECT_EQ(h->dtype, c.dtype);
      EXPECT_EQ(h->shape, c.shape);
      EXPECT_EQ(h->data_offset, (major == 1 ? 10 : 12) + std::string_view(c.dict).size());
    }
  }
}

TEST(NpyHeaderParse, RejectsBadHeaders) {
  struct Case {
    std::string bytes;
    std::vector<const char*> words;
  };
  const std::string ok_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }\n";
  const std::vector<Case> cases = {
      {""s, {"not a .npy file"}},
      {"PK\x03\x04 this is a zip"s, {"not a .npy file", "magic"}},
      {"\x93NUMPX\x01\x00"s, {"not a .npy file"}},
      {"\x93NUM"s, {"truncated header"}},
      {"\x93NUMPY\x01"s, {"truncated header"}},
      {"\x93NUMPY\x01\x00\x50"s, {"truncated header"}},
      {"\x93NUMPY\x02\x00\x50\x00\x00"s, {"truncated header"}},
      {RawNpy(ok_dict).substr(0, 30), {"truncated header", "only 20"}},
      {RawNpy(ok_dict, 4, 0), {"unsupported .npy format version 4.0"}},
      {RawNpy(ok_dict, 1, 1), {"unsupported .npy format version 1.1"}},
      {RawNpy(ok_dict, 0, 0), {"unsupported .npy format version 0.0"}},
      {RawNpy("{'descr': '>i8', 'fortran_order': False, 'shape': (5,)}"),
       {"big-endian", "'>i8'"}},
      {RawNpy("{'descr': '|O', 'fortran_order': False, 'shape': (5,)}"), {"object arrays"}},
      {RawNpy("{'descr': '<c8', 'fortran_order': False, 'shape': (5,)}"),
       {"unsupported dtype '<c8'", "complex64"}},
      {RawNpy("{'descr': '<U3', 'fortran_order': False, 'shape': (5,)}"),
       {"unsupported dtype '<U3'"}},
      {RawNpy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (5,)}"),
       {"structured dtype"}},
      {RawNpy("{'descr': 4, 'fortran_order': False, 'shape': (5,)}"), {"'descr'"}},
      {RawNpy("{'descr': '<f4', 'fortran_order': True, 'shape': (5,)}"), {"Fortran-order"}},
      {RawNpy("{'descr': '<f4', 'fortran_order': 0, 'shape': (5,)}"),
       {"'fortran_order' must be True or False"}},
      {RawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (3, -1)}"),
       {"negative dimension", "(3, -1)"}},
      {RawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': ()}"),
       {"expected a 1-D or 2-D array", "0-d"}},
      {RawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 3, 4)}"),
       {"expected a 1-D or 2-D array", "4-D"}},
      {RawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': [5]}"), {"'shape' must be"}},
      {RawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (5)}"), {"'shape' must be"}},
      {RawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': ('5',)}"),
       {"'shape' must be"}},
      {RawNpy("{'descr': '<f8', 'fortran_order': False, "
              "'shape': (4611686018427387904, 4)}"),
       {"too large"}},
      {RawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}"),
       {"integer out of range"}},
      {RawNpy("{'descr': '<f4', 'fortran_order': False}"), {"no 'shape' key"}},
      {RawNpy("{'descr': '<f4', 'shape': (5,)}"), {"no 'fortran_order' key"}},
      {RawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), 'x': 1}"),
       {"unexpected key 'x'"}},
      {RawNpy("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (5,)}"),
       {"duplicate key 'descr'"}},
      {RawNpy("['descr', '<f4']"), {"header is not a dict"}},
      {RawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (5,)} junk"),
       {"cannot parse header dict", "unexpected text"}},
      {RawNpy("{'descr': '<f4' 'fortran_order': False, 'shape': (5,)}"),
       {"cannot parse header dict", "expected ',' or '}'"}},
      {RawNpy("{'descr': '<f4, 'fortran_order': False, 'shape': (5,)}"),
       {"cannot parse header dict"}},
      {RawNpy("{'descr': '<f4', 'fortran_order': false, 'shape': (5,)}"),
       {"cannot parse header dict", "expected a Python literal"}},
      {RawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (5.0,)}"),
       {"cannot parse header dict", "expected an integer"}},
      {RawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (5,"),
       {"cannot parse header dict", "unexpected end of header"}},
      {RawNpy(std::string(100, '(') + std::string(100, ')')),
       {"cannot parse header dict", "nesting too deep"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::CHexEscape(c.bytes));
    auto h = ParseNpyHeader(c.bytes);
    ASSERT_FALSE(h.ok());
    EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
    for (const char* w : c.words) EXPECT_THAT(Msg(h.status()), HasSubstr(w));
  }
}

// ---------------------------------------------------------------------------
// Round trips and file-level errors.

// Exactly representable values, also computed by the numpy check below.
double Value(int64_t i) { return static_cast<double>((i * 7) % 23 - 11) / 8; }
int64_t IntValue(int64_t i) { return i * 1000000007 - (int64_t{1} << 40); }

template <typename T>
std::vector<T> FloatData(int64_t n) {
  std::vector<T> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<T>(Value(i)));
  return v;
}
template <typename T>
std::vector<T> IntData(int64_t n) {
  std::vector<T> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<T>(IntValue(i)));
  return v;
}

TEST(NpyRoundTrip, AllDTypesOneAndTwoD) {
  ScopedTempDir dir("dendro_npy_");
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{37}, std::vector<int64_t>{5, 7}, std::vector<int64_t>{0},
        std::vector<int64_t>{0, 3}, std::vector<int64_t>{4, 0}}) {
    SCOPED_TRACE(shape.size() == 1 ? absl::StrCat(shape[0])
                                   : absl::StrCat(shape[0], "x", shape[1]));
    const int64_t n = shape.size() == 1 ? shape[0] : shape[0] * shape[1];
    const auto f32 = FloatData<float>(n);
    const auto f64 = FloatData<double>(n);
    const auto i32 = IntData<int32_t>(n);
    const auto i64 = IntData<int64_t>(n);
    ASSERT_TRUE(WriteNpy(dir.Path("f32.npy"), absl::MakeConstSpan(f32), shape).ok());
    ASSERT_TRUE(WriteNpy(dir.Path("f64.npy"), absl::MakeConstSpan(f64), shape).ok());
    ASSERT_TRUE(WriteNpy(dir.Path("i32.npy"), absl::MakeConstSpan(i32), shape).ok());
    ASSERT_TRUE(WriteNpy(dir.Path("i64.npy"), absl::MakeConstSpan(i64), shape).ok());

    auto rf32 = ReadNpyFloat32(dir.Path("f32.npy"));
    ASSERT_TRUE(rf32.ok()) << rf32.status();
    EXPECT_EQ(rf32->shape, shape);
    EXPECT_EQ(rf32->data, f32);
    auto rf64 = ReadNpyFloat64(dir.Path("f64.npy"));
    ASSERT_TRUE(rf64.ok()) << rf64.status();
    EXPECT_EQ(rf64->shape, shape);
    EXPECT_EQ(rf64->data, f64);
    auto ri32 = ReadNpyInt(dir.Path("i32.npy"));
    ASSERT_TRUE(ri32.ok()) << ri32.status();
    EXPECT_EQ(ri32->shape, shape);
    EXPECT_EQ(ri32->data, std::vector<int64_t>(i32.begin(), i32.end()));
    auto ri64 = ReadNpyInt(dir.Path("i64.npy"));
    ASSERT_TRUE(ri64.ok()) << ri64.status();
    EXPECT_EQ(ri64->shape, shape);
    EXPECT_EQ(ri64->data, i64);

    struct Expect {
      const char* file;
      DType dtype;
    };
    for (const Expect& e : {Expect{"f32.npy", DType::kFloat32}, Expect{"f64.npy", DType::kFloat64},
                            Expect{"i32.npy", DType::kInt32}, Expect{"i64.npy", DType::kInt64}}) {
      auto m = MappedNpy::Open(dir.Path(e.file));
      ASSERT_TRUE(m.ok()) << m.status();
      const NpyHeader& h = (*m)->header();
      EXPECT_EQ(h.dtype, e.dtype);
      EXPECT_EQ(h.shape, shape);
      EXPECT_EQ(h.data_offset % 64, 0u);
      EXPECT_EQ(std::filesystem::file_size(dir.Path(e.file)),
                h.data_offset + static_cast<size_t>(n) * DTypeSize(e.dtype));
    }
  }
  // Only the four files: no temporary files are left behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()),
                          std::filesystem::directory_iterator()),
            4);
}

TEST(NpyRoundTrip, MappedDataIsTheFileContents) {
  ScopedTempDir dir("dendro_npy_");
  const auto f32 = FloatData<float>(3000);
  ASSERT_TRUE(WriteNpy(dir.Path("a.npy"), absl::MakeConstSpan(f32), {1000, 3}).ok());
  auto m = MappedNpy::Open(dir.Path("a.npy"));
  ASSERT_TRUE(m.ok()) << m.status();
  auto span = (*m)->AsFloat32();
  ASSERT_TRUE(span.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(span->data()) % alignof(float), 0u);
  EXPECT_EQ(std::vector<float>(span->begin(), span->end()), f32);
}

TEST(NpyRoundTrip, MisalignedDataOffsetIsCopiedAligned) {
  // A header that leaves the data at an offset that is not a multiple of 8:
  // legal, but numpy never writes it.
  ScopedTempDir dir("dendro_npy_");
  const std::string dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }\n";
  std::string bytes = RawNpy(dict);
  ASSERT_NE(bytes.size() % 8, 0u);
  const double values[3] = {1.5, -2.0, 1e-300};
  bytes.append(reinterpret_cast<const char*>(values), sizeof(values));
  ASSERT_TRUE(WriteFileAtomic(dir.Path("odd.npy"), bytes).ok());
  auto m = MappedNpy::Open(dir.Path("odd.npy"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->header().data_offset, bytes.size() - sizeof(values));
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*m)->data()) % 8, 0u);
  auto a = ReadNpyFloat64(dir.Path("odd.npy"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(a->data, ElementsAre(1.5, -2.0, 1e-300));
}

// Resident bytes of this process's mapping that starts at `addr`, from
// /proc/self/smaps; -1 if not found.
int64_t MappingRssBytes(const void* addr) {
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t want = reinterpret_cast<uintptr_t>(addr);
  std::string line;
  bool in_mapping = false;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2) {
      in_mapping = begin <= want && want < end;
      continue;
    }
    int64_t kb = 0;
    if (in_mapping && std::sscanf(line.c_str(), "Rss: %ld kB", &kb) == 1) return kb * 1024;
  }
  return -1;
}

TEST(NpyRoundTrip, DroppedPagesLeaveTheProcessAndReadBackTheSame) {
  ScopedTempDir dir("dendro_npy_");
  const int64_t rows = 4096, cols = 64;  // 1 MiB of data
  const auto f32 = FloatData<float>(rows * cols);
  ASSERT_TRUE(WriteNpy(dir.Path("a.npy"), absl::MakeConstSpan(f32), {rows, cols}).ok());
  auto m = MappedNpy::Open(dir.Path("a.npy"));
  ASSERT_TRUE(m.ok()) << m.status();
  const float* data = static_cast<const float*>((*m)->data());
  // The mapping starts a header before the data.
  const void* mapping = reinterpret_cast<const char*>(data) - (*m)->header().data_offset;
  volatile float sum = 0;
  for (int64_t i = 0; i < rows * cols; i += 256) sum = sum + data[i];  // touch every page
  const int64_t before = MappingRssBytes(mapping);
  ASSERT_GE(before, rows * cols * 4) << "cannot read this mapping's Rss from /proc/self/smaps";

  // Dropping up to a point inside the first page drops nothing; then half,
  // then the rest (a second call for the same point does nothing).
  (*m)->DropPagesBefore(data + 10);
  EXPECT_EQ(MappingRssBytes(mapping), before);
  (*m)->DropPagesBefore(data + rows * cols / 2);
  const int64_t half = MappingRssBytes(mapping);
  EXPECT_LE(half, before / 2 + 8192);
  EXPECT_GE(half, before / 2 - 8192);
  (*m)->DropPagesBefore(data + rows * cols / 4);
  EXPECT_EQ(MappingRssBytes(mapping), half);
  (*m)->DropPagesBefore(data + rows * cols);
  EXPECT_LE(MappingRssBytes(mapping), 8192);
  // Read again, every value is the file's.
  EXPECT_EQ(std::vector<float>(data, data + rows * cols), f32);
}

TEST(NpyRoundTrip, AWholeReadIsMappedByOpenAndOnDemandIsNot) {
  ScopedTempDir dir("dendro_npy_");
  const int64_t rows = 4096, cols = 64;  // 1 MiB of data
  const auto f32 = FloatData<float>(rows * cols);
  ASSERT_TRUE(WriteNpy(dir.Path("a.npy"), absl::MakeConstSpan(f32), {rows, cols}).ok());
  for (const auto pages : {MappedNpy::Pages::kOnDemand, MappedNpy::Pages::kWholeRead}) {
    auto m = MappedNpy::Open(dir.Path("a.npy"), pages);
    ASSERT_TRUE(m.ok()) << m.status();
    const float* data = static_cast<const float*>((*m)->data());
    const void* mapping = reinterpret_cast<const char*>(data) - (*m)->header().data_offset;
    // Nothing read yet but the header: the pages the mapping already has.
    const int64_t rss = MappingRssBytes(mapping);
    ASSERT_GE(rss, 0) << "cannot read this mapping's Rss from /proc/self/smaps";
    if (pages == MappedNpy::Pages::kWholeRead) {
      EXPECT_GE(rss, rows * cols * 4);
    } else {
      EXPECT_LE(rss, rows * cols);  // a quarter: the header's page and its neighbours
    }
    EXPECT_EQ(std::vector<float>(data, data + rows * cols), f32);
  }
  // A file over a quarter of physical memory is faulted in on demand.
  EXPECT_EQ(WholeReadMapFlags(std::numeric_limits<size_t>::max() / 2), 0);
  EXPECT_NE(WholeReadMapFlags(size_t{1} << 20), 0);
}

TEST(NpyWrite, RejectsBadShapesAndWritesNothing) {
  ScopedTempDir dir("dendro_npy_");
  const std::vector<float> data(12, 1.0f);
  struct Case {
    std::vector<int64_t> shape;
    const char* word;
  };
  for (const Case& c : {Case{{5}, "has 5 elements but the data has 12"},
                        Case{{3, 5}, "has 15 elements but the data has 12"},
                        Case{{2, 3, 2}, "1-D or 2-D"}, Case{{}, "1-D or 2-D"},
                        Case{{-3, -4}, "negative dimension"}}) {
    const absl::Status s = WriteNpy(dir.Path("x.npy"), absl::MakeConstSpan(data), c.shape);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(Msg(s), HasSubstr(c.word));
    EXPECT_THAT(Msg(s), HasSubstr("x.npy"));
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(NpyFileErrors, MissingEmptyDirectoryAndGarbage) {
  ScopedTempDir dir("dendro_npy_");
  const std::string missing = dir.Path("missing.npy");
  auto m = MappedNpy::Open(missing);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Msg(m.status()), HasSubstr(missing));
  EXPECT_THAT(Msg(m.status()), HasSubstr("No such file or directory"));
  EXPECT_EQ(ReadNpyFloat32(missing).status().code(), absl::StatusCode::kNotFound);

  auto d = MappedNpy::Open(dir.path());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(d.status()), HasSubstr("is a directory"));

  ASSERT_TRUE(WriteFileAtomic(dir.Path("empty.npy"), "").ok());
  auto e = MappedNpy::Open(dir.Path("empty.npy"));
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(e.status()), HasSubstr("empty file"));

  ASSERT_TRUE(WriteFileAtomic(dir.Path("text.npy"), "a,b,c\n1,2,3\n").ok());
  auto t = ReadNpyFloat32(dir.Path("text.npy"));
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(t.status()), StartsWith(dir.Path("text.npy") + ": not a .npy file"));
}

TEST(NpyFileErrors, PermissionDenied) {
  if (::geteuid() == 0) GTEST_SKIP() << "root can read files without permission";
  ScopedTempDir dir("dendro_npy_");
  const std::vector<float> data = {1, 2};
  ASSERT_TRUE(WriteNpy(dir.Path("secret.npy"), absl::MakeConstSpan(data), {2}).ok());
  ASSERT_EQ(::chmod(dir.Path("secret.npy").c_str(), 0), 0);
  auto m = MappedNpy::Open(dir.Path("secret.npy"));
  EXPECT_EQ(m.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(Msg(m.status()), HasSubstr("secret.npy"));
}

// numpy itself must load what we write.
TEST(NpyInterop, NumpyLoadsOurFiles) {
  if (::access("/usr/bin/python3", X_OK) != 0 ||
      std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "/usr/bin/python3 with numpy is not available";
  }
  ScopedTempDir dir("dendro_npy_");
  const auto f32 = FloatData<float>(35);
  const auto f64 = FloatData<double>(11);
  const auto i32 = IntData<int32_t>(12);
  const auto i64 = IntData<int64_t>(9);
  ASSERT_TRUE(WriteNpy(dir.Path("f32.npy"), absl::MakeConstSpan(f32), {5, 7}).ok());
  ASSERT_TRUE(WriteNpy(dir.Path("f64.npy"), absl::MakeConstSpan(f64), {11}).ok());
  ASSERT_TRUE(WriteNpy(dir.Path("i32.npy"), absl::MakeConstSpan(i32), {4, 3}).ok());
  ASSERT_TRUE(WriteNpy(dir.Path("i64.npy"), absl::MakeConstSpan(i64), {9}).ok());
  ASSERT_TRUE(
      WriteNpy(dir.Path("empty.npy"), absl::MakeConstSpan(std::vector<float>()), {0, 4}).ok());
  // The expected arrays are computed by numpy from the same formulas.
  const std::string script = R"PY(
import sys
import numpy as np
d = sys.argv[1]
def value(n):
    i = np.arange(n, dtype=np.int64)
    return ((i * 7) % 23 - 11) / 8.0
def ints(n):
    i = np.arange(n, dtype=np.int64)
    return i * 1000000007 - 2**40
checks = [
    ("f32.npy", value(35).astype(np.float32).reshape(5, 7)),
    ("f64.npy", value(11)),
    ("i32.npy", ints(12).astype(np.int32).reshape(4, 3)),
    ("i64.npy", ints(9)),
    ("empty.npy", np.zeros((0, 4), dtype=np.float32)),
]
for name, want in checks:
    got = np.load(d + "/" + name, allow_pickle=False)
    assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
    assert got.shape == want.shape, (name, got.shape, want.shape)
    assert got.flags.c_contiguous, name
    assert np.array_equal(got, want), (name, got, want)
print("numpy check ok")
)PY";
  ASSERT_TRUE(WriteFileAtomic(dir.Path("check.py"), script).ok());
  const std::string cmd = "/usr/bin/python3 " + dir.Path("check.py") + " " + dir.path();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

}  // namespace
}  // namespace dendro
