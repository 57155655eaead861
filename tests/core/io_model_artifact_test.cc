#include "core/io/model_artifact.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "core/io/atomic_file.h"
#include "core/io/npy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dendro {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr ArtifactFormat kFormat{"toy_model.json", "dendro.toy_model", 2, "toy",
                                 absl::StatusCode::kDataLoss};

struct Options {
  int32_t rank = 0;
  uint64_t seed = 0;
};

// One field of every kind.
struct ToyManifest final : ArtifactManifest {
  int64_t rows = 0;
  int32_t small = 0;
  double scale = 0;
  bool flag = false;
  std::string name;
  std::vector<double> dof;
  std::vector<int32_t> ids;
  Options options;
  int64_t extra = 42;  // optional
  void Fields(ManifestFields& f) override {
    f.Int("rows", &rows, /*min=*/1);
    f.Int("small", &small);
    f.Number("scale", &scale);
    f.Bool("flag", &flag);
    f.String("name", &name);
    f.Numbers("dof", &dof, std::numeric_limits<double>::infinity());
    f.Ints("ids", &ids);
    f.Object("options", [&](ManifestFields& o) {
      o.Int("rank", &options.rank);
      o.Uint("seed", &options.seed);
    });
    f.Optional().Int("extra", &extra);
  }
};

class ModelArtifactTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::string(::testing::TempDir()) + "/model_artifact_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
           std::to_string(::testing::UnitTest::GetInstance()->random_seed());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    m_.rows = 3;
    m_.small = -7;
    m_.scale = 0.25;
    m_.flag = true;
    m_.name = "toy";
    m_.dof = {4.5, std::numeric_limits<double>::infinity()};
    m_.ids = {5, -1};
    m_.options.rank = 2;
    m_.options.seed = uint64_t{1} << 63;
    m_.extra = 9;
    ModelArtifactWriter w(dir_, kFormat);
    w.Add("values.npy", absl::MakeConstSpan(values_), {3, 2});
    w.Add("labels.npy", absl::MakeConstSpan(labels_), {3});
    w.AddPieces("bases.npy", {absl::MakeConstSpan(bases_).subspan(0, 2),
                              absl::MakeConstSpan(bases_).subspan(2)}, {2, 2});
    ASSERT_TRUE(w.Write(m_).ok());
    std::string text;
    ASSERT_TRUE(ReadFileToString(dir_ + "/toy_model.json", &text).ok());
    manifest_ = Json::parse(text);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The manifest as written.
  const Json& Manifest() const { return manifest_; }
  void SetManifest(const Json& j) {
    ASSERT_TRUE(WriteFileAtomic(dir_ + "/toy_model.json", j.dump()).ok());
  }
  absl::Status Open() {
    ToyManifest m;
    return ModelArtifactReader::Open(dir_, kFormat, &m).status();
  }
  // Opens with `field` (a JSON pointer) set to `value`.
  absl::Status OpenWith(const std::string& field, const Json& value) {
    Json j = Manifest();
    j[Json::json_pointer(field)] = value;
    SetManifest(j);
    return Open();
  }

  std::string dir_;
  ToyManifest m_;
  Json manifest_;
  const std::vector<double> values_ = {1, 2, 3, 4, 5, 6};
  const std::vector<int32_t> labels_ = {7, 8, 9};
  const std::vector<float> bases_ = {0.5f, 1.5f, 2.5f, 3.5f};
};

TEST_F(ModelArtifactTest, RoundTrip) {
  ToyManifest m;
  auto r = ModelArtifactReader::Open(dir_, kFormat, &m);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(m.rows, 3);
  EXPECT_EQ(m.small, -7);
  EXPECT_EQ(m.scale, 0.25);
  EXPECT_TRUE(m.flag);
  EXPECT_EQ(m.name, "toy");
  EXPECT_EQ(m.dof, m_.dof);
  EXPECT_EQ(m.ids, m_.ids);
  EXPECT_EQ(m.options.rank, 2);
  EXPECT_EQ(m.options.seed, uint64_t{1} << 63);
  EXPECT_EQ(m.extra, 9);
  auto values = r->Float64("values.npy", {3, 2});
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, values_);
  auto labels = r->Int64("labels.npy", {ModelArtifactReader::kAnyLength});
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_EQ(*labels, (std::vector<int64_t>{7, 8, 9}));
  auto bases = r->Float32("bases.npy", {2, 2});
  ASSERT_TRUE(bases.ok()) << bases.status();
  EXPECT_EQ(*bases, bases_);
  auto mapped = r->MapFloat32("bases.npy", {2, 2});
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_EQ((*mapped)->AsFloat32()->at(3), 3.5f);
  EXPECT_TRUE(r->Has("values.npy"));
  EXPECT_FALSE(r->Has("nope.npy"));

  // The files are what numpy and the manifest's readers expect.
  auto npy = ReadNpyInt(dir_ + "/labels.npy");
  ASSERT_TRUE(npy.ok());
  EXPECT_EQ(npy->shape, (std::vector<int64_t>{3}));
  auto header = MappedNpy::Open(dir_ + "/labels.npy");
  ASSERT_TRUE(header.ok());
  EXPECT_EQ((*header)->header().dtype, DType::kInt32);
  const Json j = Manifest();
  EXPECT_EQ(j["format"], "dendro.toy_model");
  EXPECT_EQ(j["version"], 2);
  EXPECT_TRUE(j["dof"][1].is_null());
  EXPECT_TRUE(j["options"]["seed"].is_number_unsigned());
}

