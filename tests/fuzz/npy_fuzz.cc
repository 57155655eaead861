// The .npy reader on arbitrary bytes: header parsing, and every reader on a
// file holding them, including the converting input reader (core/input),
// which also takes .npz archives by their magic. Any outcome but a Status
// (a crash, a sanitizer report, an allocation far beyond the input) is a bug.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <vector>

#include "core/input/matrix_file.h"
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
  auto layout = dendro::ParseNpyLayout(bytes);
  if (layout.ok()) {
    dendro::fuzz::Check(layout->data_offset <= size, "layout ends inside the input");
  }
  if (auto m = dendro::MatrixFile::Open(file.path()); m.ok()) {
    // The data is in the input, so a few rows are at most the input's size.
    const int64_t rows = std::min<int64_t>((*m)->rows(), 4);
    std::vector<float> out(static_cast<size_t>(rows * (*m)->cols()));
    (void)(*m)->ReadRows(0, rows, out.data());
    (void)(*m)->ReadRows((*m)->rows() - rows, (*m)->rows(), out.data());
  }
  (void)dendro::ReadLabelFile(file.path());
  return 0;
}
