// Internal to core/input: the pieces matrix_file.cc and labels.cc share.
#ifndef DENDRO_CORE_INPUT_INTERNAL_H_
#define DENDRO_CORE_INPUT_INTERNAL_H_

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/input/matrix_file.h"
#include "core/io/npy.h"

namespace dendro {
namespace input_internal {

// A read-only private mapping of a whole file (or of an unlinked temporary
// file holding an unpacked .npz member). Unmapped on destruction.
class Mapping {
 public:
  // Maps `fd` (size bytes; the caller keeps ownership of fd). `name` is
  // used in messages.
  static absl::StatusOr<std::unique_ptr<Mapping>> OfDescriptor(int fd, size_t size,
                                                               const std::string& name);
  static absl::StatusOr<std::unique_ptr<Mapping>> OfFile(const std::string& path);
  ~Mapping();
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  const char* data() const { return static_cast<const char*>(base_); }
  size_t size() const { return size_; }
  std::string_view bytes() const { return {data(), size_}; }
  // Releases the whole pages before data() + offset (they are read again
  // from the file if touched).
  void DropBefore(size_t offset);

 private:
  Mapping() = default;
  void* base_ = nullptr;
  size_t size_ = 0;
  size_t dropped_ = 0;
};

enum class FileFormat { kNpy, kNpz, kText };
// From the first bytes, else the extension. InvalidArgument for a file
// that is none of them.
absl::StatusOr<FileFormat> DetectFormat(const std::string& path, std::string_view head);

// The .npy inside a mapping, with its layout checked against the size.
struct NpyView {
  NpyLayout layout;
  const char* data = nullptr;  // layout.num_bytes() bytes
};
absl::StatusOr<NpyView> ViewNpy(const Mapping& mapping, const std::string& name);

// Unpacks one member of a .npz archive into an unlinked temporary file and
// maps it. *member receives the array's key (the member name without
// ".npy").
absl::StatusOr<std::unique_ptr<Mapping>> MapNpzMember(const std::string& path,
                                                      const std::string& key, std::string* member);

// A delimited text file as fields. Lines that are blank are skipped;
// `line_numbers[i]` is the 1-based line of row i (header excluded).
struct TextTable {
  std::vector<std::string> header;  // empty if none was detected
  int64_t cols = 0;
  std::vector<std::vector<std::string>> rows;  // only when keep_fields
  std::vector<float> values;                   // rows x cols, when numeric
  int64_t num_rows = 0;
};
// Reads a numeric table (values filled, fields not kept).
absl::StatusOr<TextTable> ReadNumericText(const std::string& path);
// Reads every line's fields as text (for labels).
absl::StatusOr<TextTable> ReadTextFields(const std::string& path);

// The element at `p` as T, byte-swapped when `swap` (a big-endian file).
template <typename T>
T LoadElement(const char* p, bool swap) {
  char b[sizeof(T)];
  std::memcpy(b, p, sizeof(T));
  if (swap) std::reverse(b, b + sizeof(T));
  T v;
  std::memcpy(&v, b, sizeof(T));
  return v;
}

// "a.npy" -> "npy"; lower case; "" without an extension.
std::string Extension(const std::string& path);
// Parses a whole field as a double (surrounding spaces allowed).
bool ParseNumber(std::string_view field, double* out);

}  // namespace input_internal
}  // namespace dendro

#endif  // DENDRO_CORE_INPUT_INTERNAL_H_
