// XXH3-64 over a buffer already in memory: dendro's Checksum (Debian's
// xxhash.h compiled inline, server/storage/checksum.cc) against the same
// function called in Debian's shared libxxhash, in 8 MiB updates as the
// stores make them. Prints GB/s for each and checks that they agree.
//
//   build-rel/tests/bench/checksum_bench [MiB, default 1024] [rounds, default 5]
#include <xxhash.h>  // not inline here: the library's own build

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "server/storage/checksum.h"

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1024;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  std::vector<char> buf(mib << 20);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<char>(i * 2654435761u >> 13);
  constexpr size_t kUpdate = size_t{8} << 20;
  auto seconds = [](auto since) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
  };
  std::vector<double> inline_s, library_s;
  std::string inline_hex, library_hex;
  for (int r = 0; r < rounds; ++r) {
    auto t = std::chrono::steady_clock::now();
    dendro::server::Checksum sum;
    for (size_t at = 0; at < buf.size(); at += kUpdate) {
      sum.Update(std::string_view(buf.data() + at, std::min(kUpdate, buf.size() - at)));
    }
    inline_hex = sum.Hex();
    inline_s.push_back(seconds(t));
    t = std::chrono::steady_clock::now();
    XXH3_state_t* state = XXH3_createState();
    XXH3_64bits_reset(state);
    for (size_t at = 0; at < buf.size(); at += kUpdate) {
      XXH3_64bits_update(state, buf.data() + at, std::min(kUpdate, buf.size() - at));
    }
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx",
                  static_cast<unsigned long long>(XXH3_64bits_digest(state)));
    XXH3_freeState(state);
    library_hex = hex;
    library_s.push_back(seconds(t));
  }
  std::sort(inline_s.begin(), inline_s.end());
  std::sort(library_s.begin(), library_s.end());
  const double gb = static_cast<double>(buf.size()) / 1e9;
  std::printf("%zu MiB, %d rounds, median: inline %.2f GB/s, shared library %.2f GB/s; %s\n", mib,
              rounds, gb / inline_s[inline_s.size() / 2], gb / library_s[library_s.size() / 2],
              inline_hex == library_hex ? "same checksum" : "CHECKSUMS DIFFER");
  return inline_hex == library_hex ? 0 : 1;
}
