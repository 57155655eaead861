// The text rules for names callers choose: model names and labels (a small
// ASCII alphabet, since they become directory names and URL segments) and
// dataset display names (free text, bounded and printable, since every
// ListDatasets answer carries them). Messages quote an offending character
// whole, so a caller sees 'é' (U+00E9), never one byte of it.
#ifndef DENDRO_SERVER_BASE_NAMES_H_
#define DENDRO_SERVER_BASE_NAMES_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace dendro::server {

// Longest display name accepted, in bytes of UTF-8.
inline constexpr size_t kMaxDisplayNameBytes = 256;

// The character that starts at byte `i` of `text`, quoted for a message:
// 'a' for printable ASCII, 'é' (U+00E9) for other valid UTF-8, U+0000 for
// control characters, and "byte 0xC3" where the UTF-8 is broken. `*length`
// (optional) receives the bytes it spans (>= 1).
std::string DescribeCharacter(std::string_view text, size_t i, size_t* length = nullptr);

// Valid UTF-8 without control characters (C0, DEL, C1), at most
// kMaxDisplayNameBytes bytes; empty is allowed. InvalidArgument naming
// `field`, the limit or the first offending character.
absl::Status ValidateDisplayName(std::string_view field, std::string_view name);

}  // namespace dendro::server

#endif  // DENDRO_SERVER_BASE_NAMES_H_
