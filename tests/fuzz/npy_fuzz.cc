// The .npy reader on arbitrary bytes: header parsing, and every reader on a
// file holding them. Any outcome but a Status (a crash, a sanitizer report,
// an allocation far beyond the input) is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/io/npy.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto header = dendro::ParseNpyHeader(bytes);
  if (header.ok()) {
    dendro::fuzz::Check(header->data_offset <= size, "header ends inside the input");
  }
  const dendro::fuzz::MemFile file(bytes);
  if (auto mapped = dendro::MappedNpy::Open(file.path()); mapped.ok()) {
    (void)(*mapped)->AsFloat32();
  }
  (void)dendro::ReadNpyFloat32(file.path());
  (void)dendro::ReadNpyFloat64(file.path());
  (void)dendro::ReadNpyInt(file.path());
  return 0;
}
