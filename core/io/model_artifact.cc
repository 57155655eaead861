#include "core/io/model_artifact.h"

#include <sys/stat.h>

#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/io/atomic_file.h"
#include "core/io/json_fields.h"
#include "core/io/posix_error.h"
#include "nlohmann/json.hpp"

namespace dendro {
namespace {

using Json = nlohmann::json;
using io_internal::ToAbsl;

std::string ShapeText(absl::Span<const int64_t> shape) {
  std::string s;
  for (int64_t v : shape) {
    absl::StrAppend(&s, s.empty() ? "" : " x ");
    if (v == ModelArtifactReader::kAnyLength) {
      absl::StrAppend(&s, "any");
    } else {
      absl::StrAppend(&s, v);
    }
  }
  return s;
}

// Stores each field into a JSON object.
class FieldWriter final : public ManifestFields {
 public:
  explicit FieldWriter(Json* object) : object_(object) {}

  void Int(std::string_view name, int64_t* v, int64_t, int64_t) override { Set(name, *v); }
  void Int(std::string_view name, int32_t* v) override { Set(name, *v); }
  void Uint(std::string_view name, uint64_t* v) override { Set(name, *v); }
  void Number(std::string_view name, double* v) override { Set(name, *v); }
  void Bool(std::string_view name, bool* v) override { Set(name, *v); }
  void String(std::string_view name, std::string* v) override { Set(name, *v); }
  void Numbers(std::string_view name, std::vector<double>* v,
               std::optional<double> null_as) override {
    Json array = Json::array();
    for (double x : *v) {
      if (null_as && x == *null_as) {
        array.push_back(nullptr);
      } else {
        array.push_back(x);
      }
    }
    Set(name, std::move(array));
  }
  void Ints(std::string_view name, std::vector<int32_t>* v) override { Set(name, *v); }
  void Object(std::string_view name, absl::FunctionRef<void(ManifestFields&)> fields) override {
    Json object = Json::object();
    FieldWriter nested(&object);
    fields(nested);
    Set(name, std::move(object));
  }

 private:
  template <typename T>
  void Set(std::string_view name, T&& value) {
    TakeOptional();  // written either way
    (*object_)[std::string(name)] = std::forward<T>(value);
  }

  Json* object_;
};

// Sets each member from a JSON object through JsonFields (which never
// throws); keeps the first error and ignores later fields.
class FieldReader final : public ManifestFields {
 public:
  explicit FieldReader(JsonFields fields) : fields_(std::move(fields)) {}
  const absl::Status& status() const { return status_; }

  void Int(std::string_view name, int64_t* v, int64_t min, int64_t max) override {
    if (Skip(name)) return;
    Take(optional_ ? fields_.GetInt64Or(name, *v, min, max) : fields_.GetInt64(name, min, max), v);
  }
  void Int(std::string_view name, int32_t* v) override {
    if (Skip(name)) return;
    Take(optional_ ? fields_.GetIntOr(name, *v) : fields_.GetInt(name), v);
  }
  void Uint(std::string_view name, uint64_t* v) override {
    if (Skip(name) || Absent(name)) return;
    Take(fields_.GetUint64(name), v);
  }
  void Number(std::string_view name, double* v) override {
    if (Skip(name)) return;
    Take(optional_ ? fields_.GetDoubleOr(name, *v) : fields_.GetDouble(name), v);
  }
  void Bool(std::string_view name, bool* v) override {
    if (Skip(name)) return;
    Take(optional_ ? fields_.GetBoolOr(name, *v) : fields_.GetBool(name), v);
  }
  void String(std::string_view name, std::string* v) override {
    if (Skip(name)) return;
    Take(optional_ ? fields_.GetStringOr(name, *v) : fields_.GetString(name), v);
  }
  void Numbers(std::string_view name, std::vector<double>* v,
               std::optional<double> null_as) override {
    if (Skip(name) || Absent(name)) return;
    Take(fields_.GetDoubleArray(name, null_as), v);
  }
  void Ints(std::string_view name, std::vector<int32_t>* v) override {
    if (Skip(name) || Absent(name)) return;
    absl::StatusOr<std::vector<int64_t>> ints =
        fields_.GetInt64Array(name, JsonFields::kInt32Min, JsonFields::kInt32Max);
    if (!ints.ok()) {
      status_ = ints.status();
      return;
    }
    v->assign(ints->begin(), ints->end());
  }
  void Object(std::string_view name, absl::FunctionRef<void(ManifestFields&)> fields) override {
    if (Skip(name)) return;
    absl::StatusOr<JsonFields> object =
        optional_ ? fields_.GetObjectOrEmpty(name) : fields_.GetObject(name);
    if (!object.ok()) {
      status_ = object.status();
      return;
    }
    FieldReader nested(*std::move(object));
    fields(nested);
    status_ = nested.status();
  }