TEST_F(ModelArtifactTest, OptionalFieldKeepsItsDefault) {
  Json j = Manifest();
  j.erase("extra");
  SetManifest(j);
  ToyManifest m;
  ASSERT_TRUE(ModelArtifactReader::Open(dir_, kFormat, &m).ok());
  EXPECT_EQ(m.extra, 42);
  // Present, it must have the right type.
  EXPECT_THAT(OpenWith("/extra", "nine").message(), HasSubstr("field 'extra'"));
}

TEST_F(ModelArtifactTest, MissingManifest) {
  std::filesystem::remove(dir_ + "/toy_model.json");
  EXPECT_EQ(Open().code(), absl::StatusCode::kNotFound);
}

TEST_F(ModelArtifactTest, NotJson) {
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/toy_model.json", "{\"rows\": ").ok());
  EXPECT_EQ(Open().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Open().message(), HasSubstr("toy_model.json: not a JSON object"));
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/toy_model.json", "[1, 2]").ok());
  EXPECT_THAT(Open().message(), HasSubstr("not a JSON object"));
}

TEST_F(ModelArtifactTest, WrongFormat) {
  for (const Json& v : {Json("dendro.other"), Json(7), Json(nullptr)}) {
    const absl::Status st = OpenWith("/format", v);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(st.message(), HasSubstr("not a toy model"));
  }
  Json j = Manifest();
  j.erase("format");
  SetManifest(j);
  EXPECT_THAT(Open().message(), HasSubstr("not a toy model"));
}

TEST_F(ModelArtifactTest, WrongVersion) {
  absl::Status st = OpenWith("/version", 3);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(st.message(), HasSubstr("unsupported toy model version 3"));
  EXPECT_THAT(OpenWith("/version", 2.0).message(), HasSubstr("field 'version'"));
  EXPECT_THAT(OpenWith("/version", "2").message(), HasSubstr("field 'version'"));
  Json j = Manifest();
  j.erase("version");
  SetManifest(j);
  EXPECT_THAT(Open().message(), HasSubstr("field 'version' is missing"));
}

TEST_F(ModelArtifactTest, MissingField) {
  for (const char* field : {"rows", "small", "scale", "flag", "name", "dof", "ids", "options"}) {
    SCOPED_TRACE(field);
    Json j = Manifest();
    j.erase(field);
    SetManifest(j);
    const absl::Status st = Open();
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(st.message(), HasSubstr(std::string("field '") + field + "' is missing"));
  }
  Json j = Manifest();
  j["options"].erase("seed");
  SetManifest(j);
  EXPECT_THAT(Open().message(), HasSubstr("field 'options.seed' is missing"));
}

TEST_F(ModelArtifactTest, MistypedField) {
  // Integers stay integers: no 3.0, 3.5, 1e300, string or bool.
  for (const Json& v : {Json(3.0), Json(3.5), Json(1e300), Json("3"), Json(true)}) {
    SCOPED_TRACE(v.dump());
    const absl::Status st = OpenWith("/rows", v);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(st.message(), HasSubstr("field 'rows'"));
  }
  EXPECT_THAT(OpenWith("/rows", 0).message(), HasSubstr("field 'rows'"));  // below min
  EXPECT_THAT(OpenWith("/small", int64_t{1} << 31).message(), HasSubstr("field 'small'"));
  EXPECT_THAT(OpenWith("/options/seed", -1).message(), HasSubstr("field 'options.seed'"));
  EXPECT_THAT(OpenWith("/options/rank", 1.5).message(), HasSubstr("field 'options.rank'"));
  EXPECT_THAT(OpenWith("/options", 5).message(), HasSubstr("field 'options'"));
  EXPECT_THAT(OpenWith("/scale", "x").message(), HasSubstr("field 'scale'"));
  EXPECT_THAT(OpenWith("/flag", 1).message(), HasSubstr("field 'flag'"));
  EXPECT_THAT(OpenWith("/name", 1).message(), HasSubstr("field 'name'"));
  EXPECT_THAT(OpenWith("/dof/0", "x").message(), HasSubstr("field 'dof[0]'"));
  EXPECT_THAT(OpenWith("/ids/1", nullptr).message(), HasSubstr("field 'ids[1]'"));
  EXPECT_THAT(OpenWith("/ids/0", int64_t{1} << 40).message(), HasSubstr("field 'ids[0]'"));
}

