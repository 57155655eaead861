#include "server/base/job_lifecycle.h"

#include <string>

#include "server/base/ids.h"

namespace dendro::server {

bool CanMove(v1::JobState from, v1::JobState to) {
  switch (from) {
    case v1::JOB_STATE_QUEUED:
      return to == v1::JOB_STATE_RUNNING || to == v1::JOB_STATE_CANCELLED;
    case v1::JOB_STATE_RUNNING:
      return to == v1::JOB_STATE_SUCCEEDED || to == v1::JOB_STATE_FAILED ||
             to == v1::JOB_STATE_CANCELLED || to == v1::JOB_STATE_QUEUED;
    default:
      return false;  // final states, and unset ones
  }
}

void MarkQueued(v1::Job& job) {
  job.set_state(v1::JOB_STATE_QUEUED);
  job.set_stage("queued");
  job.set_progress(0);
  SetNow(job.mutable_create_time());
}

void MarkClaimed(v1::Job& job) {
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_stage("starting");
  job.set_progress(0);
  job.set_attempts(job.attempts() + 1);
  SetNow(job.mutable_start_time());
}

void MarkRequeued(v1::Job& job, Requeue why) {
  job.set_state(v1::JOB_STATE_QUEUED);
  switch (why) {
    case Requeue::kLeaseExpired:
      job.set_stage("queued (the replica running it stopped renewing its lease)");
      break;
    case Requeue::kHolderRestarted:
      job.set_stage("queued (the replica running it restarted)");
      break;
    case Requeue::kShutdown:
      job.set_stage("queued (interrupted by a shutdown)");
      break;
  }
  job.set_progress(0);
}

void MarkSucceeded(v1::Job& job) {
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  job.set_stage("done");
  job.set_progress(1.0);
  SetNow(job.mutable_end_time());
}

void MarkFailed(v1::Job& job, absl::StatusCode code, std::string_view why) {
  job.set_state(v1::JOB_STATE_FAILED);
  job.set_stage("failed");
  job.mutable_error()->set_code(static_cast<int>(code));
  job.mutable_error()->set_message(std::string(why));
  SetNow(job.mutable_end_time());
}

void MarkCancelled(v1::Job& job, std::string_view why) {
  job.set_state(v1::JOB_STATE_CANCELLED);
  job.set_stage("cancelled");
  job.mutable_error()->set_code(static_cast<int>(absl::StatusCode::kCancelled));
  job.mutable_error()->set_message(std::string(why));
  SetNow(job.mutable_end_time());
}

void MarkCancelRequested(v1::Job& job) {
  job.set_cancel_requested(true);
  job.set_stage("cancelling");
}

void KeepCancelRequest(const v1::Job& stored, v1::Job& job) {
  if (!stored.cancel_requested()) return;
  job.set_cancel_requested(true);
  // A requested cancel wins over a re-queue.
  if (job.state() == v1::JOB_STATE_QUEUED) MarkCancelled(job, "cancelled by request");
}

}  // namespace dendro::server
