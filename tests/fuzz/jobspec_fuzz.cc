// Every method's parameter validation on arbitrary JobSpec bytes, against a
// dataset shape taken from the input. A spec that parses must come back with
// a Status: a crash, a sanitizer report, a hang or an allocation beyond the
// fuzzer's limit is a bug. A refusal must say what is wrong.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "dendro/v1/dendro.pb.h"
#include "server/methods/method.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 7) return 0;
  uint32_t rows;
  uint16_t cols;
  std::memcpy(&rows, data, 4);
  std::memcpy(&cols, data + 4, 2);
  dendro::v1::Dataset dataset;
  dataset.set_id("ds-fuzz");
  dataset.set_rows(1 + rows % 5000000);
  dataset.set_cols(1 + cols % 8192);
  dataset.set_has_labels(data[6] & 1);
  dendro::v1::JobSpec spec;
  if (!spec.ParseFromArray(data + 7, static_cast<int>(size - 7))) return 0;
  dendro::server::JobLimits limits;
  limits.memory_bytes = int64_t{1} << 30;
  auto method = dendro::server::MethodForSpec(spec);
  if (!method.ok()) {
    dendro::fuzz::Check(!method.status().message().empty(), "a refusal says why");
    return 0;
  }
  const absl::Status s = (*method)->Validate(spec, dataset, limits);
  if (!s.ok()) dendro::fuzz::Check(!s.message().empty(), "a refusal says why");
  return 0;
}
