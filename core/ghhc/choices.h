// The named choices of a gHHC fit (link, projection, how points are placed)
// and their names on the wire and the command line. Header-only, so a caller
// that only parses or prints these names (the CLI) needs no gHHC library.
//
// Name(x) is the canonical lower-case name; Parse(name) accepts exactly the
// canonical names and answers InvalidArgument listing them otherwise. One
// table per enum (core/common/named_choice.h) serves both.
#ifndef DENDRO_CORE_GHHC_CHOICES_H_
#define DENDRO_CORE_GHHC_CHOICES_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "core/common/named_choice.h"

namespace dendro {

enum class GhhcLink {
  kSigmoid,   // s(y) = 1 / (1 + e^-y): eq. 15 as printed
  kSoftplus,  // s(y) = log(1 + e^y): the BPR log-sigmoid loss of the authors' code
};

enum class GhhcProjection {
  // Learned: the top-p principal directions of the centred rows (from a
  // sample of at most kGhhcPcaSample rows, ghhc.h), an orthonormal basis. Lossless
  // for data whose rank is <= p.
  kPca,
  // Seeded Gaussian matrix with entries N(0, 1/p): keeps distances in
  // expectation (Johnson-Lindenstrauss), needs no pass over the data.
  kRandom,
};

// Whether the columns are divided by their standard deviations before the
// rows are normalised (GhhcOptions::standardize; ghhc.h, step 1).
enum class GhhcStandardize {
  kAuto,  // when the largest column spread exceeds kGhhcStandardizeRatio x the median one
  kOn,    // always
  kOff,   // never: the paper's pipeline
};

// The tree above the leaf clusters (GhhcOptions::tree; ghhc.h, "The tree
// above the leaf clusters").
enum class GhhcTree {
  kWard,   // Ward's criterion over the leaf clusters' points (the default)
  kNodes,  // read off the node embeddings and refined: the paper's tree
};

// An explicit choice of how the points are placed (the API's `points`);
// without one, GhhcOptions' defaults apply (choose_points_max_rows).
enum class GhhcPoints {
  kFixed,    // the paper's setting, at any size
  kLearned,  // learn_points
  kAuto,     // choose_points, at any size
};

inline constexpr NamedChoice<GhhcLink> kGhhcLinks[] = {
    {GhhcLink::kSigmoid, "sigmoid"},
    {GhhcLink::kSoftplus, "softplus"},
};
inline constexpr NamedChoice<GhhcProjection> kGhhcProjections[] = {
    {GhhcProjection::kPca, "pca"},
    {GhhcProjection::kRandom, "random"},
};
inline constexpr NamedChoice<GhhcStandardize> kGhhcStandardizes[] = {
    {GhhcStandardize::kAuto, "auto"},
    {GhhcStandardize::kOn, "on"},
    {GhhcStandardize::kOff, "off"},
};
inline constexpr NamedChoice<GhhcTree> kGhhcTrees[] = {
    {GhhcTree::kWard, "ward"},
    {GhhcTree::kNodes, "nodes"},
};
inline constexpr NamedChoice<GhhcPoints> kGhhcPoints[] = {
    {GhhcPoints::kFixed, "fixed"},
    {GhhcPoints::kLearned, "learned"},
    {GhhcPoints::kAuto, "auto"},
};

inline std::string_view GhhcLinkName(GhhcLink link) { return ChoiceName(kGhhcLinks, link); }
inline absl::StatusOr<GhhcLink> ParseGhhcLink(std::string_view name) {
  return ParseChoice(kGhhcLinks, "link", name);
}

inline std::string_view GhhcProjectionName(GhhcProjection projection) {
  return ChoiceName(kGhhcProjections, projection);
}
inline absl::StatusOr<GhhcProjection> ParseGhhcProjection(std::string_view name) {
  return ParseChoice(kGhhcProjections, "projection", name);
}

inline std::string_view GhhcStandardizeName(GhhcStandardize standardize) {
  return ChoiceName(kGhhcStandardizes, standardize);
}
inline absl::StatusOr<GhhcStandardize> ParseGhhcStandardize(std::string_view name) {
  return ParseChoice(kGhhcStandardizes, "standardize", name);
}

inline std::string_view GhhcTreeName(GhhcTree tree) { return ChoiceName(kGhhcTrees, tree); }
inline absl::StatusOr<GhhcTree> ParseGhhcTree(std::string_view name) {
  return ParseChoice(kGhhcTrees, "tree", name);
}

inline std::string_view GhhcPointsName(GhhcPoints points) {
  return ChoiceName(kGhhcPoints, points);
}
inline absl::StatusOr<GhhcPoints> ParseGhhcPoints(std::string_view name) {
  return ParseChoice(kGhhcPoints, "points", name);
}

}  // namespace dendro

#endif  // DENDRO_CORE_GHHC_CHOICES_H_
