// Memory: how dendrod's allocator keeps and returns freed memory.
//
// Every message of an upload stream allocates and frees about a megabyte.
// With glibc's defaults the freed top of a heap went back to the kernel
// almost at once, and each message faulted in fresh pages: 3-4x the
// server's CPU on a 1 GiB upload (docs/benchmarks.md). TuneAllocator()
// therefore lets each heap keep kHeapKeepBytes of freed memory, and
// ReleaseAfterStream() hands it back once a large stream is over, so the job
// that follows can use it.
#ifndef DENDRO_SERVER_BASE_MEMORY_H_
#define DENDRO_SERVER_BASE_MEMORY_H_

#include <cstdint>

namespace dendro::server {

// Freed memory each heap keeps at its top for reuse (glibc's trim threshold).
inline constexpr int64_t kHeapKeepBytes = int64_t{32} << 20;

// Keeps kHeapKeepBytes free at the top of each heap, maps only blocks of
// 4 MiB and more on their own, and uses two heaps rather than 8 per core,
// which bounds what the kept memory adds to the peak. Leaves all three to
// glibc when any MALLOC_* tunable is set in the environment. Call once, at
// start, before other threads allocate.
void TuneAllocator();

// Returns the heaps' free memory to the kernel after a stream that moved
// `bytes`, when that is more than the heaps keep anyway: after a small
// stream there is little to return, and trimming every heap costs more than
// it gives.
void ReleaseAfterStream(int64_t bytes);

}  // namespace dendro::server

#endif  // DENDRO_SERVER_BASE_MEMORY_H_
