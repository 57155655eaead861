// The job state machine (server/base/job_lifecycle.h): the moves that exist,
// table-driven, and what each move leaves on the record.
#include "server/base/job_lifecycle.h"

#include <map>
#include <set>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dendro::server {
namespace {

using ::testing::HasSubstr;

constexpr v1::JobState kQueued = v1::JOB_STATE_QUEUED;
constexpr v1::JobState kRunning = v1::JOB_STATE_RUNNING;
constexpr v1::JobState kSucceeded = v1::JOB_STATE_SUCCEEDED;
constexpr v1::JobState kFailed = v1::JOB_STATE_FAILED;
constexpr v1::JobState kCancelled = v1::JOB_STATE_CANCELLED;
constexpr v1::JobState kUnset = v1::JOB_STATE_UNSPECIFIED;

TEST(JobLifecycleTest, ExactlyTheMovesOfTheDiagramExist) {
  const std::set<std::pair<v1::JobState, v1::JobState>> moves = {
      {kQueued, kRunning},    {kQueued, kCancelled},   {kRunning, kSucceeded},
      {kRunning, kFailed},    {kRunning, kCancelled},  {kRunning, kQueued},
  };
  const v1::JobState all[] = {kUnset, kQueued, kRunning, kSucceeded, kFailed, kCancelled};
  for (v1::JobState from : all) {
    for (v1::JobState to : all) {
      EXPECT_EQ(CanMove(from, to), moves.count({from, to}) == 1)
          << v1::JobState_Name(from) << " -> " << v1::JobState_Name(to);
    }
  }
  for (v1::JobState s : all) {
    EXPECT_EQ(IsFinished(s), s == kSucceeded || s == kFailed || s == kCancelled);
  }
}

// Each move, applied to a job in a state it may leave, gives the state the
// diagram says, and a move into a final state records an end time.
TEST(JobLifecycleTest, EachMoveSetsItsStateStageAndFields) {
  struct Move {
    const char* name;
    v1::JobState from, to;
    void (*apply)(v1::Job&);
    const char* stage;
  };
  const Move table[] = {
      {"claim", kQueued, kRunning, [](v1::Job& j) { MarkClaimed(j); }, "starting"},
      {"cancel queued", kQueued, kCancelled,
       [](v1::Job& j) { MarkCancelled(j, "cancelled before it started"); }, "cancelled"},
      {"commit", kRunning, kSucceeded, [](v1::Job& j) { MarkSucceeded(j); }, "done"},
      {"fail", kRunning, kFailed,
       [](v1::Job& j) { MarkFailed(j, absl::StatusCode::kInternal, "boom"); }, "failed"},
      {"cancel running", kRunning, kCancelled,
       [](v1::Job& j) { MarkCancelled(j, "cancelled by request"); }, "cancelled"},
      {"lease expired", kRunning, kQueued,
       [](v1::Job& j) { MarkRequeued(j, Requeue::kLeaseExpired); }, "stopped renewing"},
      {"holder restarted", kRunning, kQueued,
       [](v1::Job& j) { MarkRequeued(j, Requeue::kHolderRestarted); }, "restarted"},
      {"shutdown", kRunning, kQueued, [](v1::Job& j) { MarkRequeued(j, Requeue::kShutdown); },
       "interrupted"},
  };
  for (const Move& m : table) {
    SCOPED_TRACE(m.name);
    ASSERT_TRUE(CanMove(m.from, m.to));
    v1::Job job;
    job.set_state(m.from);
    job.set_progress(0.5);
    job.set_attempts(2);
    m.apply(job);
    EXPECT_EQ(job.state(), m.to);
    EXPECT_THAT(job.stage(), HasSubstr(m.stage));
    EXPECT_EQ(job.end_time().seconds() > 0, IsFinished(m.to));
    if (m.to == kRunning) {
      EXPECT_EQ(job.attempts(), 3);
      EXPECT_GT(job.start_time().seconds(), 0);
    }
    if (m.to == kQueued) {
      EXPECT_EQ(job.progress(), 0);
    }
    if (m.to == kSucceeded) {
      EXPECT_EQ(job.progress(), 1);
    }
    if (m.to == kFailed || m.to == kCancelled) {
      EXPECT_NE(job.error().code(), 0);
    }
  }
}

TEST(JobLifecycleTest, ACancelRequestStaysAndWinsOverARequeue) {
  v1::Job stored;
  stored.set_state(kRunning);
  MarkCancelRequested(stored);
  EXPECT_EQ(stored.state(), kRunning);
  EXPECT_EQ(stored.stage(), "cancelling");
  // The holder's own record (no request on it) goes back to the queue...
  v1::Job mine;
  mine.set_state(kRunning);
  MarkRequeued(mine, Requeue::kShutdown);
  KeepCancelRequest(stored, mine);
  // ...but the request recorded meanwhile makes it CANCELLED instead.
  EXPECT_TRUE(mine.cancel_requested());
  EXPECT_EQ(mine.state(), kCancelled);
  EXPECT_EQ(mine.error().code(), static_cast<int>(absl::StatusCode::kCancelled));
  // A record already final keeps its state, and gains the flag.
  v1::Job done;
  done.set_state(kRunning);
  MarkSucceeded(done);
  KeepCancelRequest(stored, done);
  EXPECT_EQ(done.state(), kSucceeded);
  EXPECT_TRUE(done.cancel_requested());
}

TEST(JobLifecycleTest, ANewJobIsQueuedWithACreateTime) {
  v1::Job job;
  MarkQueued(job);
  EXPECT_EQ(job.state(), kQueued);
  EXPECT_EQ(job.stage(), "queued");
  EXPECT_GT(job.create_time().seconds(), 0);
}

}  // namespace
}  // namespace dendro::server
