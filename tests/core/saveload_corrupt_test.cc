// Damaged model metadata: each loader (t-NEB, HPPCA, gHHC) is given its own
// valid JSON file with one field at a time replaced by a value of another
// type, removed, or set to an out-of-range integer. Every such file must be
// refused with a Status (in the loader's error code); none may throw.
// (Links the whole core: the model I/O uses dendro_io.)
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/common/run_context.h"
#include "core/ghhc/ghhc.h"
#include "core/hppca/hppca.h"
#include "core/hppca/synthetic.h"
#include "core/io/atomic_file.h"
#include "core/io/npy.h"
#include "core/tneb/tneb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/temp_dir.h"

namespace dendro {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;
using Pointer = Json::json_pointer;
using Loader = std::function<absl::Status(const std::string& dir)>;

// Every value below the root: object members, arrays and their first and
// last elements.
void CollectPaths(const Json& v, const Pointer& at, std::vector<Pointer>* out) {
  if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) {
      const Pointer p = at / it.key();
      out->push_back(p);
      CollectPaths(it.value(), p, out);
    }
  } else if (v.is_array() && !v.empty()) {
    for (size_t i : {size_t{0}, v.size() - 1}) {
      const Pointer p = at / i;
      out->push_back(p);
      CollectPaths(v[i], p, out);
      if (v.size() == 1) break;
    }
  }
}

std::vector<std::string> Tokens(Pointer p) {
  std::vector<std::string> out;
  for (; !p.empty(); p.pop_back()) out.insert(out.begin(), p.back());
  return out;
}

// "/options/seed" -> "options.seed", "/dof/0" -> "dof[0]": how JsonFields
// names a field in its errors.
std::string FieldName(const Pointer& p) {
  std::string out;
  for (const std::string& token : Tokens(p)) {
    if (!out.empty() && !token.empty() &&
        token.find_first_not_of("0123456789") == std::string::npos) {
      out += "[" + token + "]";
    } else {
      out += (out.empty() ? "" : ".") + token;
    }
  }
  return out;
}

enum class Kind { kNull, kBool, kInt, kFloat, kString, kObject, kArray };

Kind KindOf(const Json& v) {
  if (v.is_null()) return Kind::kNull;
  if (v.is_boolean()) return Kind::kBool;
  if (v.is_number_integer()) return Kind::kInt;
  if (v.is_number_float()) return Kind::kFloat;
  if (v.is_string()) return Kind::kString;
  if (v.is_object()) return Kind::kObject;
  return Kind::kArray;
}

// Values whose type differs from `original`'s. An integer is a valid number,
// so floats are not replaced by numbers; integers are replaced by floats,
// integral ones included. Where null is a valid value (t-NEB's dof entries)
// neither null nor numbers are used.
std::vector<Json> WrongValues(const Json& original, bool null_allowed) {
  const Kind kind = null_allowed ? Kind::kNull : KindOf(original);
  std::vector<Json> out;
  for (const Json& v : {Json("oops"), Json::object({{"x", 1}}), Json::array({1, 2}), Json(nullptr),
                        Json(true), Json(1.5), Json(1e300), Json(3.0), Json(7)}) {
    const Kind k = KindOf(v);
    if (k == kind || (null_allowed && k == Kind::kNull)) continue;
    if ((kind == Kind::kFloat || kind == Kind::kNull) && (k == Kind::kInt || k == Kind::kFloat)) {
      continue;
    }
    out.push_back(v);
  }
  return out;
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  ASSERT_TRUE(f.good()) << path;
}

// Loads with `doc` as the model's JSON file; returns the status, failing
// the test if anything is thrown.
absl::Status LoadWith(const std::string& dir, const std::string& file, const Loader& load,
                      const Json& doc) {
  WriteText(dir + "/" + file, doc.dump(2));
  absl::Status status = absl::UnknownError("load threw");
  EXPECT_NO_THROW(status = load(dir)) << file << " = " << doc.dump();
  return status;
}

struct ModelCase {
  std::string dir;
  std::string file;  // the JSON file in dir
  Loader load;
  absl::StatusCode code;  // what the loader returns for damaged metadata
  // Fields that may be left out (as JSON pointers).
  std::set<std::string> optional;
  // Parents of fields that may hold null besides numbers.
  std::set<std::string> null_allowed;
  // (field, value) pairs with an integer out of the field's range.
  std::vector<std::pair<std::string, Json>> out_of_range;
};

