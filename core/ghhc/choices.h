// The named choices of a gHHC fit (link, projection, how points are placed)
// and their names on the wire and the command line. Header-only, so a caller
// that only parses or prints these names (the CLI) needs no gHHC library.
//
// Name(x) is the canonical lower-case name; Parse(name) accepts exactly the
// canonical names and answers InvalidArgument listing them otherwise.
#ifndef DENDRO_CORE_GHHC_CHOICES_H_
#define DENDRO_CORE_GHHC_CHOICES_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

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

// An explicit choice of how the points are placed (the API's `points`);
// without one, GhhcOptions' defaults apply (choose_points_max_rows).
enum class GhhcPoints {
  kFixed,    // the paper's setting, at any size
  kLearned,  // learn_points
  kAuto,     // choose_points, at any size
};

inline std::string_view GhhcLinkName(GhhcLink link) {
  return link == GhhcLink::kSoftplus ? "softplus" : "sigmoid";
}

inline absl::StatusOr<GhhcLink> ParseGhhcLink(std::string_view name) {
  for (GhhcLink l : {GhhcLink::kSigmoid, GhhcLink::kSoftplus}) {
    if (name == GhhcLinkName(l)) return l;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("link must be sigmoid or softplus, got '", std::string(name), "'"));
}

inline std::string_view GhhcProjectionName(GhhcProjection projection) {
  return projection == GhhcProjection::kRandom ? "random" : "pca";
}

inline absl::StatusOr<GhhcProjection> ParseGhhcProjection(std::string_view name) {
  for (GhhcProjection p : {GhhcProjection::kPca, GhhcProjection::kRandom}) {
    if (name == GhhcProjectionName(p)) return p;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("projection must be pca or random, got '", std::string(name), "'"));
}

inline std::string_view GhhcPointsName(GhhcPoints points) {
  switch (points) {
    case GhhcPoints::kFixed:
      return "fixed";
    case GhhcPoints::kLearned:
      return "learned";
    case GhhcPoints::kAuto:
      return "auto";
  }
  return "fixed";
}

inline absl::StatusOr<GhhcPoints> ParseGhhcPoints(std::string_view name) {
  for (GhhcPoints p : {GhhcPoints::kFixed, GhhcPoints::kLearned, GhhcPoints::kAuto}) {
    if (name == GhhcPointsName(p)) return p;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("points must be fixed, learned or auto, got '", std::string(name), "'"));
}

}  // namespace dendro

#endif  // DENDRO_CORE_GHHC_CHOICES_H_
