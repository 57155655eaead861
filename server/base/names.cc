#include "server/base/names.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dendro::server {
namespace {

// The code point of the UTF-8 sequence at `i`, or -1 if it is malformed
// (bad lead or continuation byte, overlong form, surrogate, > U+10FFFF).
int32_t DecodeAt(std::string_view s, size_t i, size_t* length) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b0 = byte(i);
  *length = 1;
  if (b0 < 0x80) return b0;
  size_t n;
  int32_t cp;
  if ((b0 & 0xE0) == 0xC0) {
    n = 2, cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3, cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4, cp = b0 & 0x07;
  } else {
    return -1;
  }
  if (i + n > s.size()) return -1;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return -1;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  constexpr int32_t kMinOf[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMinOf[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
  *length = n;
  return cp;
}

bool IsControl(int32_t cp) { return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F); }

}  // namespace

std::string DescribeCharacter(std::string_view text, size_t i, size_t* length) {
  size_t n = 1;
  const int32_t cp = DecodeAt(text, i, &n);
  if (length != nullptr) *length = n;
  if (cp < 0) return absl::StrFormat("byte 0x%02X (not UTF-8)", static_cast<uint8_t>(text[i]));
  if (IsControl(cp)) return absl::StrFormat("U+%04X", cp);
  if (cp < 0x80) return absl::StrCat("'", std::string(text.substr(i, 1)), "'");
  return absl::StrFormat("'%s' (U+%04X)", std::string(text.substr(i, n)), cp);
}

absl::Status ValidateDisplayName(std::string_view field, std::string_view name) {
  if (name.size() > kMaxDisplayNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(field), " must be at most ",
                                                   kMaxDisplayNameBytes, " bytes, got ",
                                                   name.size()));
  }
  for (size_t i = 0; i < name.size();) {
    size_t n = 1;
    const int32_t cp = DecodeAt(name, i, &n);
    if (cp < 0 || IsControl(cp)) {
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(field), " must be printable UTF-8; byte ", i, " is ",
                       DescribeCharacter(name, i)));
    }
    i += n;
  }
  return absl::OkStatus();
}

}  // namespace dendro::server