void CheckCorruptions(const ModelCase& c) {
  std::string text;
  ASSERT_TRUE(ReadFileToString(c.dir + "/" + c.file, &text).ok());
  const Json doc = Json::parse(text);
  {
    const absl::Status st = c.load(c.dir);
    ASSERT_TRUE(st.ok()) << st;
  }
  std::vector<Pointer> paths;
  CollectPaths(doc, Pointer(), &paths);
  ASSERT_GT(paths.size(), 5u);

  int checked = 0;
  for (const Pointer& path : paths) {
    const std::string where = path.to_string();
    const bool identifies_file = where == "/format" || where == "/version";
    const bool null_allowed = c.null_allowed.count(path.parent_pointer().to_string()) > 0;
    for (const Json& bad : WrongValues(doc.at(path), null_allowed)) {
      SCOPED_TRACE(where + " = " + bad.dump());
      Json mutated = doc;
      mutated[path] = bad;
      const absl::Status st = LoadWith(c.dir, c.file, c.load, mutated);
      EXPECT_FALSE(st.ok());
      EXPECT_EQ(st.code(), c.code) << st;
      // The file's identity has messages of its own; other errors name the
      // field.
      if (!identifies_file) {
        EXPECT_THAT(std::string(st.message()), HasSubstr(FieldName(path)));
      }
      ++checked;
    }
    // Removing a member (array elements are covered by the loaders' length
    // checks, not here).
    if (!path.empty() && doc.at(path.parent_pointer()).is_object()) {
      SCOPED_TRACE(where + " removed");
      Json mutated = doc;
      mutated.at(path.parent_pointer()).erase(path.back());
      const absl::Status st = LoadWith(c.dir, c.file, c.load, mutated);
      if (c.optional.count(where) > 0) {
        EXPECT_TRUE(st.ok()) << st;
      } else {
        EXPECT_FALSE(st.ok());
        EXPECT_EQ(st.code(), c.code) << st;
      }
    }
  }
  EXPECT_GT(checked, 20);
  for (const auto& [where, value] : c.out_of_range) {
    SCOPED_TRACE(where + " = " + value.dump());
    Json mutated = doc;
    mutated[Pointer(where)] = value;
    const absl::Status st = LoadWith(c.dir, c.file, c.load, mutated);
    EXPECT_FALSE(st.ok());
    EXPECT_EQ(st.code(), c.code) << st;
  }
  // Nothing above touched the .npy files: the original loads again.
  WriteText(c.dir + "/" + c.file, text);
  const absl::Status st = c.load(c.dir);
  EXPECT_TRUE(st.ok()) << st;
}

TEST(SaveLoadCorruptTest, Tneb) {
  // Three well separated Student-t components in 2-D, standardised.
  RowMatrixD means(3, 2);
  means << 0, 0, 5, 1, -3, 4;
  std::vector<Eigen::MatrixXd> scales(3, Eigen::MatrixXd::Identity(2, 2));
  scales[1](0, 1) = scales[1](1, 0) = 0.3;
  auto mix = StudentMixture::Create({0.5, 0.25, 0.25}, means, scales, {4.5, 10.0, 30.0});
  ASSERT_TRUE(mix.ok()) << mix.status();
  FeatureTransform t;
  t.center = {1.0, -2.0};
  t.scale = {2.0, 0.5};
  const TnebModel model{*std::move(mix), t, {0, 2, 3}, 1.25};
  const ScopedTempDir tmp("saveload_corrupt_tneb_");
  const std::string& dir = tmp.path();
  ASSERT_TRUE(SaveTnebModel(model, dir).ok());
  ModelCase c;
  c.dir = dir;
  c.file = "tneb_model.json";
  c.load = [](const std::string& d) { return LoadTnebModel(d).status(); };
  c.code = absl::StatusCode::kInvalidArgument;
  c.optional = {"/standardize"};
  c.null_allowed = {"/dof"};  // null: a Gaussian component
  c.out_of_range = {{"/original_component/0", Json(uint64_t{1} << 32)},
                    {"/original_component/1", Json(-(int64_t{1} << 40))},
                    {"/dim", Json(std::numeric_limits<uint64_t>::max())},
                    {"/leaves", Json(-3)}};
  CheckCorruptions(c);
}

// Six classes in two super-classes, q = r = 2.
absl::StatusOr<HppcaModel> FitSmallHppca() {
  TwoLevelSpec spec;
  spec.groups = 2;
  spec.classes_per_group = 3;
  spec.dim = 6;
  spec.group_rank = 2;
  spec.class_rank = 2;
  const TwoLevelGenerator gen(spec);
  const LabelledData data = gen.Sample(20, 7);
  HppcaOptions o;
  o.q = 2;
  o.r = 2;
  o.superclasses = 2;
  o.num_threads = 1;
  NullRunContext ctx;
  return FitHppca(MatrixView(data.x.data(), data.x.rows(), data.x.cols()), data.labels, o, ctx);
}

