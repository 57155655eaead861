// Jobs run below request handling: the worker thread and the OpenMP team a
// fit starts have the nice value of --job_nice and, with --job_sched_idle,
// the SCHED_IDLE policy; request handlers keep the process's.
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "tests/server/server_fixture.h"

namespace dendro::server {
namespace {

int ThreadNice() {
  errno = 0;
  return getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
}

int ThreadPolicy() {
  int policy = -1;
  sched_param param{};
  pthread_getschedparam(pthread_self(), &policy, &param);
  return policy;
}

// Records the nice value and scheduling policy of the thread that runs the
// fit and of every thread of a parallel region it opens, then fails (no
// model needed).
class NiceProbeMethod final : public TestMethod {
 public:
  absl::StatusOr<std::unique_ptr<FittedModel>> Fit(const LoadedDataset&, const v1::JobSpec&,
                                                   RunContext&) const override {
    std::lock_guard<std::mutex> lock(mu);
    worker = ThreadNice();
    worker_policy = ThreadPolicy();
#pragma omp parallel num_threads(3)
    {
      const int nice = ThreadNice();
      const int policy = ThreadPolicy();
#pragma omp critical
      {
        team.push_back(nice);
        team_policy.push_back(policy);
      }
    }
    return absl::InternalError("probe only");
  }
  mutable std::mutex mu;
  mutable int worker = -100;
  mutable int worker_policy = -1;
  mutable std::vector<int> team;
  mutable std::vector<int> team_policy;
};

class JobPriorityTest : public ServerTest {};

TEST_F(JobPriorityTest, AJobAndItsThreadsRunAtTheJobNiceValue) {
  const int base = ThreadNice();
  if (base != 0) GTEST_SKIP() << "this process runs at nice " << base << ", not 0";
  NiceProbeMethod method;
  ServerOptions opts;
  opts.job_nice = 7;
  StartServerWithMethod(&method, opts);
  const v1::Job job = SubmitOnSmallDataset("nice");
  ASSERT_FALSE(job.id().empty());
  EXPECT_EQ(Wait(job.id()).state(), v1::JOB_STATE_FAILED);
  std::lock_guard<std::mutex> lock(method.mu);
  EXPECT_EQ(method.worker, 7);
  ASSERT_FALSE(method.team.empty());
  for (int nice : method.team) EXPECT_EQ(nice, 7);
  EXPECT_EQ(method.worker_policy, SCHED_OTHER);
  for (int policy : method.team_policy) EXPECT_EQ(policy, SCHED_OTHER);
  // This thread (like every request handler) is untouched.
  EXPECT_EQ(ThreadNice(), base);
}

// --job_sched_idle: SCHED_IDLE for the worker and its team, on top of the
// nice value; request handlers keep the normal policy.
TEST_F(JobPriorityTest, JobThreadsRunUnderSchedIdleWhenAsked) {
  ASSERT_EQ(ThreadPolicy(), SCHED_OTHER);
  NiceProbeMethod method;
  ServerOptions opts;
  opts.job_sched_idle = true;
  StartServerWithMethod(&method, opts);
  const v1::Job job = SubmitOnSmallDataset("idle");
  ASSERT_FALSE(job.id().empty());
  EXPECT_EQ(Wait(job.id()).state(), v1::JOB_STATE_FAILED);
  std::lock_guard<std::mutex> lock(method.mu);
  EXPECT_EQ(method.worker_policy, SCHED_IDLE);
  ASSERT_FALSE(method.team_policy.empty());
  for (int policy : method.team_policy) EXPECT_EQ(policy, SCHED_IDLE);
  EXPECT_EQ(ThreadPolicy(), SCHED_OTHER);
}

}  // namespace
}  // namespace dendro::server
