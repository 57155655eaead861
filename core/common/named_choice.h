// A closed set of named choices (an enum with a name for each value, as on
// the wire and the command line), kept as one table per enum so that printing
// a value and parsing a name cannot drift apart:
//
//   inline constexpr NamedChoice<Link> kLinks[] = {{Link::kA, "a"}, {Link::kB, "b"}};
//   ChoiceName(kLinks, Link::kB)          -> "b"
//   ParseChoice(kLinks, "link", "c")      -> InvalidArgument
//                                            "link must be a or b, got 'c'"
//
// Invariants: each value and each name appears once in its table, names are
// the canonical lower-case spellings, and ParseChoice accepts exactly them
// (no case folding, no trimming). The table's first entry is the value
// ChoiceName falls back to for a value not in the table (a corrupt enum).
// Header-only and free of any method, so a caller that only parses or prints
// names (the CLI) links no method library.
#ifndef DENDRO_CORE_COMMON_NAMED_CHOICE_H_
#define DENDRO_CORE_COMMON_NAMED_CHOICE_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace dendro {

template <typename E>
struct NamedChoice {
  E value;
  std::string_view name;
};

// The canonical name of `value`.
template <typename E, std::size_t N>
constexpr std::string_view ChoiceName(const NamedChoice<E> (&choices)[N], E value) {
  for (const NamedChoice<E>& c : choices) {
    if (c.value == value) return c.name;
  }
  return choices[0].name;
}

// "a", "a or b", "a, b or c": the names in table order.
template <typename E, std::size_t N>
std::string ChoiceNames(const NamedChoice<E> (&choices)[N]) {
  std::string out;
  for (std::size_t i = 0; i < N; ++i) {
    if (i > 0) out += (i + 1 == N) ? " or " : ", ";
    out += choices[i].name;
  }
  return out;
}

// The value named `name`; InvalidArgument "<what> must be <names>, got '<name>'"
// otherwise.
template <typename E, std::size_t N>
absl::StatusOr<E> ParseChoice(const NamedChoice<E> (&choices)[N], std::string_view what,
                              std::string_view name) {
  for (const NamedChoice<E>& c : choices) {
    if (c.name == name) return c.value;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      std::string(what), " must be ", ChoiceNames(choices), ", got '", std::string(name), "'"));
}

}  // namespace dendro

#endif  // DENDRO_CORE_COMMON_NAMED_CHOICE_H_
