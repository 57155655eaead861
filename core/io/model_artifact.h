// Model artifacts: the on-disk form of a fitted model. An artifact is a
// directory holding one JSON manifest and named .npy arrays:
//
//   <manifest>.json  {"format": "<name>", "version": <int>, <method fields>}
//   <array>.npy      1-D or 2-D, little-endian, C order (see io/npy.h)
//
// A method declares its manifest once: a struct deriving from
// ArtifactManifest whose Fields() lists every member with its JSON name. The
// same list writes the manifest (ModelArtifactWriter) and reads it back
// (ModelArtifactReader::Open), so the two cannot drift apart. (nlohmann's
// to_json/from_json macros would give the same single list, but their
// reading converts 3.5 or true to an integer and names no field path.)
//
// Reading trusts nothing on disk and throws nothing. The manifest must be a
// JSON object with the expected format and version; each field must be
// present (unless declared optional) and of exactly its type, integers being
// JSON integers within range (io/json_fields.h has the rules). An array must
// have the dtype family and the exact shape the loader asks for, checked on
// the file's header before anything is copied, so a damaged header never
// causes an allocation larger than the file itself. Errors name the file and
// the field, and carry the artifact's code (ArtifactFormat::code) -- except
// for errors reading a file at all (NotFound, PermissionDenied, ...), which
// keep their own code.
//
// Writing replaces every file atomically (io/atomic_file.h) and writes the
// manifest last: a directory whose manifest is complete has all its arrays.
#ifndef DENDRO_CORE_IO_MODEL_ARTIFACT_H_
#define DENDRO_CORE_IO_MODEL_ARTIFACT_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/io/npy.h"

namespace dendro {

// What identifies one kind of artifact. Readers and writers keep a copy, so
// the views must point at storage that outlives them (string literals).
struct ArtifactFormat {
  std::string_view manifest;  // file name in the directory, "ghhc_model.json"
  std::string_view format;    // value of the manifest's "format"
  int64_t version;            // value of its "version"
  std::string_view model;     // for messages: "gHHC" in "not a gHHC model"
  // Code of every error about damaged contents (InvalidArgument or DataLoss).
  absl::StatusCode code;
};

// The list of a manifest's fields, given to ArtifactManifest::Fields(). On
// write each call stores the member's value; on read it sets the member from
// the field (after the first error, later calls do nothing).
class ManifestFields {
 public:
  static constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
  static constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

  virtual ~ManifestFields() = default;

  // Makes the next field optional: when it is absent, reading leaves the
  // member as it is (so its initial value is the default). Present, it must
  // still have the right type.
  ManifestFields& Optional() {
    optional_ = true;
    return *this;
  }

  // A JSON integer in [min, max].
  virtual void Int(std::string_view name, int64_t* v, int64_t min = kInt64Min,
                   int64_t max = kInt64Max) = 0;
  // A JSON integer within int32's range.
  virtual void Int(std::string_view name, int32_t* v) = 0;
  // A non-negative JSON integer within uint64's range.
  virtual void Uint(std::string_view name, uint64_t* v) = 0;
  // Any finite JSON number.
  virtual void Number(std::string_view name, double* v) = 0;
  virtual void Bool(std::string_view name, bool* v) = 0;
  virtual void String(std::string_view name, std::string* v) = 0;
  // An array of finite numbers. With `null_as` (e.g. infinity, which JSON
  // cannot spell), elements equal to it are written as null and null reads
  // as it; without it null is an error.
  virtual void Numbers(std::string_view name, std::vector<double>* v,
                       std::optional<double> null_as = std::nullopt) = 0;
  // An array of integers within int32's range.
  virtual void Ints(std::string_view name, std::vector<int32_t>* v) = 0;
  // A nested object whose fields `fields` lists; errors name them
  // "<name>.<field>". Optional(): an absent object reads as an empty one.
  virtual void Object(std::string_view name,
                      absl::FunctionRef<void(ManifestFields&)> fields) = 0;

 protected:
  // Whether Optional() preceded this call; resets it.
  bool TakeOptional() {
    const bool optional = optional_;
    optional_ = false;
    return optional;
  }

 private:
  bool optional_ = false;
};

// Base of a method's manifest struct. Fields() must make the same calls in
// the same order every time (it may not branch on the values it reads).
class ArtifactManifest {
 public:
  virtual ~ArtifactManifest() = default;
  virtual void Fields(ManifestFields& f) = 0;
};

// Collects arrays, then writes them and the manifest. Not thread-safe.
class ModelArtifactWriter {
 public:
  // `dir` must exist.
  ModelArtifactWriter(std::string dir, const ArtifactFormat& format);

