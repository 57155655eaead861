// The named choices of a hierarchical PPCA classifier that travel on the wire
// and the command line. Header-only, so a caller that only parses or prints
// these names (the CLI) needs no hPPCA library. One table per enum
// (core/common/named_choice.h) serves both directions.
#ifndef DENDRO_CORE_HPPCA_CHOICES_H_
#define DENDRO_CORE_HPPCA_CHOICES_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "core/common/named_choice.h"

namespace dendro {

// How Predict scores a request that asks for neither flat scoring nor a
// number of super-classes (HppcaPredictOptions: flat false, top_t 0).
enum class HppcaScoring {
  kAuto,          // the cheaper of the two by EstimateHppcaPredictCost (hppca.h)
  kHierarchical,  // open the default_top_t best super-classes (Algorithm 1)
  kFlat,          // score every class
};

inline constexpr NamedChoice<HppcaScoring> kHppcaScorings[] = {
    {HppcaScoring::kAuto, "auto"},
    {HppcaScoring::kHierarchical, "hierarchical"},
    {HppcaScoring::kFlat, "flat"},
};

inline std::string_view HppcaScoringName(HppcaScoring s) { return ChoiceName(kHppcaScorings, s); }
inline absl::StatusOr<HppcaScoring> ParseHppcaScoring(std::string_view name) {
  return ParseChoice(kHppcaScorings, "scoring", name);
}

}  // namespace dendro

#endif  // DENDRO_CORE_HPPCA_CHOICES_H_
