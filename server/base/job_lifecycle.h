// The job lifecycle in one place: the states, the moves between them, and
// the stage text and fields each move leaves on the record. The job
// manager and both catalogues move jobs only through these functions.
//
//            submit          claim               commit
//   (new) ────────► QUEUED ────────► RUNNING ─────────────► SUCCEEDED
//                   │    ▲             │ │
//                   │    └─ requeue ───┘ │ fail
//                   │                    ├────────────────► FAILED
//                   │                    │ cancel
//                   └─ cancel ───────────┴────────────────► CANCELLED
//
// A requeue happens when the replica running a job stops renewing its lease,
// restarts, or shuts down before the job ends; a job claimed too often
// without ending, or whose dataset is gone, fails at its next claim.
// SUCCEEDED, FAILED and CANCELLED are final: nothing moves a job out of
// them.
#ifndef DENDRO_SERVER_BASE_JOB_LIFECYCLE_H_
#define DENDRO_SERVER_BASE_JOB_LIFECYCLE_H_

#include <string_view>

#include "absl/status/status.h"
#include "dendro/v1/dendro.pb.h"

namespace dendro::server {

// Whether a job in state `s` has ended and will change no more.
inline bool IsFinished(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED ||
         s == v1::JOB_STATE_CANCELLED;
}

// Whether the lifecycle has a move from `from` to `to` (see the diagram).
bool CanMove(v1::JobState from, v1::JobState to);

// Why a RUNNING job goes back to the queue.
enum class Requeue {
  kLeaseExpired,     // its replica stopped renewing the lease (died, lost the database)
  kHolderRestarted,  // its replica restarted under the same id
  kShutdown,         // its replica shut down before the job ended
};

// The moves. Each sets the state, the stage text, and the fields the move
// implies (progress, attempts, times, error); none checks `job`'s current
// state (CanMove says which moves exist; the callers hold the record's
// lock or lease).
void MarkQueued(v1::Job& job);    // a new job: "queued", create_time now
void MarkClaimed(v1::Job& job);   // "starting", progress 0, attempts + 1, start_time now
void MarkRequeued(v1::Job& job, Requeue why);  // "queued (…why…)", progress 0
void MarkSucceeded(v1::Job& job);  // "done", progress 1, end_time now
void MarkFailed(v1::Job& job, absl::StatusCode code, std::string_view why);
void MarkCancelled(v1::Job& job, std::string_view why);
// A RUNNING job asked to stop: cancel_requested, "cancelling" (it stays
// RUNNING until its run ends; then CANCELLED).
void MarkCancelRequested(v1::Job& job);

// Copies the stored job's cancel request into `job`: once set it stays
// set, and a job so marked that would be re-queued is CANCELLED instead.
void KeepCancelRequest(const v1::Job& stored, v1::Job& job);

}  // namespace dendro::server

#endif  // DENDRO_SERVER_BASE_JOB_LIFECYCLE_H_
