// L2H's aggregation choice (eq. 1) and its names on the wire and the command
// line ("sum_of_means", "mean_of_means", "sum_of_sums"). Header-only, so a
// caller that only parses or prints the name (the CLI) needs no L2H library.
// ParseL2hAggregation accepts exactly those names and answers InvalidArgument
// listing them otherwise.
#ifndef DENDRO_CORE_L2H_AGGREGATION_H_
#define DENDRO_CORE_L2H_AGGREGATION_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

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

inline std::string_view L2hAggregationName(L2hAggregation a) {
  switch (a) {
    case L2hAggregation::kSumOfSums:
      return "sum_of_sums";
    case L2hAggregation::kMeanOfMeans:
      return "mean_of_means";
    case L2hAggregation::kSumOfMeans:
      return "sum_of_means";
  }
  return "unknown";
}

inline absl::StatusOr<L2hAggregation> ParseL2hAggregation(std::string_view name) {
  for (L2hAggregation a : {L2hAggregation::kSumOfMeans, L2hAggregation::kMeanOfMeans,
                           L2hAggregation::kSumOfSums}) {
    if (name == L2hAggregationName(a)) return a;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown L2H aggregation '", std::string(name),
                   "'; expected one of sum_of_means, mean_of_means, sum_of_sums"));
}

}  // namespace dendro

#endif  // DENDRO_CORE_L2H_AGGREGATION_H_
