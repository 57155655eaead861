// Helpers for start-up sweeps of files no catalogue row points at.
//
// A dendrod that owns its data directory (SQLite catalogue) removes such
// files at once: no other process writes there. Replicas sharing a data
// directory (PostgreSQL catalogue) cannot tell another replica's upload or
// model save in progress from a crash's leftovers by name, so they remove an
// unlisted file only after nothing under it has changed for a grace period
// far longer than any write takes to be recorded.
#ifndef DENDRO_SERVER_SWEEP_H_
#define DENDRO_SERVER_SWEEP_H_

#include <string>

#include "absl/time/time.h"

namespace dendro::server {

// How long an unlisted file in a shared data directory must stay unchanged
// before a replica removes it.
inline constexpr absl::Duration kSharedOrphanGrace = absl::Hours(1);

// True if neither `path` nor anything under it was modified within `grace`
// of now (always true for a zero grace; false if `path` cannot be read).
bool QuietFor(const std::string& path, absl::Duration grace);

}  // namespace dendro::server

#endif  // DENDRO_SERVER_SWEEP_H_
