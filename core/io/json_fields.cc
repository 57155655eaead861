#include "core/io/json_fields.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/io/posix_error.h"

// Only nlohmann calls that cannot throw are used here: the is_*() tests,
// get_ptr<>() (nullptr on a type mismatch) and lookups in the underlying
// std::map / std::vector. Beware: get_ptr<const number_integer_t*>() also
// succeeds for unsigned values (reinterpreting their bits), so the unsigned
// case is always tested first.

namespace dendro {
namespace {

using io_internal::ToAbsl;
using Json = nlohmann::json;

const Json& EmptyObject() {
  static const Json* const empty = new Json(Json::object());
  return *empty;
}

// What a value is, for "got ..." in messages. Numbers and booleans are
// shown; strings and containers only by kind (they may be long).
std::string Describe(const Json& v) {
  if (const auto* u = v.get_ptr<const Json::number_unsigned_t*>()) return absl::StrCat(*u);
  if (const auto* i = v.get_ptr<const Json::number_integer_t*>()) return absl::StrCat(*i);
  if (const auto* f = v.get_ptr<const Json::number_float_t*>()) return absl::StrCat(*f);
  if (const auto* b = v.get_ptr<const Json::boolean_t*>()) return *b ? "true" : "false";
  if (v.is_null()) return "null";
  if (v.is_string()) return "a string";
  if (v.is_object()) return "an object";
  if (v.is_array()) return "an array";
  return "a value of another kind";
}

std::string RangeText(int64_t min, int64_t max) {
  if (min == JsonFields::kInt64Min && max == JsonFields::kInt64Max) return "a 64-bit integer";
  if (max == JsonFields::kInt64Max) return absl::StrCat("an integer >= ", min);
  if (min == JsonFields::kInt64Min) return absl::StrCat("an integer <= ", max);
  return absl::StrCat("an integer in [", min, ", ", max, "]");
}

}  // namespace

JsonFields::JsonFields(const Json& object, std::string context, absl::StatusCode code)
    : JsonFields(object, std::move(context), std::string(), code) {}

JsonFields::JsonFields(const Json& object, std::string context, std::string prefix,
                       absl::StatusCode code)
    : object_(&object), context_(std::move(context)), prefix_(std::move(prefix)), code_(code) {}

bool JsonFields::is_object() const { return object_->is_object(); }

bool JsonFields::Has(std::string_view name) const { return Find(name) != nullptr; }

const Json* JsonFields::Find(std::string_view name) const {
  const auto* obj = object_->get_ptr<const Json::object_t*>();
  if (obj == nullptr) return nullptr;
  auto it = obj->find(name);
  return it == obj->end() ? nullptr : &it->second;
}

std::string JsonFields::Path(std::string_view name) const {
  return absl::StrCat(prefix_, ToAbsl(name));
}

absl::Status JsonFields::Missing(std::string_view name) const {
  return absl::Status(code_, absl::StrCat(context_, ": field '", Path(name), "' is missing"));
}

absl::Status JsonFields::Wrong(const std::string& path, std::string_view what,
                               const Json& value) const {
  return absl::Status(code_, absl::StrCat(context_, ": field '", path, "' must be ",
                                          ToAbsl(what), ", got ", Describe(value)));
}

absl::StatusOr<int64_t> JsonFields::ToInt64(const Json& v, const std::string& path, int64_t min,
                                            int64_t max) const {
  if (const auto* u = v.get_ptr<const Json::number_unsigned_t*>()) {
    if (*u <= static_cast<uint64_t>(kInt64Max)) {
      const int64_t x = static_cast<int64_t>(*u);
      if (x >= min && x <= max) return x;
    }
  } else if (const auto* i = v.get_ptr<const Json::number_integer_t*>()) {
    if (*i >= min && *i <= max) return static_cast<int64_t>(*i);
  }
  return Wrong(path, RangeText(min, max), v);
}

absl::StatusOr<double> JsonFields::ToDouble(const Json& v, const std::string& path) const {
  if (const auto* f = v.get_ptr<const Json::number_float_t*>()) {
    if (std::isfinite(*f)) return static_cast<double>(*f);
    return Wrong(path, "a finite number", v);
  }
  if (const auto* u = v.get_ptr<const Json::number_unsigned_t*>()) return static_cast<double>(*u);
  if (const auto* i = v.get_ptr<const Json::number_integer_t*>()) return static_cast<double>(*i);
  return Wrong(path, "a number", v);
}

absl::StatusOr<int64_t> JsonFields::GetInt64(std::string_view name, int64_t min,
                                             int64_t max) const {
  const Json* v = Find(name);
  if (v == nullptr) return Missing(name);
  return ToInt64(*v, Path(name), min, max);
}

absl::StatusOr<int32_t> JsonFields::GetInt(std::string_view name, int32_t min,
                                           int32_t max) const {
  absl::StatusOr<int64_t> v = GetInt64(name, min, max);
  if (!v.ok()) return v.status();
  return static_cast<int32_t>(*v);
}

absl::StatusOr<uint64_t> JsonFields::GetUint64(std::string_view name) const {
  const Json* v = Find(name);
  if (v == nullptr) return Missing(name);
  if (const auto* u = v->get_ptr<const Json::number_unsigned_t*>()) return uint64_t{*u};
  if (const auto* i = v->get_ptr<const Json::number_integer_t*>(); i != nullptr && *i >= 0) {
    return static_cast<uint64_t>(*i);
  }
  return Wrong(Path(name), "an integer >= 0", *v);
}

absl::StatusOr<double> JsonFields::GetDouble(std::string_view name) const {
  const Json* v = Find(name);
  if (v == nullptr) return Missing(name);
  return ToDouble(*v, Path(name));
}

absl::StatusOr<bool> JsonFields::GetBool(std::string_view name) const {
  const Json* v = Find(name);
  if (v == nullptr) return Missing(name);
  if (const auto* b = v->get_ptr<const Json::boolean_t*>()) return bool{*b};
  return Wrong(Path(name), "a boolean", *v);
}

absl::StatusOr<std::string> JsonFields::GetString(std::string_view name) const {
  const Json* v = Find(name);
  if (v == nullptr) return Missing(name);
  if (const auto* s = v->get_ptr<const Json::string_t*>()) return *s;
  return Wrong(Path(name), "a string", *v);
}

absl::StatusOr<JsonFields> JsonFields::GetObject(std::string_view name) const {
  const Json* v = Find(name);
  if (v == nullptr) return Missing(name);
  if (!v->is_object()) return Wrong(Path(name), "an object", *v);
  return JsonFields(*v, context_, absl::StrCat(Path(name), "."), code_);
}

absl::StatusOr<std::vector<double>> JsonFields::GetDoubleArray(
    std::string_view name, std::optional<double> null_value) const {
  const Json* v = Find(name);
  if (v == nullptr) return Missing(name);
  const auto* array = v->get_ptr<const Json::array_t*>();
  if (array == nullptr) {
    return Wrong(Path(name), null_value ? "an array of numbers or nulls" : "an array of numbers",
                 *v);
  }
  std::vector<double> out;
  out.reserve(array->size());
  for (size_t i = 0; i < array->size(); ++i) {
    const Json& e = (*array)[i];
    if (null_value && e.is_null()) {
      out.push_back(*null_value);
      continue;
    }
    const std::string path = absl::StrCat(Path(name), "[", i, "]");
    if (null_value && !e.is_number()) return Wrong(path, "a number or null", e);
    absl::StatusOr<double> x = ToDouble(e, path);
    if (!x.ok()) return x.status();
    out.push_back(*x);
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> JsonFields::GetInt64Array(std::string_view name,
                                                               int64_t min, int64_t max) const {
  const Json* v = Find(name);
  if (v == nullptr) return Missing(name);
  const auto* array = v->get_ptr<const Json::array_t*>();
  if (array == nullptr) return Wrong(Path(name), "an array of integers", *v);
  std::vector<int64_t> out;
  out.reserve(array->size());
  for (size_t i = 0; i < array->size(); ++i) {
    absl::StatusOr<int64_t> x =
        ToInt64((*array)[i], absl::StrCat(Path(name), "[", i, "]"), min, max);
    if (!x.ok()) return x.status();
    out.push_back(*x);
  }
  return out;
}

absl::StatusOr<int64_t> JsonFields::GetInt64Or(std::string_view name, int64_t fallback,
                                               int64_t min, int64_t max) const {
  if (!Has(name)) return fallback;
  return GetInt64(name, min, max);
}

absl::StatusOr<int32_t> JsonFields::GetIntOr(std::string_view name, int32_t fallback,
                                             int32_t min, int32_t max) const {
  if (!Has(name)) return fallback;
  return GetInt(name, min, max);
}

absl::StatusOr<double> JsonFields::GetDoubleOr(std::string_view name, double fallback) const {
  if (!Has(name)) return fallback;
  return GetDouble(name);
}

absl::StatusOr<bool> JsonFields::GetBoolOr(std::string_view name, bool fallback) const {
  if (!Has(name)) return fallback;
  return GetBool(name);
}

absl::StatusOr<std::string> JsonFields::GetStringOr(std::string_view name,
                                                    std::string fallback) const {
  if (!Has(name)) return fallback;
  return GetString(name);
}

absl::StatusOr<JsonFields> JsonFields::GetObjectOrEmpty(std::string_view name) const {
  if (!Has(name)) return JsonFields(EmptyObject(), context_, absl::StrCat(Path(name), "."), code_);
  return GetObject(name);
}

}  // namespace dendro
