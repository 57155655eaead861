#include "core/common/cpus.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace dendro {
namespace {

std::atomic<int> default_threads{0};  // 0: AvailableCpus()

int AffinityCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// cgroup v2 cpu.max, else cgroup v1 cfs quota/period; 0 when unlimited.
int CgroupCpus() {
  std::ifstream v2("/sys/fs/cgroup/cpu.max");
  std::string line;
  if (v2 && std::getline(v2, line)) return CpusFromCgroupMax(line);
  std::ifstream quota_file("/sys/fs/cgroup/cpu/cpu.cfs_quota_us");
  std::ifstream period_file("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  std::string quota, period;
  if (quota_file && period_file && std::getline(quota_file, quota) &&
      std::getline(period_file, period)) {
    return CpusFromCgroupMax(quota + " " + period);  // quota -1: unlimited
  }
  return 0;
}

}  // namespace

int CpusFromCgroupMax(std::string_view cpu_max) {
  const std::vector<absl::string_view> parts = absl::StrSplit(
      absl::string_view(cpu_max.data(), cpu_max.size()), ' ', absl::SkipWhitespace());
  if (parts.size() != 2) return 0;
  double quota = 0, period = 0;
  if (!absl::SimpleAtod(parts[0], &quota) || !absl::SimpleAtod(parts[1], &period)) return 0;
  if (quota <= 0 || period <= 0) return 0;
  return std::max(1, static_cast<int>(std::ceil(quota / period - 1e-9)));
}

int AvailableCpus() {
  const int affinity = AffinityCpus();
  const int quota = CgroupCpus();
  return quota > 0 ? std::min(affinity, quota) : affinity;
}

int DefaultThreads() {
  const int n = default_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : AvailableCpus();
}

int ThreadsOrDefault(int requested) { return requested > 0 ? requested : DefaultThreads(); }

void SetDefaultThreads(int n) { default_threads.store(std::max(0, n)); }

}  // namespace dendro
