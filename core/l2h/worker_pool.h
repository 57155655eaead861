// A small fork/join pool for RunL2h (internal to core/l2h).
//
// Why not OpenMP: libgomp's idle threads spin-wait for a long while after
// every parallel region. On a host shared with other work that spinning takes
// a core away from the sequential parts between regions, which made two
// threads several times slower than one on a loaded machine. Blocking alone is
// no better the other way round: L2H runs about K short regions back to back
// (one per merge step, many of them tens of microseconds long), and waking a
// blocked thread costs about as much as such a region. So both sides wait in
// two phases: a short bounded spin (kSpin below, yielding the core while it
// spins), then a condition variable.
#ifndef DENDRO_CORE_L2H_WORKER_POOL_H_
#define DENDRO_CORE_L2H_WORKER_POOL_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace dendro {
namespace l2h_internal {

class WorkerPool {
 public:
  // How long an idle worker keeps polling for the next Run() before it
  // blocks, and how long Run() polls for the workers' last chunks.
  static constexpr std::chrono::microseconds kSpin{100};

  // `num_threads` >= 1 threads in all: the calling thread plus
  // num_threads - 1 workers.
  explicit WorkerPool(int num_threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(chunk, thread) once for every chunk in [0, num_chunks), on the
  // calling thread (thread 0) and the workers (threads 1..), and returns
  // when all calls have returned. Chunks are handed out in increasing order
  // to whichever thread is free; a worker that is not scheduled in time
  // simply gets none. Not reentrant.
  void Run(int64_t num_chunks, const std::function<void(int64_t, int)>& fn);

 private:
  struct Job;
  void WorkerLoop(int thread);
  static void Drain(Job& job, int thread);

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::shared_ptr<Job> job_;  // guarded by mu_
  // Written under mu_; read without it by spinning workers.
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> shutdown_{false};
  std::vector<std::thread> workers_;
};

}  // namespace l2h_internal
}  // namespace dendro

#endif  // DENDRO_CORE_L2H_WORKER_POOL_H_
