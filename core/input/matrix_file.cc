#include "core/input/matrix_file.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <Eigen/Core>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/input/internal.h"
#include "core/io/posix_error.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "core/input assumes a little-endian host"
#endif

namespace dendro {
namespace input_internal {

using io_internal::OpenForReading;
using io_internal::PosixError;

absl::StatusOr<std::unique_ptr<Mapping>> Mapping::OfDescriptor(int fd, size_t size,
                                                               const std::string& name) {
  std::unique_ptr<Mapping> m(new Mapping());
  m->size_ = size;
  if (size == 0) return m;
  void* base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (base == MAP_FAILED) return PosixError(name, "mmap", errno);
  m->base_ = base;
  return m;
}

absl::StatusOr<std::unique_ptr<Mapping>> Mapping::OfFile(const std::string& path) {
  struct stat st;
  DENDRO_ASSIGN_OR_RETURN(const int fd, OpenForReading(path, &st));
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, S_ISDIR(st.st_mode) ? ": is a directory" : ": is not a regular file",
                     ", not a data file"));
  }
  if (st.st_size == 0) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": the file is empty"));
  }
  absl::StatusOr<std::unique_ptr<Mapping>> m =
      OfDescriptor(fd, static_cast<size_t>(st.st_size), path);
  ::close(fd);
  return m;
}

Mapping::~Mapping() {
  if (base_ != nullptr) ::munmap(base_, size_);
}

void Mapping::DropBefore(size_t offset) {
  if (base_ == nullptr) return;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t limit = std::min(offset, size_) / page * page;
  if (limit <= dropped_) return;
  ::madvise(static_cast<char*>(base_) + dropped_, limit - dropped_, MADV_DONTNEED);
  dropped_ = limit;
}

std::string Extension(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  return absl::AsciiStrToLower(path.substr(dot + 1));
}

absl::StatusOr<FileFormat> DetectFormat(const std::string& path, std::string_view head) {
  if (head.substr(0, 6) == std::string_view("\x93NUMPY", 6)) return FileFormat::kNpy;
  if (head.substr(0, 4) == std::string_view("PK\x03\x04", 4) ||
      head.substr(0, 4) == std::string_view("PK\x05\x06", 4)) {
    return FileFormat::kNpz;
  }
  const std::string ext = Extension(path);
  if (ext == "csv" || ext == "tsv" || ext == "txt") return FileFormat::kText;
  if (ext == "npy") {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": not a .npy file (it does not start with numpy's magic \"\\x93NUMPY\"); "
                     "write it with numpy.save"));
  }
  if (ext == "npz") {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a .npz file (not a zip archive); write it with numpy.savez"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": unrecognised format", ext.empty() ? "" : absl::StrCat(" '.", ext, "'"),
                   "; Dendro reads .npy, .npz, .csv, .tsv and .txt files"));
}

absl::StatusOr<NpyView> ViewNpy(const Mapping& mapping, const std::string& name) {
  absl::StatusOr<NpyLayout> layout = ParseNpyLayout(mapping.bytes());
  if (!layout.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", layout.status().message()));
  }
  const size_t have = mapping.size() - layout->data_offset;
  const size_t want = static_cast<size_t>(layout->num_bytes());
  if (have != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, have < want ? ": truncated" : ": corrupt", ": the header says ", layout->rows(),
        layout->shape.size() == 2 ? absl::StrCat(" x ", layout->cols()) : "", " ",
        layout->element.Name(), " (", want, " bytes) but ", have, " data bytes follow"));
  }
  NpyView view;
  view.data = mapping.data() + layout->data_offset;
  view.layout = *std::move(layout);
  return view;
}

bool ParseNumber(std::string_view field, double* out) {
  absl::string_view f(field.data(), field.size());
  f = absl::StripAsciiWhitespace(f);
  if (f.size() >= 2 && f.front() == '"' && f.back() == '"') f = f.substr(1, f.size() - 2);
  if (f.empty()) return false;
  return absl::SimpleAtod(f, out);
}

}  // namespace input_internal