  // Adds the array `file` ("ghhc_nodes.npy") of `shape` (1 or 2
  // non-negative entries whose product is data.size()), stored with data's
  // element type. The data is not copied: it must stay valid until Write().
  // A mismatch is reported by Write().
  void Add(std::string_view file, absl::Span<const float> data, std::vector<int64_t> shape);
  void Add(std::string_view file, absl::Span<const double> data, std::vector<int64_t> shape);
  void Add(std::string_view file, absl::Span<const int32_t> data, std::vector<int64_t> shape);
  void Add(std::string_view file, absl::Span<const int64_t> data, std::vector<int64_t> shape);
  // The same, with the elements given as consecutive pieces (e.g. one block
  // per class) that are concatenated in order.
  void AddPieces(std::string_view file, std::vector<absl::Span<const float>> pieces,
                 std::vector<int64_t> shape);

  // Writes each array, then the manifest ("format", "version" and the
  // fields `manifest` lists). Returns the first error (a bad Add or a failed
  // write); files written before it are left in place.
  absl::Status Write(ArtifactManifest& manifest);

 private:
  struct Array {
    std::string file;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<std::string_view> pieces;  // the bytes, in order
  };
  void AddBytes(std::string_view file, DType dtype, std::vector<int64_t> shape,
                std::vector<std::string_view> pieces);

  std::string dir_;
  ArtifactFormat format_;
  std::vector<Array> arrays_;
  absl::Status status_;  // first error from Add
};

// Reads an artifact's manifest on Open(), then its arrays on request.
class ModelArtifactReader {
 public:
  // A shape entry that matches any length.
  static constexpr int64_t kAnyLength = -1;

  // Reads <dir>/<format.manifest> into *manifest. Errors: reading the file
  // (NotFound if absent, ...); otherwise format.code, naming the file: not a
  // JSON object, another format or version, a field missing, mistyped or out
  // of range (naming the field).
  static absl::StatusOr<ModelArtifactReader> Open(std::string dir, const ArtifactFormat& format,
                                                  ArtifactManifest* manifest);

  // Whether the directory has an entry `file` (for arrays only some models
  // have). An unreadable entry counts as present, so reading it reports why.
  bool Has(std::string_view file) const;

  // The array `file`, which must have exactly `shape`; checked before the
  // data is copied. Element types convert as in io/npy.h: Float64 reads
  // float32 or float64 files, Float32 float32 or float64 ones (a finite
  // value beyond float32's range is an error), Int64 int32 or int64 ones.
  absl::StatusOr<std::vector<double>> Float64(std::string_view file,
                                              absl::Span<const int64_t> shape) const;
  absl::StatusOr<std::vector<float>> Float32(std::string_view file,
                                             absl::Span<const int64_t> shape) const;
  absl::StatusOr<std::vector<int64_t>> Int64(std::string_view file,
                                             absl::Span<const int64_t> shape) const;
  // A float32 file (only), left mapped: nothing is copied.
  absl::StatusOr<std::unique_ptr<MappedNpy>> MapFloat32(std::string_view file,
                                                        absl::Span<const int64_t> shape) const;

  // An error in the artifact's code: "<dir>/<file>: <message>" (just
  // "<dir>: ..." when `file` is empty). For loaders' own checks.
  absl::Status Error(std::string_view file, std::string_view message) const;
  // "<dir>/<manifest>: field '<name>' <message>", in the artifact's code.
  absl::Status FieldError(std::string_view name, std::string_view message) const;

  const std::string& dir() const { return dir_; }

 private:
  ModelArtifactReader(std::string dir, const ArtifactFormat& format)
      : dir_(std::move(dir)), format_(format) {}
  // Opens `file` and checks its shape (`float_family`: a float dtype is
  // wanted, else an integer one).
  absl::StatusOr<std::unique_ptr<MappedNpy>> OpenArray(std::string_view file,
                                                       absl::Span<const int64_t> shape,
                                                       bool float_family) const;
  // npy's format errors (InvalidArgument) in the artifact's code; errors
  // opening the file unchanged.
  absl::Status Recode(const absl::Status& status) const;

  std::string dir_;
  ArtifactFormat format_;
};

}  // namespace dendro

#endif  // DENDRO_CORE_IO_MODEL_ARTIFACT_H_
