// Delimited text: .csv, .tsv and .txt tables of numbers, and label lists.
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/input/internal.h"

namespace dendro {
namespace input_internal {
namespace {

enum class Split { kComma, kTab, kWhitespace, kWholeLine };

std::string_view Trim(std::string_view s) {
  const absl::string_view t = absl::StripAsciiWhitespace(absl::string_view(s.data(), s.size()));
  return {t.data(), t.size()};
}

void SplitLine(std::string_view line, Split split, std::vector<std::string_view>* fields) {
  fields->clear();
  if (split == Split::kWholeLine) {
    fields->push_back(Trim(line));
    return;
  }
  if (split == Split::kWhitespace) {
    size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
      const size_t start = i;
      while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') ++i;
      if (i > start) fields->push_back(line.substr(start, i - start));
    }
    return;
  }
  const char sep = split == Split::kComma ? ',' : '\t';
  size_t start = 0;
  while (true) {
    const size_t at = line.find(sep, start);
    fields->push_back(Trim(line.substr(start, at == std::string_view::npos ? at : at - start)));
    if (at == std::string_view::npos) break;
    start = at + 1;
  }
}

// Calls `fn(line_number, line)` for each line that is not blank; stops at
// the first error.
template <typename Fn>
absl::Status ForEachLine(const Mapping& file, Fn fn) {
  std::string_view text = file.bytes();
  int64_t number = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    ++number;
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (Trim(line).empty()) continue;
    DENDRO_RETURN_IF_ERROR(fn(number, line, pos));
  }
  return absl::OkStatus();
}

Split ChooseSplit(const std::string& path, const Mapping& file, bool labels) {
  const std::string ext = Extension(path);
  if (ext == "csv") return Split::kComma;
  if (ext == "tsv") return Split::kTab;
  if (labels) return Split::kWholeLine;
  std::string_view text = file.bytes();
  const std::string_view first = text.substr(0, text.find('\n'));
  if (first.find('\t') != std::string_view::npos) return Split::kTab;
  if (first.find(',') != std::string_view::npos) return Split::kComma;
  return Split::kWhitespace;
}

std::string Shown(std::string_view field) {
  constexpr size_t kMax = 40;
  std::string s = absl::CHexEscape(absl::string_view(field.data(), std::min(field.size(), kMax)));
  return field.size() > kMax ? s + "..." : s;
}

}  // namespace

absl::StatusOr<TextTable> ReadNumericText(const std::string& path) {
  DENDRO_ASSIGN_OR_RETURN(std::unique_ptr<Mapping> file, Mapping::OfFile(path));
  const Split split = ChooseSplit(path, *file, /*labels=*/false);
  TextTable table;
  std::vector<std::string_view> fields;
  bool first = true;
  DENDRO_RETURN_IF_ERROR(
      ForEachLine(*file, [&](int64_t number, std::string_view line, size_t next) -> absl::Status {
        SplitLine(line, split, &fields);
        if (first) {
          first = false;
          table.cols = static_cast<int64_t>(fields.size());
          bool numeric = true;
          double v;
          for (std::string_view f : fields) numeric = numeric && ParseNumber(f, &v);
          if (!numeric) {
            for (std::string_view f : fields) table.header.emplace_back(f);
            return absl::OkStatus();
          }
        }
        if (static_cast<int64_t>(fields.size()) != table.cols) {
          return absl::InvalidArgumentError(
              absl::StrCat(path, ": line ", number, " has ", fields.size(), " fields, the ",
                           table.header.empty() ? "first line" : "header", " has ", table.cols,
                           "; every row needs the same number of columns"));
        }
        for (size_t c = 0; c < fields.size(); ++c) {
          double v;
          if (!ParseNumber(fields[c], &v)) {
            return absl::InvalidArgumentError(
                absl::StrCat(path, ": line ", number, ", column ", c,
                             Trim(fields[c]).empty()
                                 ? " is empty (a missing value)"
                                 : absl::StrCat(": '", Shown(fields[c]), "' is not a number"),
                             "; Dendro reads numeric tables only"));
          }
          const float f = static_cast<float>(v);
          if (std::isfinite(v) && !std::isfinite(f)) {
            return absl::InvalidArgumentError(absl::StrCat(
                path, ": line ", number, ", column ", c, ": ", v, " is outside the float32 range"));
          }
          table.values.push_back(f);
        }
        ++table.num_rows;
        file->DropBefore(next);
        return absl::OkStatus();
      }));
  if (table.num_rows == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, table.header.empty() ? ": no rows" : ": a header line but no rows of numbers"));
  }
  table.values.shrink_to_fit();
  return table;
}

absl::StatusOr<TextTable> ReadTextFields(const std::string& path) {
  DENDRO_ASSIGN_OR_RETURN(std::unique_ptr<Mapping> file, Mapping::OfFile(path));
  const Split split = ChooseSplit(path, *file, /*labels=*/true);
  TextTable table;
  std::vector<std::string_view> fields;
  DENDRO_RETURN_IF_ERROR(
      ForEachLine(*file, [&](int64_t number, std::string_view line, size_t) -> absl::Status {
        SplitLine(line, split, &fields);
        if (table.rows.empty()) table.cols = static_cast<int64_t>(fields.size());
        if (static_cast<int64_t>(fields.size()) != table.cols) {
          return absl::InvalidArgumentError(
              absl::StrCat(path, ": line ", number, " has ", fields.size(),
                           " fields, the first line has ", table.cols));
        }
        std::vector<std::string> row;
        for (std::string_view f : fields) {
          if (f.size() >= 2 && f.front() == '"' && f.back() == '"') f = f.substr(1, f.size() - 2);
          row.emplace_back(f);
        }
        table.rows.push_back(std::move(row));
        ++table.num_rows;
        return absl::OkStatus();
      }));
  return table;
}

}  // namespace input_internal
}  // namespace dendro
