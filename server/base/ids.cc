#include "server/base/ids.h"

#include <chrono>
#include <cstdint>
#include <random>

namespace dendro::server {

std::string NewId(std::string_view prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}() ^
                                          static_cast<uint64_t>(std::chrono::steady_clock::now()
                                                                    .time_since_epoch()
                                                                    .count()));
  static const char* kHex = "0123456789abcdef";
  std::string id(prefix);
  id += '-';
  uint64_t r = rng();
  for (int i = 0; i < 12; ++i, r >>= 4) id += kHex[r & 15];
  return id;
}

void SetNow(google::protobuf::Timestamp* ts) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const int64_t nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(now).count();
  ts->set_seconds(nanos / 1000000000);
  ts->set_nanos(static_cast<int32_t>(nanos % 1000000000));
}

}  // namespace dendro::server
