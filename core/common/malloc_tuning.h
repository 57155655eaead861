// How the C library's allocator keeps freed memory, for processes that run
// heavy numerical code (dendrod, the benchmarks).
//
// glibc's malloc serves a block above its mmap threshold with fresh pages
// from the kernel and returns free memory at the top of an arena once it
// exceeds the trim threshold. Both thresholds adjust themselves, but not to
// what a matrix product does: Eigen's products allocate and free their
// packing buffers (a few MiB at 64 columns and 10,000 rows) on every call,
// on several threads. Each call can then touch freshly mapped pages, one
// page fault per 4 KiB: a 64-column t-NEB EM in a benchmark program took
// about 22,000 faults per iteration, and on a virtual machine, where a fault
// is expensive, half as much time in the kernel as in user code. dendrod
// already had server::TuneAllocator (server/base/memory.h: blocks of 4 MiB
// and more mapped alone, 32 MiB kept per heap, two heaps), which this
// overrides after it: a first 64-column fit took 222,769 faults with
// TuneAllocator alone and 16,317 with this, at no measurable change in its
// time (docs/benchmarks.md, "t-NEB at 64 columns: page faults in the
// benchmarks, and the fit time"). The two should be one function.
#ifndef DENDRO_CORE_COMMON_MALLOC_TUNING_H_
#define DENDRO_CORE_COMMON_MALLOC_TUNING_H_

#include <cstdint>

namespace dendro {

// The largest block KeepFreedMemory lets malloc serve from its arenas
// (glibc's ceiling for the mmap threshold on 64-bit systems).
inline constexpr int64_t kMaxArenaBlockBytes = int64_t{32} << 20;

// Blocks up to kMaxArenaBlockBytes come from malloc's arenas, and up to
// `keep_bytes` (> 0) of free memory stay at the top of each arena for reuse
// instead of going back to the kernel. Call once at start, before threads.
// Returns false where the C library has no such setting (not glibc), or
// refused it.
bool KeepFreedMemory(int64_t keep_bytes);

}  // namespace dendro

#endif  // DENDRO_CORE_COMMON_MALLOC_TUNING_H_
