// How many threads a computation may use.
//
// AvailableCpus() is what this process may actually run on: the CPUs in its
// affinity mask (taskset, cpusets), capped by a cgroup CPU quota rounded up
// (a container limited to 1.5 CPUs gets 2), never the node's core count as
// such. DefaultThreads() is what every algorithm uses when its options say
// 0 ("all"): AvailableCpus() unless SetDefaultThreads() chose otherwise
// (dendrod --threads). Thread-safe.
#ifndef DENDRO_CORE_COMMON_CPUS_H_
#define DENDRO_CORE_COMMON_CPUS_H_

#include <string_view>

namespace dendro {

int AvailableCpus();

// CPUs allowed by a cgroup v2 "cpu.max" line ("<quota> <period>" or
// "max <period>"), rounded up; 0 when unlimited or unreadable.
int CpusFromCgroupMax(std::string_view cpu_max);

int DefaultThreads();
// What an algorithm runs on when its options ask for `requested` threads:
// `requested` when >= 1, DefaultThreads() otherwise (0 means "all").
int ThreadsOrDefault(int requested);
// n >= 1 sets the default; n <= 0 goes back to AvailableCpus().
void SetDefaultThreads(int n);

}  // namespace dendro

#endif  // DENDRO_CORE_COMMON_CPUS_H_
