// L2H's aggregation choice (eq. 1) and its names on the wire and the command
// line ("sum_of_means", "mean_of_means", "sum_of_sums"). Header-only, so a
// caller that only parses or prints the name (the CLI) needs no L2H library.
// ParseL2hAggregation accepts exactly those names and answers InvalidArgument
// listing them otherwise (core/common/named_choice.h).
#ifndef DENDRO_CORE_L2H_AGGREGATION_H_
#define DENDRO_CORE_L2H_AGGREGATION_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "core/common/named_choice.h"

namespace dendro {

// The aggregation Λ of eq. 1 (the paper's Table 7 rows).
enum class L2hAggregation {
  // sum_{c in G} sum_{x in D^c} g(x)
  kSumOfSums,
  // 1/|G| sum_{c in G} mean_{x in D^c} g(x)
  kMeanOfMeans,
  // sum_{c in G} mean_{x in D^c} g(x)  -- the paper's choice and the default
  kSumOfMeans,
};

// In the order the CLI's help lists them; the paper's choice first.
inline constexpr NamedChoice<L2hAggregation> kL2hAggregations[] = {
    {L2hAggregation::kSumOfMeans, "sum_of_means"},
    {L2hAggregation::kMeanOfMeans, "mean_of_means"},
    {L2hAggregation::kSumOfSums, "sum_of_sums"},
};

inline std::string_view L2hAggregationName(L2hAggregation a) {
  return ChoiceName(kL2hAggregations, a);
}

inline absl::StatusOr<L2hAggregation> ParseL2hAggregation(std::string_view name) {
  return ParseChoice(kL2hAggregations, "aggregation", name);
}

}  // namespace dendro

#endif  // DENDRO_CORE_L2H_AGGREGATION_H_