namespace {

using input_internal::FileFormat;
using input_internal::Mapping;
using input_internal::NpyView;

template <typename T>
inline float ToFloat(T v) {
  return static_cast<float>(v);
}
template <>
inline float ToFloat<Eigen::half>(Eigen::half v) {
  return static_cast<float>(v);
}

// Converts rows [begin, end) of a rows x cols array of T (C or Fortran
// order, possibly byte-swapped) into row-major float32.
template <typename T>
absl::Status ConvertRows(const char* data, int64_t rows, int64_t cols, bool fortran, bool swap,
                         int64_t begin, int64_t end, float* out, const std::string& name) {
  constexpr size_t kSize = sizeof(T);
  auto store = [&](int64_t r, int64_t c, const char* p) -> absl::Status {
    float f;
    if constexpr (std::is_same_v<T, bool>) {
      f = *p != 0 ? 1.0f : 0.0f;
    } else {
      const T v = input_internal::LoadElement<T>(p, swap);
      f = ToFloat(v);
      if constexpr (std::is_same_v<T, double>) {
        if (std::isfinite(v) && !std::isfinite(f)) {
          return absl::InvalidArgumentError(absl::StrCat(
              name, ": value ", v, " at row ", r, ", column ", c, " is outside the float32 range"));
        }
      }
    }
    out[(r - begin) * cols + c] = f;
    return absl::OkStatus();
  };
  if (!fortran) {
    const char* p = data + static_cast<size_t>(begin * cols) * kSize;
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t c = 0; c < cols; ++c, p += kSize) {
        if constexpr (std::is_same_v<T, double>) {
          if (absl::Status s = store(r, c, p); !s.ok()) return s;
        } else {
          store(r, c, p).IgnoreError();
        }
      }
    }
    return absl::OkStatus();
  }
  for (int64_t c = 0; c < cols; ++c) {
    const char* p = data + static_cast<size_t>(c * rows + begin) * kSize;
    for (int64_t r = begin; r < end; ++r, p += kSize) {
      if constexpr (std::is_same_v<T, double>) {
        if (absl::Status s = store(r, c, p); !s.ok()) return s;
      } else {
        store(r, c, p).IgnoreError();
      }
    }
  }
  return absl::OkStatus();
}

class NpyMatrixFile final : public MatrixFile {
 public:
  NpyMatrixFile(std::string path, std::unique_ptr<Mapping> mapping, NpyView view,
                std::string description)
      : mapping_(std::move(mapping)), view_(std::move(view)) {
    path_ = std::move(path);
    rows_ = view_.layout.rows();
    cols_ = view_.layout.cols();
    description_ = std::move(description);
    const NpyElementType& e = view_.layout.element;
    zero_copy_ = e.kind == NpyElementType::Kind::kFloat && e.size == 4 && !e.big_endian &&
                 (!view_.layout.fortran_order || cols_ == 1 || rows_ <= 1) &&
                 reinterpret_cast<uintptr_t>(view_.data) % alignof(float) == 0;
  }

  const float* Float32Rows(int64_t begin, int64_t) override {
    if (!zero_copy_) return nullptr;
    return reinterpret_cast<const float*>(view_.data) + begin * cols_;
  }

  absl::Status ReadRows(int64_t begin, int64_t end, float* out) override {
    const NpyLayout& l = view_.layout;
    const NpyElementType& e = l.element;
    const bool f = l.fortran_order;
    const bool s = e.big_endian;
    const char* d = view_.data;
    using K = NpyElementType::Kind;
    switch (e.kind) {
      case K::kFloat:
        if (e.size == 2)
          return ConvertRows<Eigen::half>(d, rows_, cols_, f, s, begin, end, out, path_);
        if (e.size == 4) return ConvertRows<float>(d, rows_, cols_, f, s, begin, end, out, path_);
        return ConvertRows<double>(d, rows_, cols_, f, s, begin, end, out, path_);
      case K::kSignedInt:
        if (e.size == 1) return ConvertRows<int8_t>(d, rows_, cols_, f, s, begin, end, out, path_);
        if (e.size == 2) return ConvertRows<int16_t>(d, rows_, cols_, f, s, begin, end, out, path_);
        if (e.size == 4) return ConvertRows<int32_t>(d, rows_, cols_, f, s, begin, end, out, path_);
        return ConvertRows<int64_t>(d, rows_, cols_, f, s, begin, end, out, path_);
      case K::kUnsignedInt:
        if (e.size == 1) return ConvertRows<uint8_t>(d, rows_, cols_, f, s, begin, end, out, path_);
        if (e.size == 2)
          return ConvertRows<uint16_t>(d, rows_, cols_, f, s, begin, end, out, path_);
        if (e.size == 4)
          return ConvertRows<uint32_t>(d, rows_, cols_, f, s, begin, end, out, path_);
        return ConvertRows<uint64_t>(d, rows_, cols_, f, s, begin, end, out, path_);
      case K::kBool:
        return ConvertRows<bool>(d, rows_, cols_, f, s, begin, end, out, path_);
      case K::kUnicode:
      case K::kBytes:
        break;  // refused at Open
    }
    return absl::InternalError(absl::StrCat(path_, ": no conversion for ", e.Name()));
  }

