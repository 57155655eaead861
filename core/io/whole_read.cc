#include "core/io/whole_read.h"

#include <sys/mman.h>
#include <unistd.h>

namespace dendro {

int WholeReadMapFlags(size_t file_bytes) {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  const size_t memory = static_cast<size_t>(pages) * static_cast<size_t>(page_size);
  return file_bytes <= memory / 4 ? MAP_POPULATE : 0;
}

}  // namespace dendro
