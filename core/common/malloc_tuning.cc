#include "core/common/malloc_tuning.h"

#include <climits>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace dendro {

bool KeepFreedMemory(int64_t keep_bytes) {
#if defined(__GLIBC__)
  if (keep_bytes <= 0) return false;
  // Setting either threshold turns off glibc's adjustment of both.
  const int keep = static_cast<int>(keep_bytes > INT_MAX ? INT_MAX : keep_bytes);
  return mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMaxArenaBlockBytes)) == 1 &&
         mallopt(M_TRIM_THRESHOLD, keep) == 1;
#else
  (void)keep_bytes;
  return false;
#endif
}

}  // namespace dendro