TEST(SaveLoadCorruptTest, Hppca) {
  auto model = FitSmallHppca();
  ASSERT_TRUE(model.ok()) << model.status();
  const ScopedTempDir tmp("saveload_corrupt_hppca_");
  const std::string& dir = tmp.path();
  ASSERT_TRUE(model->Save(dir).ok());
  ModelCase c;
  c.dir = dir;
  c.file = "hppca.json";
  c.load = [](const std::string& d) { return HppcaModel::Load(d).status(); };
  c.code = absl::StatusCode::kDataLoss;
  c.optional = {"/stats", "/options/scoring"};  // scoring: absent before it existed
  for (const char* s : {"kmeans_iterations", "kmeans_converged", "reseeded_superclasses",
                        "dropped_superclasses", "reduced_rank_classes", "kmeans_objective",
                        "class_seconds", "cluster_seconds", "seed_seconds", "total_seconds"}) {
    c.optional.insert(std::string("/stats/") + s);
  }
  c.out_of_range = {{"/options/q", Json(uint64_t{1} << 32)},
                    {"/options/seed", Json(-1)},
                    {"/options/default_top_t", Json(std::numeric_limits<int64_t>::min())},
                    {"/stats/kmeans_iterations", Json((int64_t{1} << 32) + 1)},
                    {"/classes", Json(std::numeric_limits<uint64_t>::max())}};
  CheckCorruptions(c);
}

// Arrays whose values, not shapes, are impossible: a class rank above q and
// a super-class index out of range are damage, named by file.
TEST(SaveLoadCorruptTest, HppcaArrayValues) {
  auto model = FitSmallHppca();
  ASSERT_TRUE(model.ok()) << model.status();
  struct Damage {
    const char* file;
    std::vector<int64_t> values;
    const char* message;
  };
  const std::vector<Damage> damages = {
      {"class_rank.npy", {2, 2, 2, 3, 2, 2}, "rank 3 outside [0, q = 2]"},
      {"class_rank.npy", {2, -1, 2, 2, 2, 2}, "rank -1 outside"},
      {"superclass_of.npy", {0, 0, 0, 1, 1, 2}, "out-of-range value 2"},
  };
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.file);
    const ScopedTempDir tmp("saveload_corrupt_hppca_values_");
    const std::string& dir = tmp.path();
    ASSERT_TRUE(model->Save(dir).ok());
    ASSERT_TRUE(HppcaModel::Load(dir).ok());
    const int64_t shape[1] = {6};
    ASSERT_TRUE(WriteNpy(dir + "/" + d.file, d.values, shape).ok());
    const absl::Status s = HppcaModel::Load(dir).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr(d.file));
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr(d.message));
  }
}

TEST(SaveLoadCorruptTest, Ghhc) {
  for (bool projected : {false, true}) {
    SCOPED_TRACE(projected ? "projected" : "full ball");
    GhhcModel m;
    m.dim = 3;
    m.center = true;
    m.point_norm = 0.9;
    m.mean = {0.5, -0.5, 0.25};
    if (projected) m.projection = {1, 0, 0, 1, 0.5, 0.5};  // 3 x 2
    const int64_t bd = m.ball_dim();
    for (int64_t r = 0; r < 3; ++r) {
      for (int64_t c = 0; c < bd; ++c) m.nodes.push_back(0.1 * (r + 1) * (c % 2 ? -1 : 1));
    }
    m.node_leaf = {0, -1, 1};
    m.node_parent = {1, -1, 1};
    const ScopedTempDir tmp(projected ? "saveload_corrupt_ghhc_projected_" : "saveload_corrupt_ghhc_");
    const std::string& dir = tmp.path();
    ASSERT_TRUE(SaveGhhcModel(m, dir).ok());
    ModelCase c;
    c.dir = dir;
    c.file = "ghhc_model.json";
    c.load = [](const std::string& d) { return LoadGhhcModel(d).status(); };
    c.code = absl::StatusCode::kInvalidArgument;
    // Older models have no projection_dim; without it a projected model's
    // node file no longer matches.
    if (!projected) c.optional = {"/projection_dim"};
    c.out_of_range = {{"/internal_nodes", Json(std::numeric_limits<uint64_t>::max())},
                      {"/dim", Json(-1)},
                      {"/projection_dim", Json(-1)},
                      {"/projection_dim", Json(std::numeric_limits<int64_t>::max())}};
    CheckCorruptions(c);
  }
}

}  // namespace
}  // namespace dendro
