// ElasticPool (server/base/elastic_pool.h): threads started on demand up to
// a cap, refusals beyond it, idle threads reused and then retired, and a
// destructor that waits for the tasks.
#include "server/base/elastic_pool.h"

#include <atomic>
#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tests/server/eventually.h"

namespace dendro::server {
namespace {

using ::dendro::testing::Eventually;

// Schedules `n` tasks that each wait for `release`; true when all were
// accepted and all are running at once.
bool ScheduleBlocked(ElasticPool& pool, int n, absl::Notification& release) {
  auto running = std::make_shared<std::atomic<int>>(0);  // outlives this call
  for (int i = 0; i < n; ++i) {
    if (!pool.Schedule([running, &release] {
          ++*running;
          release.WaitForNotification();
        })) {
      return false;
    }
  }
  return Eventually([&] { return running->load() == n; });
}

TEST(ElasticPoolTest, BlockedTasksGetAThreadEachUpToTheCapAndTheNextIsRefused) {
  ElasticPool pool({/*max_threads=*/3, absl::Seconds(60)});
  absl::Notification release;
  // All three run at once (each waits for the others' release).
  ASSERT_TRUE(ScheduleBlocked(pool, 3, release));
  EXPECT_EQ(pool.stats().threads, 3);
  EXPECT_EQ(pool.stats().busy, 3);
  bool ran = false;
  EXPECT_FALSE(pool.Schedule([&] { ran = true; }));
  release.Notify();
  ASSERT_TRUE(Eventually([&] { return pool.stats().busy == 0; }));
  // Idle threads take new work; no thread is started for it.
  std::atomic<int> later{0};
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(pool.Schedule([&] { ++later; }));
  ASSERT_TRUE(Eventually([&] { return later.load() == 3; }));
  EXPECT_EQ(pool.stats().threads, 3);
  EXPECT_FALSE(ran);
}

TEST(ElasticPoolTest, ATaskQueuedForAnIdleThreadIsNotLostWhenAnotherTakesIt) {
  // Many short tasks from several threads: every one runs exactly once,
  // with at most max_threads threads.
  ElasticPool pool({/*max_threads=*/4, absl::Milliseconds(5)});
  std::atomic<int> done{0}, refused{0};
  std::vector<std::thread> producers;
  for (int p = 0; p < 4; ++p) {
    producers.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        if (!pool.Schedule([&] { ++done; })) {
          ++refused;
          std::this_thread::yield();
        }
        if (i % 50 == 0) absl::SleepFor(absl::Milliseconds(6));  // let threads retire
      }
    });
  }
  for (std::thread& t : producers) t.join();
  ASSERT_TRUE(Eventually([&] { return done.load() + refused.load() == 2000; }));
  EXPECT_LE(pool.stats().threads, 4);
  EXPECT_GT(done.load(), 0);
}

TEST(ElasticPoolTest, IdleThreadsExitAfterTheTimeout) {
  ElasticPool pool({/*max_threads=*/8, absl::Milliseconds(20)});
  absl::Notification release;
  ASSERT_TRUE(ScheduleBlocked(pool, 5, release));
  release.Notify();
  ASSERT_TRUE(Eventually([&] { return pool.stats().threads == 0; }));
  // And the pool starts threads again afterwards.
  absl::Notification ran;
  ASSERT_TRUE(pool.Schedule([&] { ran.Notify(); }));
  EXPECT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(30)));
}

TEST(ElasticPoolTest, TheDestructorWaitsForEveryScheduledTask) {
  std::atomic<int> done{0};
  {
    ElasticPool pool({/*max_threads=*/2, absl::Seconds(60)});
    for (int i = 0; i < 2; ++i) {
      ASSERT_TRUE(pool.Schedule([&] {
        absl::SleepFor(absl::Milliseconds(50));
        ++done;
      }));
    }
  }
  EXPECT_EQ(done.load(), 2);
}

}  // namespace
}  // namespace dendro::server
