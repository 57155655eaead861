#include "core/l2h/worker_pool.h"

#include <utility>

namespace dendro {
namespace l2h_internal {
namespace {

// Polls done() until it is true or kSpin has passed; true if it became true.
// Between polls the thread yields, so a spinning thread gives its core to
// any other runnable thread.
template <typename Done>
bool SpinUntil(Done&& done) {
  const auto deadline = std::chrono::steady_clock::now() + WorkerPool::kSpin;
  for (int i = 1;; ++i) {
    if (done()) return true;
    if ((i & 15) == 0) {
      if (std::chrono::steady_clock::now() >= deadline) return done();
      std::this_thread::yield();
    }
  }
}

}  // namespace

// One Run() call. Workers that start late may still hold it after Run()
// returned; they then find no chunk left and never touch `fn`.
struct WorkerPool::Job {
  const std::function<void(int64_t, int)>* fn = nullptr;
  int64_t num_chunks = 0;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::mutex mu;
  std::condition_variable done_cv;
};

WorkerPool::WorkerPool(int num_threads) {
  for (int t = 1; t < num_threads; ++t) workers_.emplace_back([this, t] { WorkerLoop(t); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_.store(true, std::memory_order_release);
  }
  work_cv_.notify_all();
  for (std::thread& w : workers_) w.join();
}

void WorkerPool::Drain(Job& job, int thread) {
  for (;;) {
    const int64_t chunk = job.next.fetch_add(1, std::memory_order_relaxed);
    if (chunk >= job.num_chunks) return;
    (*job.fn)(chunk, thread);
    if (job.done.fetch_add(1, std::memory_order_acq_rel) + 1 == job.num_chunks) {
      std::lock_guard<std::mutex> lock(job.mu);
      job.done_cv.notify_all();
    }
  }
}

void WorkerPool::WorkerLoop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    SpinUntil([&] {
      return generation_.load(std::memory_order_acquire) != seen ||
             shutdown_.load(std::memory_order_acquire);
    });
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] {
        return shutdown_.load(std::memory_order_relaxed) ||
               generation_.load(std::memory_order_relaxed) != seen;
      });
      if (shutdown_.load(std::memory_order_relaxed)) return;
      seen = generation_.load(std::memory_order_relaxed);
      job = job_;
    }
    Drain(*job, thread);
  }
}

void WorkerPool::Run(int64_t num_chunks, const std::function<void(int64_t, int)>& fn) {
  if (num_chunks <= 0) return;
  if (workers_.empty() || num_chunks == 1) {
    for (int64_t c = 0; c < num_chunks; ++c) fn(c, 0);
    return;
  }
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->num_chunks = num_chunks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = job;
    generation_.fetch_add(1, std::memory_order_release);
  }
  // Cheap when every worker is spinning: glibc's notify makes no system
  // call without waiters.
  work_cv_.notify_all();
  Drain(*job, 0);
  auto all_done = [&] {
    return job->done.load(std::memory_order_acquire) == job->num_chunks;
  };
  if (SpinUntil(all_done)) return;
  std::unique_lock<std::mutex> lock(job->mu);
  job->done_cv.wait(lock, all_done);
}

}  // namespace l2h_internal
}  // namespace dendro
