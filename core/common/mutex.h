// Mutex: a reader-writer lock whose use the compiler checks.
//
// Members a Mutex protects are declared ABSL_GUARDED_BY(mu_), and functions
// that expect it held ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_); clang's
// -Wthread-safety then proves every access holds the lock (the test command
// runs that check). The lock itself is std::shared_mutex (a pthread
// rwlock): ThreadSanitizer sees its acquire and release, which it cannot for
// absl::Mutex from Debian's uninstrumented Abseil, and no deadlock graph is
// kept on each acquisition. A thin, annotated wrapper over the standard
// lock, as LevelDB's port::Mutex is.
#ifndef DENDRO_CORE_COMMON_MUTEX_H_
#define DENDRO_CORE_COMMON_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>

#include "absl/base/thread_annotations.h"

namespace dendro {

class CondVar;

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  void ReaderLock() ABSL_SHARED_LOCK_FUNCTION() { mu_.lock_shared(); }
  void ReaderUnlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock_shared(); }

 private:
  friend class CondVar;
  std::shared_mutex mu_;
};

// A condition variable for a Mutex held exclusively.
class CondVar {
 public:
  // Releases `mu` while waiting; holds it again on return. Wakes on a
  // Signal, spuriously, or (WaitUntil) at `deadline`; returns false when the
  // deadline passed.
  void Wait(Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::shared_mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  bool WaitUntil(Mutex* mu, std::chrono::steady_clock::time_point deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::shared_mutex> lock(mu->mu_, std::adopt_lock);
    const bool woken = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return woken;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable_any cv_;
};

// Holds `mu` exclusively for its scope.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// Holds `mu` shared (with other readers) for its scope.
class ABSL_SCOPED_LOCKABLE ReaderMutexLock {
 public:
  explicit ReaderMutexLock(Mutex* mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->ReaderLock();
  }
  ~ReaderMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->ReaderUnlock(); }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;

 private:
  Mutex* const mu_;
};

}  // namespace dendro

#endif  // DENDRO_CORE_COMMON_MUTEX_H_
