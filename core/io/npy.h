// NumPy .npy files: the array format Dendro reads and writes.
//
// MappedNpy and the Read* functions are what the server stores and loads:
// format versions 1.0, 2.0 and 3.0; dtypes '<f4', '<f8', '<i4', '<i8' (and
// '|'/'=' spellings that mean the same on little-endian hosts); C order
// only; 1-D or 2-D shapes. Everything else (Fortran order, big endian,
// object arrays, other dtypes, truncated data) is an InvalidArgument error
// that names the problem and the file. Files as users have them (any
// numeric dtype, either order) go through ParseNpyLayout and
// core/input/matrix_file.h, which convert.
#ifndef DENDRO_CORE_IO_NPY_H_
#define DENDRO_CORE_IO_NPY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace dendro {

enum class DType { kFloat32, kFloat64, kInt32, kInt64 };
std::string_view DTypeName(DType t);  // "float32", ...
size_t DTypeSize(DType t);

struct NpyHeader {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;  // 1 or 2 entries
  size_t data_offset = 0;      // bytes from file start to the first element
  // Product of `shape` (0 for an empty shape, which the parser never yields).
  int64_t num_elements() const;
  // num_elements() * DTypeSize(dtype); the parser guarantees no overflow.
  int64_t num_bytes() const;
  int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  int64_t cols() const { return shape.size() < 2 ? 1 : shape[1]; }
};

// Parses the header at the start of `bytes` (magic, version, dict). `bytes`
// may extend past the header (e.g. the whole file); the data size is not
// checked here. Errors are InvalidArgument and do not name a file.
absl::StatusOr<NpyHeader> ParseNpyHeader(std::string_view bytes);

// The element type of any array numpy writes with a plain dtype string
// ('<f2', '>i8', '|u1', '|b1', '<U12', '|S5'), for readers that convert.
struct NpyElementType {
  enum class Kind { kFloat, kSignedInt, kUnsignedInt, kBool, kUnicode, kBytes };
  Kind kind = Kind::kFloat;
  int size = 4;             // bytes per element (kUnicode: 4 per character)
  bool big_endian = false;  // always false for 1-byte types
  std::string descr;        // as written in the header
  // numpy's name: "float16", "uint8", "bool", "<U12 (unicode string)".
  std::string Name() const;
};

// Everything a header says, before any restriction on dtype or order.
struct NpyLayout {
  NpyElementType element;
  bool fortran_order = false;
  std::vector<int64_t> shape;  // 1 or 2 entries
  size_t data_offset = 0;
  int64_t num_elements() const;
  int64_t num_bytes() const;  // the parser guarantees no overflow
  int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  int64_t cols() const { return shape.size() < 2 ? 1 : shape[1]; }
};

// Like ParseNpyHeader, but accepts float16/32/64, signed and unsigned
// integers of 1-8 bytes, bool, fixed-width unicode and byte strings, either
// byte order, and Fortran order. Still refused: object, complex, datetime,
// float128, structured and sub-array dtypes, and more than two dimensions.
absl::StatusOr<NpyLayout> ParseNpyLayout(std::string_view bytes);

// Serialises a header for `shape` (version 1.0, or 2.0 if it is long),
// padded so that data starts on a 64-byte boundary. The bytes are identical
// to what numpy (1.24) writes for the same dtype and shape, including its
// spare spaces for growing the first axis.
std::string MakeNpyHeader(DType dtype, absl::Span<const int64_t> shape);

// A read-only .npy file mapped into memory. The data pointer stays valid for
// the object's lifetime. With Pages::kOnDemand pages are loaded as they are
// touched, so a multi-GB file costs no memory until read; kWholeRead is for a
// caller that reads all of it, and maps every page at once where that is
// cheaper (WholeReadMapFlags in core/io/whole_read.h). Open() rejects files
// whose size does not match the header exactly (truncated, or trailing
// bytes). The file must not be truncated in place while mapped (replacing it
// by rename, as WriteFileAtomic does, is safe). If the data offset is not a
// multiple of the element size (never the case for numpy-written files) the
// data is copied into anonymous memory so that typed access stays aligned.
class MappedNpy {
 public:
  enum class Pages { kOnDemand, kWholeRead };
  static absl::StatusOr<std::unique_ptr<MappedNpy>> Open(const std::string& path,
                                                         Pages pages = Pages::kOnDemand);
  ~MappedNpy();
  MappedNpy(const MappedNpy&) = delete;
  MappedNpy& operator=(const MappedNpy&) = delete;

  const NpyHeader& header() const { return header_; }
  const void* data() const { return data_; }
  const std::string& path() const { return path_; }
  // Typed access; FailedPrecondition if the dtype differs.
  absl::StatusOr<absl::Span<const float>> AsFloat32() const;

  // For a reader going through the data once, front to back: the whole
  // pages before `end` (a pointer into data()) are unmapped from this process
  // now, a little at a time, instead of all at once by the destructor, which
  // for a file of gigabytes takes a tenth of a second or more. Reading them
  // again still works: they come back from the file (or the page cache). A
  // no-op when the data was copied (an unaligned file). Not thread-safe.
  void DropPagesBefore(const void* end);

 private:
  MappedNpy() = default;
  std::string path_;
  NpyHeader header_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  const void* data_ = nullptr;
  bool file_backed_ = true;  // false for the aligned copy
  size_t dropped_ = 0;       // bytes at the start of map_ already dropped
};

// Whole-file reads that convert to the requested element type. Integer
// arrays read as float are rejected (and vice versa) unless noted.
struct NpyArrayF32 { std::vector<int64_t> shape; std::vector<float> data; };
struct NpyArrayF64 { std::vector<int64_t> shape; std::vector<double> data; };
struct NpyArrayI64 { std::vector<int64_t> shape; std::vector<int64_t> data; };
// float32 or float64 file -> float32 (float64 values are rounded; a finite
// value beyond float32's range is an InvalidArgument error naming its
// position, while NaN and infinities are passed through).
absl::StatusOr<NpyArrayF32> ReadNpyFloat32(const std::string& path);
absl::StatusOr<NpyArrayF64> ReadNpyFloat64(const std::string& path);
// int32 or int64 file -> int64.
absl::StatusOr<NpyArrayI64> ReadNpyInt(const std::string& path);
// The same conversions from a file already open (e.g. to check its shape
// before copying it); errors name npy.path().
absl::StatusOr<NpyArrayF32> ToFloat32(const MappedNpy& npy);
absl::StatusOr<NpyArrayF64> ToFloat64(const MappedNpy& npy);
absl::StatusOr<NpyArrayI64> ToInt64(const MappedNpy& npy);

// Atomic writes (temp file + fsync + rename, see io/atomic_file.h). `shape`
// must have 1 or 2 non-negative entries whose product is data.size().
absl::Status WriteNpy(const std::string& path, absl::Span<const float> data,
                      absl::Span<const int64_t> shape);
absl::Status WriteNpy(const std::string& path, absl::Span<const double> data,
                      absl::Span<const int64_t> shape);
absl::Status WriteNpy(const std::string& path, absl::Span<const int32_t> data,
                      absl::Span<const int64_t> shape);
absl::Status WriteNpy(const std::string& path, absl::Span<const int64_t> data,
                      absl::Span<const int64_t> shape);

}  // namespace dendro

#endif  // DENDRO_CORE_IO_NPY_H_
