#include "server/base/elastic_pool.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace dendro::server {

ElasticPool::ElasticPool(Options options) : options_(options) {}

ElasticPool::~ElasticPool() {
  MutexLock lock(&mu_);
  stopping_ = true;
  wake_.SignalAll();
  // Threads run the queued tasks before they exit (see Work).
  while (alive_ > 0) stopped_.Wait(&mu_);
  ReapLocked();
}

bool ElasticPool::Schedule(std::function<void()> task) {
  MutexLock lock(&mu_);
  if (stopping_) return false;
  ReapLocked();
  // Every queued task will be taken by a waiting thread: start one only when
  // there are not more of those than tasks already queued.
  if (static_cast<int>(tasks_.size()) < idle_) {
    tasks_.push_back(std::move(task));
    wake_.Signal();
    return true;
  }
  if (alive_ >= options_.max_threads) {
    ++refused_;
    return false;
  }
  ++alive_;
  tasks_.push_back(std::move(task));
  threads_.emplace_back([this] { Work(); });
  return true;
}

void ElasticPool::Work() {
  MutexLock lock(&mu_);
  for (;;) {
    while (!tasks_.empty()) {
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      mu_.Unlock();
      task();
      task = nullptr;  // what it holds is released before the thread waits
      mu_.Lock();
    }
    if (stopping_) break;
    ++idle_;
    const bool woken = wake_.WaitUntil(
        &mu_, std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(options_.idle_timeout));
    --idle_;
    if (!woken && tasks_.empty()) break;  // nothing to do for the idle timeout
  }
  --alive_;
  exited_.push_back(std::this_thread::get_id());
  stopped_.SignalAll();
}

void ElasticPool::ReapLocked() {
  for (const std::thread::id id : exited_) {
    auto it = std::find_if(threads_.begin(), threads_.end(),
                           [id](const std::thread& t) { return t.get_id() == id; });
    // It has released mu_ (which this thread holds) and returns next.
    it->join();
    threads_.erase(it);
  }
  exited_.clear();
}

ElasticPool::Stats ElasticPool::stats() const {
  ReaderMutexLock lock(&mu_);
  return Stats{alive_, alive_ - idle_, refused_};
}

}  // namespace dendro::server
