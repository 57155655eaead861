// The questions every layer asks of a job's state, answered once.
// (The job lifecycle itself, its transitions and stage texts, lives with the
// job manager and the catalogues.)
#ifndef DENDRO_SERVER_JOB_STATE_H_
#define DENDRO_SERVER_JOB_STATE_H_

#include "dendro/v1/dendro.pb.h"

namespace dendro::server {

// Whether a job in state `s` has ended and will change no more.
inline bool IsFinished(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED ||
         s == v1::JOB_STATE_CANCELLED;
}

}  // namespace dendro::server

#endif  // DENDRO_SERVER_JOB_STATE_H_
