// What writing into memory the process has not touched yet costs on this
// machine: the bound under a transient upload (every byte lands in new
// page-cache pages) and under the first one-shot L2H run of a fresh dendrod.
//
//   fresh_pages_bench [--mib=1024] [--rounds=3] [--pause_s=0] [--huge]
//
// Each round maps MIB MiB of anonymous memory, copies a 1 MiB block over it
// (the first write: every page is faulted in and zeroed), copies it again
// (the same pages, now present), unmaps it, and sleeps PAUSE_S seconds.
// --huge asks for transparent huge pages (madvise), as a buffer of dendrod's
// could. On a guest with free page reporting the kernel hands freed memory
// back to the host about two seconds after it is freed, so with a pause of
// a few seconds every round's first write takes its pages from the host;
// without a pause it mostly reuses the pages the round before freed.
// Prints one line per round: both writes in GB/s.
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"

ABSL_FLAG(int64_t, mib, 1024, "MiB mapped and written per round");
ABSL_FLAG(int, rounds, 3, "rounds");
ABSL_FLAG(int, pause_s, 0, "seconds to sleep between rounds");
ABSL_FLAG(bool, huge, false, "ask for transparent huge pages (madvise)");

namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Copies `block` over [p, p + bytes); bytes is a multiple of its size.
void Fill(char* p, size_t bytes, const std::vector<char>& block) {
  for (size_t at = 0; at < bytes; at += block.size()) {
    std::memcpy(p + at, block.data(), block.size());
  }
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int64_t mib = absl::GetFlag(FLAGS_mib);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  const int pause_s = absl::GetFlag(FLAGS_pause_s);
  const bool huge = absl::GetFlag(FLAGS_huge);
  if (mib < 1 || rounds < 1 || pause_s < 0) {
    std::fprintf(stderr, "fresh_pages_bench: need --mib >= 1, --rounds >= 1, --pause_s >= 0\n");
    return 2;
  }
  const size_t bytes = static_cast<size_t>(mib) << 20;
  const std::vector<char> block(size_t{1} << 20, 1);
  for (int r = 0; r < rounds; ++r) {
    void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
      std::perror("fresh_pages_bench: mmap");
      return 1;
    }
    char* p = static_cast<char*>(m);
    if (huge && madvise(p, bytes, MADV_HUGEPAGE) != 0) {
      std::perror("fresh_pages_bench: madvise(MADV_HUGEPAGE)");
      return 1;
    }
    auto t0 = std::chrono::steady_clock::now();
    Fill(p, bytes, block);
    const double first = Seconds(t0);
    t0 = std::chrono::steady_clock::now();
    Fill(p, bytes, block);
    const double second = Seconds(t0);
    std::printf("round %d: %lld MiB%s, first write %.2f GB/s, second write %.2f GB/s\n", r + 1,
                static_cast<long long>(mib), huge ? " (huge pages)" : "",
                static_cast<double>(bytes) / first / 1e9,
                static_cast<double>(bytes) / second / 1e9);
    std::fflush(stdout);
    munmap(p, bytes);
    if (pause_s > 0 && r + 1 < rounds) sleep(static_cast<unsigned>(pause_s));
  }
  return 0;
}
