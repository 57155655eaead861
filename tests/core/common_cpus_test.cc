#include "core/common/cpus.h"

#include <sched.h>

#include "gtest/gtest.h"

namespace dendro {
namespace {

TEST(CpusTest, CgroupQuotaIsRoundedUp) {
  EXPECT_EQ(CpusFromCgroupMax("max 100000"), 0);
  EXPECT_EQ(CpusFromCgroupMax("100000 100000"), 1);
  EXPECT_EQ(CpusFromCgroupMax("150000 100000"), 2);
  EXPECT_EQ(CpusFromCgroupMax("50000 100000\n"), 1);
  EXPECT_EQ(CpusFromCgroupMax("-1 100000"), 0);  // cgroup v1: unlimited
  EXPECT_EQ(CpusFromCgroupMax("garbage"), 0);
  EXPECT_EQ(CpusFromCgroupMax(""), 0);
}

TEST(CpusTest, AffinityMaskBoundsTheThreads) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  const int all = AvailableCpus();
  EXPECT_GE(all, 1);
  EXPECT_LE(all, CPU_COUNT(&saved));
  // Pinned to one CPU (as taskset -c would), this thread may use one.
  int first = 0;
  while (!CPU_ISSET(first, &saved)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  EXPECT_EQ(AvailableCpus(), 1);
  EXPECT_EQ(DefaultThreads(), 1);
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  EXPECT_EQ(AvailableCpus(), all);
}

TEST(CpusTest, DefaultThreadsCanBeSet) {
  SetDefaultThreads(3);
  EXPECT_EQ(DefaultThreads(), 3);
  SetDefaultThreads(0);
  EXPECT_EQ(DefaultThreads(), AvailableCpus());
}

}  // namespace
}  // namespace dendro