 private:
  // Consumes Optional() into optional_; true if an earlier field failed.
  bool Skip(std::string_view) {
    optional_ = TakeOptional();
    return !status_.ok();
  }
  // An optional field that is absent (the member keeps its value).
  bool Absent(std::string_view name) const { return optional_ && !fields_.Has(name); }

  template <typename T>
  void Take(absl::StatusOr<T> value, T* member) {
    if (value.ok()) {
      *member = *std::move(value);
    } else {
      status_ = value.status();
    }
  }

  JsonFields fields_;
  bool optional_ = false;  // of the field being read
  absl::Status status_;
};

}  // namespace

// ---------------------------------------------------------------------------

ModelArtifactWriter::ModelArtifactWriter(std::string dir, const ArtifactFormat& format)
    : dir_(std::move(dir)), format_(format) {}

void ModelArtifactWriter::AddBytes(std::string_view file, DType dtype, std::vector<int64_t> shape,
                                   std::vector<std::string_view> pieces) {
  if (!status_.ok()) return;
  const std::string path = absl::StrCat(dir_, "/", ToAbsl(file));
  bool valid = !shape.empty() && shape.size() <= 2;
  // The product of the entries, with overflow caught before it happens.
  int64_t elements = 1;
  for (int64_t d : shape) {
    valid = valid && d >= 0 && (d == 0 || elements <= JsonFields::kInt64Max / d);
    if (valid) elements *= d;
  }
  size_t bytes = 0;
  for (std::string_view p : pieces) bytes += p.size();
  const size_t size = DTypeSize(dtype);
  if (!valid || bytes % size != 0 || bytes / size != static_cast<uint64_t>(elements)) {
    status_ = absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot write shape ", ShapeText(shape), " with ",
                     bytes / size, " elements"));
    return;
  }
  arrays_.push_back(Array{std::string(file), dtype, std::move(shape), std::move(pieces)});
}

template <typename T>
static std::string_view Bytes(absl::Span<const T> data) {
  return std::string_view(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(T));
}

void ModelArtifactWriter::Add(std::string_view file, absl::Span<const float> data,
                              std::vector<int64_t> shape) {
  AddBytes(file, DType::kFloat32, std::move(shape), {Bytes(data)});
}
void ModelArtifactWriter::Add(std::string_view file, absl::Span<const double> data,
                              std::vector<int64_t> shape) {
  AddBytes(file, DType::kFloat64, std::move(shape), {Bytes(data)});
}
void ModelArtifactWriter::Add(std::string_view file, absl::Span<const int32_t> data,
                              std::vector<int64_t> shape) {
  AddBytes(file, DType::kInt32, std::move(shape), {Bytes(data)});
}
void ModelArtifactWriter::Add(std::string_view file, absl::Span<const int64_t> data,
                              std::vector<int64_t> shape) {
  AddBytes(file, DType::kInt64, std::move(shape), {Bytes(data)});
}
void ModelArtifactWriter::AddPieces(std::string_view file,
                                    std::vector<absl::Span<const float>> pieces,
                                    std::vector<int64_t> shape) {
  std::vector<std::string_view> bytes;
  bytes.reserve(pieces.size());
  for (absl::Span<const float> p : pieces) bytes.push_back(Bytes(p));
  AddBytes(file, DType::kFloat32, std::move(shape), std::move(bytes));
}

absl::Status ModelArtifactWriter::Write(ArtifactManifest& manifest) {
  DENDRO_RETURN_IF_ERROR(status_);
  for (const Array& a : arrays_) {
    AtomicFileWriter w;
    DENDRO_RETURN_IF_ERROR(AtomicFileWriter::Open(absl::StrCat(dir_, "/", a.file), &w));
    DENDRO_RETURN_IF_ERROR(w.Append(MakeNpyHeader(a.dtype, a.shape)));
    for (std::string_view p : a.pieces) DENDRO_RETURN_IF_ERROR(w.Append(p));
    DENDRO_RETURN_IF_ERROR(w.Commit());
  }
  Json j = Json::object();
  j["format"] = std::string(format_.format);
  j["version"] = format_.version;
  FieldWriter fields(&j);
  manifest.Fields(fields);
  return WriteFileAtomic(absl::StrCat(dir_, "/", ToAbsl(format_.manifest)), DumpJson(j, 2) + "\n");
}

// ---------------------------------------------------------------------------

