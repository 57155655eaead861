// Exception-free reading of fields from a parsed JSON object.
//
// nlohmann::json's get<T>(), at(), value() and operator[] throw when a field
// is missing or holds another type. Model files come from disk and may be
// damaged, and they are loaded inside request handlers, so loaders read them
// through JsonFields instead: every accessor returns a Status that names the
// field, and nothing in this file throws (short of std::bad_alloc). Parse
// with nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false).
//
// Types are strict:
//  * an integer field holds a JSON integer ("3", never "3.0", "1e300" or
//    "\"3\"") inside the accessor's range; values outside it are errors, not
//    truncated;
//  * a number field holds any JSON number (integer or not) that is finite
//    (a parsed document never holds NaN or infinities, but a built one may);
//  * a string, boolean or object field holds exactly that;
//  * null is a type of its own and matches none of the above.
// The ...Or variants return the fallback only when the field is absent; a
// present field of the wrong type (null included) is still an error.
//
// Errors are "<context>: field '<name>' is missing" or "<context>: field
// '<name>' must be <what> ...", where <name> spells the path from the outer
// object ("options.seed", "dof[3]"). All of a reader's errors carry the code
// given to its constructor, so that a loader keeps its own convention
// (InvalidArgument or DataLoss for a damaged file).
#ifndef DENDRO_CORE_IO_JSON_FIELDS_H_
#define DENDRO_CORE_IO_JSON_FIELDS_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace dendro {

// `j` as text (`indent` < 0: compact). Never throws: a string that is not
// valid UTF-8 is written with U+FFFD in place of the bad bytes (plain
// dump() throws type_error 316).
inline std::string DumpJson(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

class JsonFields {
 public:
  static constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
  static constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
  static constexpr int32_t kInt32Min = std::numeric_limits<int32_t>::min();
  static constexpr int32_t kInt32Max = std::numeric_limits<int32_t>::max();

  // Reads the fields of `object`, which must outlive the reader and every
  // reader GetObject() derives from it. `context` starts every error message
  // (typically the file's path). If `object` is not a JSON object, every
  // field reads as missing; callers that care check is_object() first.
  explicit JsonFields(const nlohmann::json& object, std::string context,
                      absl::StatusCode code = absl::StatusCode::kInvalidArgument);

  bool is_object() const;
  // Whether `name` is present, whatever its value (null included).
  bool Has(std::string_view name) const;

  // Required fields: absent or of another type is an error. Integer ranges
  // are inclusive.
  absl::StatusOr<int64_t> GetInt64(std::string_view name, int64_t min = kInt64Min,
                                   int64_t max = kInt64Max) const;
  absl::StatusOr<int32_t> GetInt(std::string_view name, int32_t min = kInt32Min,
                                 int32_t max = kInt32Max) const;
  absl::StatusOr<uint64_t> GetUint64(std::string_view name) const;
  absl::StatusOr<double> GetDouble(std::string_view name) const;
  absl::StatusOr<bool> GetBool(std::string_view name) const;
  absl::StatusOr<std::string> GetString(std::string_view name) const;
  // A reader for a nested object; its errors name fields "<name>.<field>".
  absl::StatusOr<JsonFields> GetObject(std::string_view name) const;
  // An array of numbers (each finite). With `null_value`, null elements read
  // as that value (e.g. infinity, which JSON cannot spell); without it they
  // are errors.
  absl::StatusOr<std::vector<double>> GetDoubleArray(
      std::string_view name, std::optional<double> null_value = std::nullopt) const;
  // An array of integers, each within [min, max].
  absl::StatusOr<std::vector<int64_t>> GetInt64Array(std::string_view name,
                                                     int64_t min = kInt64Min,
                                                     int64_t max = kInt64Max) const;

  // Optional fields: `fallback` when absent, otherwise as above.
  absl::StatusOr<int64_t> GetInt64Or(std::string_view name, int64_t fallback,
                                     int64_t min = kInt64Min, int64_t max = kInt64Max) const;
  absl::StatusOr<int32_t> GetIntOr(std::string_view name, int32_t fallback,
                                   int32_t min = kInt32Min, int32_t max = kInt32Max) const;
  absl::StatusOr<double> GetDoubleOr(std::string_view name, double fallback) const;
  absl::StatusOr<bool> GetBoolOr(std::string_view name, bool fallback) const;
  absl::StatusOr<std::string> GetStringOr(std::string_view name, std::string fallback) const;
  // An absent object reads as an empty one (whose fields are all absent).
  absl::StatusOr<JsonFields> GetObjectOrEmpty(std::string_view name) const;

 private:
  JsonFields(const nlohmann::json& object, std::string context, std::string prefix,
             absl::StatusCode code);

  // The field's value, or nullptr when absent (or when this is no object).
  const nlohmann::json* Find(std::string_view name) const;
  std::string Path(std::string_view name) const;
  absl::Status Missing(std::string_view name) const;
  // "<context>: field '<path>' must be <what>, got <description of value>".
  absl::Status Wrong(const std::string& path, std::string_view what,
                     const nlohmann::json& value) const;

  absl::StatusOr<int64_t> ToInt64(const nlohmann::json& v, const std::string& path,
                                  int64_t min, int64_t max) const;
  absl::StatusOr<double> ToDouble(const nlohmann::json& v, const std::string& path) const;

  const nlohmann::json* object_;
  std::string context_;
  std::string prefix_;  // "" or "outer." for nested objects
  absl::StatusCode code_;
};

}  // namespace dendro

#endif  // DENDRO_CORE_IO_JSON_FIELDS_H_