  void ReleaseRowsBefore(int64_t row) override {
    if (view_.layout.fortran_order) return;  // every column's pages are still ahead
    const size_t offset = static_cast<size_t>(view_.data - mapping_->data()) +
                          static_cast<size_t>(row * cols_) * view_.layout.element.size;
    mapping_->DropBefore(offset);
  }

 private:
  std::unique_ptr<Mapping> mapping_;
  NpyView view_;
  bool zero_copy_ = false;
};

class TextMatrixFile final : public MatrixFile {
 public:
  TextMatrixFile(std::string path, input_internal::TextTable table)
      : values_(std::move(table.values)) {
    path_ = std::move(path);
    rows_ = table.num_rows;
    cols_ = table.cols;
    column_names_ = std::move(table.header);
    description_ = input_internal::Extension(path_) == "tsv" ? "tsv" : "csv";
  }
  const float* Float32Rows(int64_t begin, int64_t) override {
    return values_.data() + begin * cols_;
  }
  absl::Status ReadRows(int64_t begin, int64_t end, float* out) override {
    std::copy(values_.begin() + begin * cols_, values_.begin() + end * cols_, out);
    return absl::OkStatus();
  }

 private:
  std::vector<float> values_;
};

absl::StatusOr<std::unique_ptr<MatrixFile>> OpenNpy(const std::string& path,
                                                    std::unique_ptr<Mapping> mapping,
                                                    const std::string& name,
                                                    std::string_view container) {
  DENDRO_ASSIGN_OR_RETURN(NpyView view, input_internal::ViewNpy(*mapping, name));
  const NpyLayout& l = view.layout;
  using K = NpyElementType::Kind;
  if (l.element.kind == K::kUnicode || l.element.kind == K::kBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": holds strings (", l.element.Name(),
                     "), not numbers; only labels may be strings (pass them as labels)"));
  }
  if (l.shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": expected a 2-D array (rows x columns), got a 1-D array of ", l.rows(),
                     " values; for one column use x.reshape(-1, 1)"));
  }
  if (l.rows() < 1 || l.cols() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": the array is empty (", l.rows(), " x ", l.cols(), ")"));
  }
  std::string description = absl::StrCat(l.element.Name(), " ", std::string(container),
                                         l.fortran_order ? " (Fortran order)" : "");
  return std::unique_ptr<MatrixFile>(
      new NpyMatrixFile(path, std::move(mapping), std::move(view), std::move(description)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<MatrixFile>> MatrixFile::Open(const std::string& path,
                                                             const InputFileOptions& options) {
  DENDRO_ASSIGN_OR_RETURN(std::unique_ptr<Mapping> file, Mapping::OfFile(path));
  DENDRO_ASSIGN_OR_RETURN(FileFormat format,
                          input_internal::DetectFormat(path, file->bytes().substr(0, 8)));
  switch (format) {
    case FileFormat::kNpy:
      if (!options.npz_key.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": is a .npy file; a key (--key) applies to .npz archives only"));
      }
      return OpenNpy(path, std::move(file), path, ".npy");
    case FileFormat::kNpz: {
      file.reset();
      std::string member;
      DENDRO_ASSIGN_OR_RETURN(std::unique_ptr<Mapping> unpacked,
                              input_internal::MapNpzMember(path, options.npz_key, &member));
      return OpenNpy(path, std::move(unpacked), absl::StrCat(path, "['", member, "']"),
                     absl::StrCat(".npz member '", member, "'"));
    }
    case FileFormat::kText: {
      file.reset();
      if (!options.npz_key.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": is a text file; a key (--key) applies to .npz archives only"));
      }
      DENDRO_ASSIGN_OR_RETURN(input_internal::TextTable table,
                              input_internal::ReadNumericText(path));
      return std::unique_ptr<MatrixFile>(new TextMatrixFile(path, std::move(table)));
    }
  }
  return absl::InternalError("unreachable");
}

}  // namespace dendro
