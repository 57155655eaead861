#include "server/catalogue.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "server/postgres_catalogue.h"
#include "server/sqlite_catalogue.h"

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

absl::Status DatasetGoneError(const std::string& id) {
  return absl::NotFoundError(absl::StrCat("dataset '", id, "' not found (deleted meanwhile)"));
}

void MarkRequeued(v1::Job& job, const std::string& why) {
  job.set_state(v1::JOB_STATE_QUEUED);
  job.set_stage(why);
  job.set_progress(0);
}

void MarkClaimed(v1::Job& job) {
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_stage("starting");
  job.set_progress(0);
  job.set_attempts(job.attempts() + 1);
  const int64_t nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  job.mutable_start_time()->set_seconds(nanos / 1000000000);
  job.mutable_start_time()->set_nanos(static_cast<int32_t>(nanos % 1000000000));
}

void KeepCancelRequest(const v1::Job& stored, v1::Job& job) {
  if (!stored.cancel_requested()) return;
  job.set_cancel_requested(true);
  if (job.state() == v1::JOB_STATE_QUEUED) {
    // A requested cancel wins over a re-queue.
    job.set_state(v1::JOB_STATE_CANCELLED);
    job.set_stage("cancelled");
    job.mutable_error()->set_code(static_cast<int>(absl::StatusCode::kCancelled));
    job.mutable_error()->set_message("cancelled by request");
    const int64_t nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
    job.mutable_end_time()->set_seconds(nanos / 1000000000);
    job.mutable_end_time()->set_nanos(static_cast<int32_t>(nanos % 1000000000));
  }
}

absl::StatusOr<std::unique_ptr<Catalogue>> OpenCatalogue(const std::string& spec,
                                                         const std::string& data_dir,
                                                         int connections) {
  if (spec.empty() || spec == "sqlite") {
    auto sqlite = SqliteCatalogue::Open(data_dir + "/metadata.db");
    if (!sqlite.ok()) return sqlite.status();
    return std::unique_ptr<Catalogue>(*std::move(sqlite));
  }
  auto postgres = PostgresCatalogue::Open(spec, connections);
  if (!postgres.ok()) return postgres.status();
  return std::unique_ptr<Catalogue>(*std::move(postgres));
}

}  // namespace dendro::server