TEST_F(ModelArtifactTest, MissingArray) {
  ToyManifest m;
  auto r = ModelArtifactReader::Open(dir_, kFormat, &m);
  ASSERT_TRUE(r.ok());
  std::filesystem::remove(dir_ + "/values.npy");
  const absl::Status st = r->Float64("values.npy", {3, 2}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(st.message(), HasSubstr("values.npy"));
}

TEST_F(ModelArtifactTest, WrongShape) {
  ToyManifest m;
  auto r = ModelArtifactReader::Open(dir_, kFormat, &m);
  ASSERT_TRUE(r.ok());
  for (const std::vector<int64_t>& want :
       {std::vector<int64_t>{2, 3}, {6}, {3, 2, 1}, {ModelArtifactReader::kAnyLength}}) {
    const absl::Status st = r->Float64("values.npy", want).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(st.message(), HasSubstr("values.npy: expected shape"));
    EXPECT_THAT(st.message(), HasSubstr("found 3 x 2"));
  }
  EXPECT_TRUE(r->Float64("values.npy", {ModelArtifactReader::kAnyLength, 2}).ok());
}

TEST_F(ModelArtifactTest, WrongDtype) {
  ToyManifest m;
  auto r = ModelArtifactReader::Open(dir_, kFormat, &m);
  ASSERT_TRUE(r.ok());
  absl::Status st = r->Float64("labels.npy", {3}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(st.message(),
              HasSubstr("labels.npy: expected a float32 or float64 array, got int32"));
  st = r->Int64("values.npy", {3, 2}).status();
  EXPECT_THAT(st.message(), HasSubstr("values.npy: expected an int32 or int64 array, got float64"));
  st = r->MapFloat32("values.npy", {3, 2}).status();
  EXPECT_THAT(st.message(), HasSubstr("expected a float32 array, got float64"));
  // float32 widens to float64, float64 narrows to float32 within range.
  EXPECT_TRUE(r->Float64("bases.npy", {2, 2}).ok());
  EXPECT_TRUE(r->Float32("values.npy", {3, 2}).ok());
  const std::vector<double> huge = {1e300};
  const int64_t one[1] = {1};
  ASSERT_TRUE(WriteNpy(dir_ + "/huge.npy", absl::MakeConstSpan(huge), one).ok());
  EXPECT_THAT(r->Float32("huge.npy", {1}).status().message(),
              HasSubstr("outside the float32 range"));
}

TEST_F(ModelArtifactTest, TruncatedOrDamagedArray) {
  ToyManifest m;
  auto r = ModelArtifactReader::Open(dir_, kFormat, &m);
  ASSERT_TRUE(r.ok());
  std::string bytes;
  ASSERT_TRUE(ReadFileToString(dir_ + "/values.npy", &bytes).ok());
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/values.npy", bytes.substr(0, bytes.size() - 3)).ok());
  absl::Status st = r->Float64("values.npy", {3, 2}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(st.message(), HasSubstr("values.npy: truncated"));
  // A header claiming a vast array is refused before anything is allocated.
  const int64_t vast[2] = {int64_t{1} << 28, int64_t{1} << 28};
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/values.npy",
                              MakeNpyHeader(DType::kFloat64, vast) + std::string(48, '\0'))
                  .ok());
  st = r->Float64("values.npy", {3, 2}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/values.npy", "not an array").ok());
  st = r->Float64("values.npy", {3, 2}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(st.message(), HasSubstr("values.npy"));
}

TEST_F(ModelArtifactTest, WriterRefusesAShapeThatDoesNotMatchItsData) {
  const std::string dir = dir_ + "/bad";
  std::filesystem::create_directories(dir);
  ModelArtifactWriter w(dir, kFormat);
  w.Add("values.npy", absl::MakeConstSpan(values_), {4, 2});
  ToyManifest m = m_;
  const absl::Status st = w.Write(m);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("values.npy"));
  // Nothing was written, the manifest least of all.
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

TEST_F(ModelArtifactTest, ManifestIsWrittenLast) {
  // An array that cannot be written (its name is a directory) stops the
  // writer before the manifest.
  const std::string dir = dir_ + "/partial";
  std::filesystem::create_directories(dir + "/values.npy");
  ModelArtifactWriter w(dir, kFormat);
  w.Add("values.npy", absl::MakeConstSpan(values_), {3, 2});
  ToyManifest m = m_;
  EXPECT_FALSE(w.Write(m).ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/toy_model.json"));
}

TEST_F(ModelArtifactTest, LoaderErrorsCarryTheCode) {
  ToyManifest m;
  auto r = ModelArtifactReader::Open(dir_, kFormat, &m);
  ASSERT_TRUE(r.ok());
  const absl::Status a = r->Error("values.npy", "row 2 is odd");
  EXPECT_EQ(a.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(a.message(), dir_ + "/values.npy: row 2 is odd");
  EXPECT_EQ(r->Error("", "inconsistent").message(), dir_ + ": inconsistent");
  EXPECT_EQ(r->FieldError("rows", "must be even").message(),
            dir_ + "/toy_model.json: field 'rows' must be even");
}

}  // namespace
}  // namespace dendro
