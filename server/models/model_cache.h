// ModelCache: loaded models kept in memory, bounded in bytes, least recently
// used out first.
//
// Keys are (model name, version). Each entry is charged the bytes its loader
// reported (ModelRegistry uses the size of the model's artifact files: the
// arrays they hold are what the loaded model keeps in memory; files the
// method's Load leaves on disk are not counted). Invariants,
// under the lock:
//   * bytes() == the sum of the charges of the entries held;
//   * bytes() <= capacity() after every Put, except that a single entry
//     larger than the capacity is never held (Put drops it and says so);
//   * an evicted model stays alive for as long as callers hold its
//     shared_ptr: eviction only stops the cache from keeping it.
// Thread-safe.
#ifndef DENDRO_SERVER_MODELS_MODEL_CACHE_H_
#define DENDRO_SERVER_MODELS_MODEL_CACHE_H_

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "core/common/mutex.h"
#include "core/diff/stable_ids.h"
#include "server/methods/method.h"

namespace dendro::server {

// A loaded version: the method's model and the ids the registry gave its
// clusters (server/models/model_registry.h).
struct CachedModel {
  std::shared_ptr<const FittedModel> model;  // null: not cached
  std::shared_ptr<const StableIds> stable_ids;
};

class ModelCache {
 public:
  using Key = std::pair<std::string, int64_t>;

  // capacity_bytes > 0.
  explicit ModelCache(int64_t capacity_bytes);
  ModelCache(const ModelCache&) = delete;
  ModelCache& operator=(const ModelCache&) = delete;

  // The cached model, now the most recently used; a null model on a miss.
  CachedModel Get(const Key& key) ABSL_LOCKS_EXCLUDED(mu_);
  // Caches `model` charged `bytes`, evicting least recently used entries
  // until it fits. Returns false (and caches nothing) when `bytes` alone
  // exceeds the capacity. Replaces an entry with the same key.
  bool Put(const Key& key, CachedModel model, int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops `key` if present.
  void Erase(const Key& key) ABSL_LOCKS_EXCLUDED(mu_);

  struct Stats {
    int64_t entries = 0;
    int64_t bytes = 0;
    int64_t capacity = 0;
    int64_t hits = 0;
    int64_t misses = 0;
    int64_t evictions = 0;  // entries dropped to make room
  };
  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    Key key;
    CachedModel model;
    int64_t bytes = 0;
  };
  using List = std::list<Entry>;  // most recently used first

  void EraseLocked(List::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t capacity_;
  mutable Mutex mu_;
  List lru_ ABSL_GUARDED_BY(mu_);
  std::map<Key, List::iterator> index_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t evictions_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_MODELS_MODEL_CACHE_H_
