// JsonFields: every accessor on valid, missing, mistyped and out-of-range
// fields, error codes and messages, and that none of it throws.
#include "core/io/json_fields.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dendro {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

Json Parse(const std::string& text) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << text;
  return j;
}

const Json& Doc() {
  static const Json* doc = new Json(Parse(R"({
    "i": 42, "neg": -7, "big": 18446744073709551615, "i64max": 9223372036854775807,
    "f": 2.5, "fint": 3.0, "huge": 1e300,
    "b": true, "s": "text", "n": null,
    "o": {"x": 1, "inner": {"y": "deep"}},
    "a": [1, 2.5, -3], "ai": [1, -2, 3], "an": [1, null, 2], "ae": [],
    "ao": [1, {"x": 1}], "as": [1, "2"]
  })"));
  return *doc;
}

TEST(JsonFieldsTest, ReadsValidFields) {
  JsonFields f(Doc(), "model.json");
  EXPECT_TRUE(f.is_object());
  EXPECT_TRUE(f.Has("n"));
  EXPECT_FALSE(f.Has("nope"));
  EXPECT_EQ(*f.GetInt64("i"), 42);
  EXPECT_EQ(*f.GetInt64("neg"), -7);
  EXPECT_EQ(*f.GetInt64("i64max"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(*f.GetInt("i"), 42);
  EXPECT_EQ(*f.GetUint64("big"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(*f.GetUint64("i"), 42u);
  EXPECT_EQ(*f.GetDouble("f"), 2.5);
  EXPECT_EQ(*f.GetDouble("i"), 42.0);  // integers are numbers
  EXPECT_EQ(*f.GetDouble("big"), 18446744073709551615.0);
  EXPECT_EQ(*f.GetDouble("huge"), 1e300);
  EXPECT_TRUE(*f.GetBool("b"));
  EXPECT_EQ(*f.GetString("s"), "text");
  EXPECT_THAT(*f.GetDoubleArray("a"), ElementsAre(1.0, 2.5, -3.0));
  EXPECT_TRUE(f.GetDoubleArray("ae")->empty());
  EXPECT_THAT(*f.GetInt64Array("ai"), ElementsAre(1, -2, 3));
  const std::vector<double> with_inf =
      *f.GetDoubleArray("an", std::numeric_limits<double>::infinity());
  ASSERT_EQ(with_inf.size(), 3u);
  EXPECT_EQ(with_inf[0], 1.0);
  EXPECT_TRUE(std::isinf(with_inf[1]));
  EXPECT_EQ(with_inf[2], 2.0);
}

TEST(JsonFieldsTest, NestedObjectsNameTheirPath) {
  JsonFields f(Doc(), "model.json");
  absl::StatusOr<JsonFields> o = f.GetObject("o");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(*o->GetInt("x"), 1);
  absl::StatusOr<JsonFields> inner = o->GetObject("inner");
  ASSERT_TRUE(inner.ok());
  EXPECT_EQ(*inner->GetString("y"), "deep");
  EXPECT_EQ(Msg(inner->GetInt64("y").status()),
            "model.json: field 'o.inner.y' must be a 64-bit integer, got a string");
  EXPECT_EQ(Msg(inner->GetInt64("z").status()), "model.json: field 'o.inner.z' is missing");
  EXPECT_THAT(Msg(f.GetObject("s").status()),
              HasSubstr("field 's' must be an object, got a string"));
  EXPECT_THAT(Msg(f.GetObject("nope").status()), HasSubstr("field 'nope' is missing"));
}

TEST(JsonFieldsTest, MissingFields) {
  JsonFields f(Doc(), "ctx");
  for (const absl::Status& s :
       {f.GetInt64("nope").status(), f.GetInt("nope").status(), f.GetUint64("nope").status(),
        f.GetDouble("nope").status(), f.GetBool("nope").status(), f.GetString("nope").status(),
        f.GetDoubleArray("nope").status(), f.GetInt64Array("nope").status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Msg(s), "ctx: field 'nope' is missing");
  }
}

TEST(JsonFieldsTest, WrongTypesAreErrors) {
  JsonFields f(Doc(), "ctx");
  // Integers: floats (even integral ones), strings, booleans, null,
  // containers.
  for (const char* name : {"f", "fint", "huge", "s", "b", "n", "o", "a"}) {
    SCOPED_TRACE(name);
    EXPECT_FALSE(f.GetInt64(name).ok());
    EXPECT_FALSE(f.GetInt(name).ok());
    EXPECT_FALSE(f.GetUint64(name).ok());
    EXPECT_FALSE(f.GetInt64Array(name).ok());
  }
  for (const char* name : {"s", "b", "n", "o", "a"}) {
    EXPECT_FALSE(f.GetDouble(name).ok()) << name;
  }
  for (const char* name : {"i", "f", "s", "b", "n", "o"}) {
    EXPECT_FALSE(f.GetDoubleArray(name).ok()) << name;
    EXPECT_FALSE(f.GetDoubleArray(name, 0.0).ok()) << name;
  }
  for (const char* name : {"i", "f", "s", "n", "o", "a"}) {
    EXPECT_FALSE(f.GetBool(name).ok()) << name;
  }
  for (const char* name : {"i", "f", "b", "n", "o", "a"}) {
    EXPECT_FALSE(f.GetString(name).ok()) << name;
  }
  for (const char* name : {"i", "s", "n", "a"}) {
    EXPECT_FALSE(f.GetObject(name).ok()) << name;
  }
  EXPECT_EQ(Msg(f.GetInt64("f").status()), "ctx: field 'f' must be a 64-bit integer, got 2.5");
  EXPECT_EQ(Msg(f.GetInt64("huge").status()),
            "ctx: field 'huge' must be a 64-bit integer, got 1e+300");
  EXPECT_EQ(Msg(f.GetDouble("s").status()), "ctx: field 's' must be a number, got a string");
  EXPECT_EQ(Msg(f.GetDouble("n").status()), "ctx: field 'n' must be a number, got null");
  EXPECT_EQ(Msg(f.GetBool("i").status()), "ctx: field 'i' must be a boolean, got 42");
  EXPECT_EQ(Msg(f.GetString("b").status()), "ctx: field 'b' must be a string, got true");
  EXPECT_EQ(Msg(f.GetDoubleArray("o").status()),
            "ctx: field 'o' must be an array of numbers, got an object");
}

TEST(JsonFieldsTest, ArrayElementsAreChecked) {
  JsonFields f(Doc(), "ctx");
  EXPECT_EQ(Msg(f.GetDoubleArray("an").status()),
            "ctx: field 'an[1]' must be a number, got null");
  EXPECT_EQ(Msg(f.GetDoubleArray("ao").status()),
            "ctx: field 'ao[1]' must be a number, got an object");
  EXPECT_EQ(Msg(f.GetDoubleArray("as", 0.0).status()),
            "ctx: field 'as[1]' must be a number or null, got a string");
  EXPECT_EQ(Msg(f.GetInt64Array("a").status()),
            "ctx: field 'a[1]' must be a 64-bit integer, got 2.5");
  EXPECT_EQ(Msg(f.GetInt64Array("ai", 0, 10).status()),
            "ctx: field 'ai[1]' must be an integer in [0, 10], got -2");
}

TEST(JsonFieldsTest, IntegersAreRangeChecked) {
  JsonFields f(Doc(), "ctx");
  // Beyond int64.
  EXPECT_EQ(Msg(f.GetInt64("big").status()),
            "ctx: field 'big' must be a 64-bit integer, got 18446744073709551615");
  // Beyond int32.
  EXPECT_FALSE(f.GetInt("big").ok());
  EXPECT_FALSE(f.GetInt("i64max").ok());
  EXPECT_THAT(Msg(f.GetInt("i64max").status()),
              HasSubstr("must be an integer in [-2147483648, 2147483647]"));
  // Caller's bounds, inclusive.
  EXPECT_EQ(*f.GetInt64("i", 42, 42), 42);
  EXPECT_EQ(Msg(f.GetInt64("neg", 0).status()),
            "ctx: field 'neg' must be an integer >= 0, got -7");
  EXPECT_EQ(Msg(f.GetInt64("i", JsonFields::kInt64Min, 41).status()),
            "ctx: field 'i' must be an integer <= 41, got 42");
  EXPECT_EQ(Msg(f.GetInt("i", 1, 10).status()),
            "ctx: field 'i' must be an integer in [1, 10], got 42");
  // Unsigned: no negatives.
  EXPECT_EQ(Msg(f.GetUint64("neg").status()),
            "ctx: field 'neg' must be an integer >= 0, got -7");
}

TEST(JsonFieldsTest, BuiltDocumentsMayHoldNonFiniteNumbers) {
  // The parser refuses numbers that overflow a double, but a document built
  // in memory can hold NaN or infinities.
  EXPECT_TRUE(Json::parse("{\"x\": 1e400}", nullptr, false).is_discarded());
  Json j = Json::object();
  j["nan"] = std::nan("");
  j["inf"] = std::numeric_limits<double>::infinity();
  j["arr"] = Json::array({1.0, std::nan("")});
  JsonFields f(j, "ctx");
  EXPECT_EQ(Msg(f.GetDouble("nan").status()), "ctx: field 'nan' must be a finite number, got nan");
  EXPECT_EQ(Msg(f.GetDouble("inf").status()), "ctx: field 'inf' must be a finite number, got inf");
  EXPECT_FALSE(f.GetDoubleOr("nan", 0.0).ok());
  EXPECT_EQ(Msg(f.GetDoubleArray("arr").status()),
            "ctx: field 'arr[1]' must be a finite number, got nan");
  EXPECT_FALSE(f.GetInt64("nan").ok());
}

TEST(JsonFieldsTest, OptionalFieldsFallBackOnlyWhenAbsent) {
  JsonFields f(Doc(), "ctx");
  EXPECT_EQ(*f.GetInt64Or("nope", 5), 5);
  EXPECT_EQ(*f.GetIntOr("nope", 6), 6);
  EXPECT_EQ(*f.GetDoubleOr("nope", 1.5), 1.5);
  EXPECT_EQ(*f.GetBoolOr("nope", true), true);
  EXPECT_EQ(*f.GetStringOr("nope", "dflt"), "dflt");
  EXPECT_EQ(*f.GetInt64Or("i", 5), 42);
  EXPECT_EQ(*f.GetIntOr("i", 6), 42);
  EXPECT_EQ(*f.GetDoubleOr("f", 1.5), 2.5);
  EXPECT_EQ(*f.GetBoolOr("b", false), true);
  EXPECT_EQ(*f.GetStringOr("s", "dflt"), "text");
  // Present with the wrong type (null included): still an error.
  EXPECT_FALSE(f.GetInt64Or("s", 5).ok());
  EXPECT_FALSE(f.GetIntOr("n", 5).ok());
  EXPECT_FALSE(f.GetIntOr("i", 5, 0, 10).ok());  // present, out of range
  EXPECT_FALSE(f.GetDoubleOr("n", 1.5).ok());
  EXPECT_FALSE(f.GetBoolOr("i", true).ok());
  EXPECT_FALSE(f.GetStringOr("i", "dflt").ok());
  // An absent object is empty; a present non-object is an error.
  absl::StatusOr<JsonFields> empty = f.GetObjectOrEmpty("nope");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->is_object());
  EXPECT_EQ(*empty->GetIntOr("x", 3), 3);
  EXPECT_EQ(Msg(empty->GetInt("x").status()), "ctx: field 'nope.x' is missing");
  EXPECT_EQ(*f.GetObjectOrEmpty("o")->GetInt("x"), 1);
  EXPECT_FALSE(f.GetObjectOrEmpty("a").ok());
  EXPECT_FALSE(f.GetObjectOrEmpty("n").ok());
}

TEST(JsonFieldsTest, ErrorsCarryTheConstructorsCode) {
  JsonFields f(Doc(), "ctx", absl::StatusCode::kDataLoss);
  EXPECT_EQ(f.GetInt("s").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(f.GetInt("nope").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(f.GetObject("o")->GetString("x").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(f.GetObjectOrEmpty("nope")->GetBool("x").status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(JsonFields(Doc(), "ctx").GetInt("s").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(JsonFieldsTest, NonObjectsHaveNoFields) {
  for (const Json& j : {Json(), Json(3), Json("s"), Json::array({1, 2}),
                        Json(Json::value_t::discarded)}) {
    JsonFields f(j, "ctx");
    EXPECT_FALSE(f.is_object());
    EXPECT_FALSE(f.Has("x"));
    EXPECT_EQ(Msg(f.GetInt("x").status()), "ctx: field 'x' is missing");
    EXPECT_EQ(*f.GetIntOr("x", 4), 4);
  }
}

TEST(JsonFieldsTest, NothingThrows) {
  // Every accessor on every kind of value, including a few the loaders never
  // ask for.
  Json j = Doc();
  j["bin"] = Json::binary({1, 2, 3});
  JsonFields f(j, "ctx");
  for (const auto& [name, unused] : j.items()) {
    SCOPED_TRACE(name);
    EXPECT_NO_THROW({
      (void)f.GetInt64(name);
      (void)f.GetInt(name);
      (void)f.GetUint64(name);
      (void)f.GetDouble(name);
      (void)f.GetBool(name);
      (void)f.GetString(name);
      (void)f.GetObject(name);
      (void)f.GetDoubleArray(name);
      (void)f.GetDoubleArray(name, 0.0);
      (void)f.GetInt64Array(name);
      (void)f.GetInt64Or(name, 0);
      (void)f.GetIntOr(name, 0);
      (void)f.GetDoubleOr(name, 0);
      (void)f.GetBoolOr(name, false);
      (void)f.GetStringOr(name, "");
      (void)f.GetObjectOrEmpty(name);
    });
  }
  EXPECT_EQ(Msg(f.GetString("bin").status()),
            "ctx: field 'bin' must be a string, got a value of another kind");
}

}  // namespace
}  // namespace dendro
