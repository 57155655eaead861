#include "core/l2h/worker_pool.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace dendro {
namespace l2h_internal {
namespace {

// Runs `runs` jobs of `chunks` chunks each and checks that every chunk ran
// exactly once and only on a thread the pool has. `pause` between runs
// decides which wait the workers are in when the next run starts: shorter
// than WorkerPool::kSpin they are still polling, longer they are blocked.
void ExpectEveryChunkOnce(WorkerPool& pool, int runs, int64_t chunks,
                          std::chrono::microseconds pause) {
  std::vector<std::atomic<int>> calls(chunks);
  for (int r = 0; r < runs; ++r) {
    for (auto& c : calls) c.store(0);
    std::atomic<int> bad_thread{0};
    pool.Run(chunks, [&](int64_t chunk, int thread) {
      if (thread < 0 || thread >= pool.num_threads()) bad_thread.fetch_add(1);
      calls[chunk].fetch_add(1);
    });
    // Run returned, so every call has returned.
    for (int64_t c = 0; c < chunks; ++c) ASSERT_EQ(calls[c].load(), 1) << "run " << r;
    ASSERT_EQ(bad_thread.load(), 0);
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
  }
}

TEST(L2hWorkerPool, BackToBackRunsWhileTheWorkersSpin) {
  WorkerPool pool(3);
  ExpectEveryChunkOnce(pool, 2000, 7, std::chrono::microseconds(0));
}

TEST(L2hWorkerPool, RunsAfterTheWorkersHaveBlocked) {
  WorkerPool pool(2);
  ExpectEveryChunkOnce(pool, 20, 16, 3 * WorkerPool::kSpin);
}

TEST(L2hWorkerPool, RunWaitsForASlowWorkerChunk) {
  // The calling thread's own chunks finish at once; Run must still wait, past
  // its spin, for the chunk a worker is sleeping in.
  WorkerPool pool(2);
  std::atomic<int> finished{0};
  pool.Run(2, [&](int64_t, int thread) {
    if (thread != 0) std::this_thread::sleep_for(5 * WorkerPool::kSpin);
    finished.fetch_add(1);
  });
  EXPECT_EQ(finished.load(), 2);
}

TEST(L2hWorkerPool, OneThreadRunsEverythingInline) {
  WorkerPool pool(1);
  EXPECT_EQ(pool.num_threads(), 1);
  const std::thread::id self = std::this_thread::get_id();
  int calls = 0;
  pool.Run(5, [&](int64_t chunk, int thread) {
    EXPECT_EQ(thread, 0);
    EXPECT_EQ(chunk, calls);  // in order
    EXPECT_EQ(std::this_thread::get_id(), self);
    ++calls;
  });
  EXPECT_EQ(calls, 5);
}

TEST(L2hWorkerPool, DestroyedWhileWorkersSpinOrSleep) {
  for (int i = 0; i < 50; ++i) {
    WorkerPool pool(2);
    pool.Run(4, [](int64_t, int) {});
    if (i % 2 == 1) std::this_thread::sleep_for(2 * WorkerPool::kSpin);
  }  // each destructor must join its worker, spinning or blocked
}

}  // namespace
}  // namespace l2h_internal
}  // namespace dendro
