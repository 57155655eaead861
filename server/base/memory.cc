#include "server/base/memory.h"

#include <malloc.h>

#include <cstdlib>

namespace dendro::server {

void TuneAllocator() {
  if (std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr ||
      std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr ||
      std::getenv("MALLOC_ARENA_MAX") != nullptr) {
    return;
  }
  mallopt(M_TRIM_THRESHOLD, static_cast<int>(kHeapKeepBytes));
  mallopt(M_MMAP_THRESHOLD, 4 << 20);
  mallopt(M_ARENA_MAX, 2);
}

void ReleaseAfterStream(int64_t bytes) {
  if (bytes > kHeapKeepBytes) malloc_trim(0);
}

}  // namespace dendro::server
