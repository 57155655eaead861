#include "server/catalogue/catalogue.h"

#include <chrono>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"


namespace dendro::server {

absl::Status ModelNotFound(const std::string& name, int64_t version) {
  return absl::NotFoundError(version > 0
                                 ? absl::StrCat("model '", name, "' version ", version, " not found")
                                 : absl::StrCat("model '", name, "' not found"));
}

absl::Status LabelNotFound(const std::string& name, const std::string& label) {
  return absl::NotFoundError(absl::StrCat("model '", name, "' has no label '", label, "'"));
}

absl::Status LabelledVersion(const std::string& name, int64_t version,
                             const std::vector<std::string>& labels) {
  return absl::FailedPreconditionError(absl::StrCat(
      "model '", name, "' version ", version, " is labelled '", absl::StrJoin(labels, "', '"),
      "'; move or delete the label first (deleting every version of the name drops its labels "
      "too)"));
}

absl::Status LeaseLost(const std::string& id) {
  return absl::AbortedError(absl::StrCat(
      "job '", id, "': this replica's lease on it has ended (another replica may run it now)"));
}

absl::Status CancelledBeforeCommit(const std::string& id) {
  return absl::CancelledError(
      absl::StrCat("job '", id, "' was cancelled before its model was committed"));
}

absl::Status DatasetInUseError(const std::string& id) {
  return absl::FailedPreconditionError(
      absl::StrCat("dataset '", id, "' is used by a queued or running job"));
}

absl::Status DatasetGenerationNotFound(const std::string& lineage, int generation) {
  if (generation == 0) {
    return absl::NotFoundError(absl::StrCat("dataset '", lineage, "' not found"));
  }
  return absl::NotFoundError(
      absl::StrCat("dataset '", lineage, "' has no generation ", generation));
}

JobSeqRange JobSeqRange::Of(int64_t cursor, const JobListing& listing) {
  JobSeqRange r;
  r.above = listing.newest_first ? 0 : cursor;
  r.below = listing.newest_first && cursor > 0 ? cursor : std::numeric_limits<int64_t>::max();
  r.state_mask = listing.state_mask != 0 ? listing.state_mask : 0x7fffffff;
  return r;
}

absl::Status DatasetGoneError(const std::string& id) {
  return absl::NotFoundError(absl::StrCat("dataset '", id, "' not found (deleted meanwhile)"));
}

}  // namespace dendro::server