absl::StatusOr<ModelArtifactReader> ModelArtifactReader::Open(std::string dir,
                                                              const ArtifactFormat& format,
                                                              ArtifactManifest* manifest) {
  ModelArtifactReader reader(std::move(dir), format);
  const std::string path = absl::StrCat(reader.dir_, "/", ToAbsl(format.manifest));
  std::string text;
  DENDRO_RETURN_IF_ERROR(ReadFileToString(path, &text));
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::Status(format.code, absl::StrCat(path, ": not a JSON object"));
  }
  const JsonFields f(j, path, format.code);
  if (absl::StatusOr<std::string> name = f.GetStringOr("format", "");
      !name.ok() || *name != format.format) {
    return absl::Status(format.code, absl::StrCat(path, ": not a ", ToAbsl(format.model),
                                                  " model (format is not \"",
                                                  ToAbsl(format.format), "\")"));
  }
  DENDRO_ASSIGN_OR_RETURN(const int64_t version, f.GetInt64("version"));
  if (version != format.version) {
    return absl::Status(format.code, absl::StrCat(path, ": unsupported ", ToAbsl(format.model),
                                                  " model version ", version,
                                                  " (this build reads version ", format.version,
                                                  ")"));
  }
  FieldReader fields(f);
  manifest->Fields(fields);
  DENDRO_RETURN_IF_ERROR(fields.status());
  return reader;
}

bool ModelArtifactReader::Has(std::string_view file) const {
  struct stat st;
  const std::string path = absl::StrCat(dir_, "/", ToAbsl(file));
  return ::stat(path.c_str(), &st) == 0 || errno != ENOENT;
}

absl::Status ModelArtifactReader::Recode(const absl::Status& status) const {
  if (status.code() != absl::StatusCode::kInvalidArgument) return status;
  return absl::Status(format_.code, status.message());
}

absl::StatusOr<std::unique_ptr<MappedNpy>> ModelArtifactReader::OpenArray(
    std::string_view file, absl::Span<const int64_t> shape, bool float_family) const {
  absl::StatusOr<std::unique_ptr<MappedNpy>> npy =
      MappedNpy::Open(absl::StrCat(dir_, "/", ToAbsl(file)));
  if (!npy.ok()) return Recode(npy.status());
  const NpyHeader& h = (*npy)->header();
  const bool is_float = h.dtype == DType::kFloat32 || h.dtype == DType::kFloat64;
  if (is_float != float_family) {
    return Error(file, absl::StrCat("expected ",
                                    float_family ? "a float32 or float64" : "an int32 or int64",
                                    " array, got ", ToAbsl(DTypeName(h.dtype))));
  }
  bool match = h.shape.size() == shape.size();
  for (size_t i = 0; match && i < shape.size(); ++i) {
    match = shape[i] == kAnyLength || shape[i] == h.shape[i];
  }
  if (!match) {
    return Error(file, absl::StrCat("expected shape ", ShapeText(shape), ", found ",
                                    ShapeText(h.shape)));
  }
  return npy;
}

absl::StatusOr<std::vector<double>> ModelArtifactReader::Float64(
    std::string_view file, absl::Span<const int64_t> shape) const {
  DENDRO_ASSIGN_OR_RETURN(std::unique_ptr<MappedNpy> npy, OpenArray(file, shape, true));
  absl::StatusOr<NpyArrayF64> a = ToFloat64(*npy);
  if (!a.ok()) return Recode(a.status());
  return std::move(a->data);
}

absl::StatusOr<std::vector<float>> ModelArtifactReader::Float32(
    std::string_view file, absl::Span<const int64_t> shape) const {
  DENDRO_ASSIGN_OR_RETURN(std::unique_ptr<MappedNpy> npy, OpenArray(file, shape, true));
  absl::StatusOr<NpyArrayF32> a = ToFloat32(*npy);
  if (!a.ok()) return Recode(a.status());
  return std::move(a->data);
}

absl::StatusOr<std::vector<int64_t>> ModelArtifactReader::Int64(
    std::string_view file, absl::Span<const int64_t> shape) const {
  DENDRO_ASSIGN_OR_RETURN(std::unique_ptr<MappedNpy> npy, OpenArray(file, shape, false));
  absl::StatusOr<NpyArrayI64> a = ToInt64(*npy);
  if (!a.ok()) return Recode(a.status());
  return std::move(a->data);
}

absl::StatusOr<std::unique_ptr<MappedNpy>> ModelArtifactReader::MapFloat32(
    std::string_view file, absl::Span<const int64_t> shape) const {
  DENDRO_ASSIGN_OR_RETURN(std::unique_ptr<MappedNpy> npy, OpenArray(file, shape, true));
  if (npy->header().dtype != DType::kFloat32) {
    return Error(file, absl::StrCat("expected a float32 array, got ",
                                    ToAbsl(DTypeName(npy->header().dtype))));
  }
  return npy;
}

absl::Status ModelArtifactReader::Error(std::string_view file, std::string_view message) const {
  return absl::Status(format_.code, absl::StrCat(dir_, file.empty() ? "" : "/", ToAbsl(file),
                                                 ": ", ToAbsl(message)));
}

absl::Status ModelArtifactReader::FieldError(std::string_view name,
                                             std::string_view message) const {
  return absl::Status(format_.code, absl::StrCat(dir_, "/", ToAbsl(format_.manifest),
                                                 ": field '", ToAbsl(name), "' ",
                                                 ToAbsl(message)));
}

}  // namespace dendro
