// Class labels from .npy/.npz (numbers or strings) and text files.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/input/internal.h"
#include "core/input/matrix_file.h"

namespace dendro {
namespace {

using input_internal::Mapping;
using input_internal::NpyView;

// A float label must be a whole number in int64's range.
absl::Status WholeNumber(double v, int64_t row, const std::string& name, int64_t* out) {
  if (!std::isfinite(v) || v != std::floor(v) || std::fabs(v) >= 9.2e18) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": label ", v, " at row ", row,
        " is not a whole number; labels are integers, whole-valued floats or strings"));
  }
  *out = static_cast<int64_t>(v);
  return absl::OkStatus();
}

// UTF-32 code point to UTF-8 (invalid code points become U+FFFD).
void AppendUtf8(uint32_t c, std::string* out) {
  if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) c = 0xFFFD;
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

absl::StatusOr<LabelColumn> LabelsFromNpy(const NpyView& view, const std::string& name) {
  const NpyLayout& l = view.layout;
  if (l.shape.size() == 2 && l.cols() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": labels must be one column, got a ",
                                                   l.rows(), " x ", l.cols(), " array"));
  }
  const int64_t n = l.rows();
  const NpyElementType& e = l.element;
  const bool swap = e.big_endian;
  const char* d = view.data;
  using K = NpyElementType::Kind;
  if (e.kind == K::kUnicode || e.kind == K::kBytes) {
    std::vector<std::string> values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const char* p = d + i * e.size;
      std::string& s = values[i];
      if (e.kind == K::kBytes) {
        s.assign(p, strnlen(p, static_cast<size_t>(e.size)));
      } else {
        for (int j = 0; j < e.size / 4; ++j) {
          const uint32_t c = input_internal::LoadElement<uint32_t>(p + 4 * j, swap);
          if (c == 0) break;
          AppendUtf8(c, &s);
        }
      }
    }
    return LabelsFromStrings(values, name);
  }
  LabelColumn out;
  out.ids.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const char* p = d + i * e.size;
    int64_t& id = out.ids[i];
    switch (e.kind) {
      case K::kBool:
        id = *p != 0 ? 1 : 0;
        break;
      case K::kSignedInt:
        if (e.size == 1) id = input_internal::LoadElement<int8_t>(p, swap);
        if (e.size == 2) id = input_internal::LoadElement<int16_t>(p, swap);
        if (e.size == 4) id = input_internal::LoadElement<int32_t>(p, swap);
        if (e.size == 8) id = input_internal::LoadElement<int64_t>(p, swap);
        break;
      case K::kUnsignedInt: {
        uint64_t u = 0;
        if (e.size == 1) u = input_internal::LoadElement<uint8_t>(p, swap);
        if (e.size == 2) u = input_internal::LoadElement<uint16_t>(p, swap);
        if (e.size == 4) u = input_internal::LoadElement<uint32_t>(p, swap);
        if (e.size == 8) u = input_internal::LoadElement<uint64_t>(p, swap);
        if (u > static_cast<uint64_t>(INT64_MAX)) {
          return absl::InvalidArgumentError(
              absl::StrCat(name, ": label ", u, " at row ", i, " is beyond int64's range"));
        }
        id = static_cast<int64_t>(u);
        break;
      }
      case K::kFloat: {
        double v = 0;
        if (e.size == 2)
          v = static_cast<float>(
              Eigen::numext::bit_cast<Eigen::half>(input_internal::LoadElement<uint16_t>(p, swap)));
        if (e.size == 4) v = input_internal::LoadElement<float>(p, swap);
        if (e.size == 8) v = input_internal::LoadElement<double>(p, swap);
        DENDRO_RETURN_IF_ERROR(WholeNumber(v, i, name, &id));
        break;
      }
      case K::kUnicode:
      case K::kBytes:
        break;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<LabelColumn> LabelsFromStrings(const std::vector<std::string>& values,
                                              const std::string& source) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": the label at row ", i, " is empty"));
    }
  }
  std::vector<std::string> names = values;
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  absl::flat_hash_map<std::string, int64_t> id_of;
  id_of.reserve(names.size());
  for (size_t i = 0; i < names.size(); ++i) id_of.emplace(names[i], static_cast<int64_t>(i));
  LabelColumn out;
  out.ids.reserve(values.size());
  for (const std::string& v : values) out.ids.push_back(id_of.at(v));
  out.names = std::move(names);
  return out;
}

absl::StatusOr<LabelColumn> ReadLabelFile(const std::string& path,
                                          const InputFileOptions& options) {
  DENDRO_ASSIGN_OR_RETURN(std::unique_ptr<Mapping> file, Mapping::OfFile(path));
  DENDRO_ASSIGN_OR_RETURN(input_internal::FileFormat format,
                          input_internal::DetectFormat(path, file->bytes().substr(0, 8)));
  using input_internal::FileFormat;
  if (format != FileFormat::kNpz && !options.npz_key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": a key (--key) applies to .npz archives only"));
  }
  if (format == FileFormat::kNpy) {
    DENDRO_ASSIGN_OR_RETURN(NpyView view, input_internal::ViewNpy(*file, path));
    return LabelsFromNpy(view, path);
  }
  if (format == FileFormat::kNpz) {
    file.reset();
    std::string member;
    DENDRO_ASSIGN_OR_RETURN(std::unique_ptr<Mapping> unpacked,
                            input_internal::MapNpzMember(path, options.npz_key, &member));
    const std::string name = absl::StrCat(path, "['", member, "']");
    DENDRO_ASSIGN_OR_RETURN(NpyView view, input_internal::ViewNpy(*unpacked, name));
    return LabelsFromNpy(view, name);
  }
  file.reset();
  DENDRO_ASSIGN_OR_RETURN(input_internal::TextTable table, input_internal::ReadTextFields(path));
  if (table.cols != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": labels must be one column, one label per line; the first line has ",
                     table.cols, " fields"));
  }
  std::vector<std::string> values;
  values.reserve(table.rows.size());
  for (auto& row : table.rows) values.push_back(std::move(row[0]));
  // All numbers, or all numbers after a header line: integer labels.
  auto numeric_from = [&](size_t first) {
    double v;
    for (size_t i = first; i < values.size(); ++i) {
      if (!input_internal::ParseNumber(values[i], &v)) return false;
    }
    return first < values.size();
  };
  size_t first = 0;
  if (!numeric_from(0) && numeric_from(1)) first = 1;  // a header line
  if (numeric_from(first)) {
    LabelColumn out;
    for (size_t i = first; i < values.size(); ++i) {
      double v = 0;
      input_internal::ParseNumber(values[i], &v);
      int64_t id;
      DENDRO_RETURN_IF_ERROR(WholeNumber(v, static_cast<int64_t>(i - first), path, &id));
      out.ids.push_back(id);
    }
    return out;
  }
  if (values.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no labels"));
  return LabelsFromStrings(values, path);
}

}  // namespace dendro
