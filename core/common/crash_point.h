// CrashPoint: test-only fault injection at named points of the write paths.
//
// When the environment variable DENDRO_CRASH_AT equals `point` (read once,
// at the first call), the process writes "crash point <point>" to stderr and
// kills itself with SIGKILL: no destructor runs and nothing is flushed, as
// with kill -9 or a power cut (for what the page cache has not yet written,
// the fsyncs before each point are what count). Otherwise it is one string
// comparison. tests/blackbox/crash_points_test.py runs every point in turn
// and checks what a restart finds. Points are named "<object>.<moment>",
// e.g. "upload.files_committed"; the list lives in that test. A point hit
// for many objects takes a `detail` too (e.g. a file name): then both
// "<point>" and "<point>:<detail>" arm it.
#ifndef DENDRO_CORE_COMMON_CRASH_POINT_H_
#define DENDRO_CORE_COMMON_CRASH_POINT_H_

#include <string_view>

namespace dendro {

void CrashPoint(const char* point, std::string_view detail = {});

}  // namespace dendro

#endif  // DENDRO_CORE_COMMON_CRASH_POINT_H_
