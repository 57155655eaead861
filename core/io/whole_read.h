// Mapping a file that is about to be read whole, front to back.
//
// Every page fault on a virtual machine is a trip through the hypervisor.
// Reading a 20 MB file that is already in the page cache through a fresh
// mapping took 9-13 ms on the 2-core VMs this project is measured on, and
// 1-2 ms when mmap mapped every page itself (MAP_POPULATE); at 1 GB the
// saving was about 15%. A reader that will read the whole file anyway asks
// for that here. A file over a quarter of physical memory is still faulted
// in on demand, so that mapping it cannot push the rest of the page cache
// out before a byte of it is used.
#ifndef DENDRO_CORE_IO_WHOLE_READ_H_
#define DENDRO_CORE_IO_WHOLE_READ_H_

#include <cstddef>

namespace dendro {

// Extra mmap flags for a read-only mapping of `file_bytes` that the caller
// reads whole: MAP_POPULATE, or 0 for a file over a quarter of physical
// memory (or when that is unknown).
int WholeReadMapFlags(size_t file_bytes);

}  // namespace dendro

#endif  // DENDRO_CORE_IO_WHOLE_READ_H_
