#include "server/models/model_cache.h"

namespace dendro::server {

ModelCache::ModelCache(int64_t capacity_bytes) : capacity_(capacity_bytes) {}

CachedModel ModelCache::Get(const Key& key) {
  MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it == index_.end()) {
    ++misses_;
    return {};
  }
  ++hits_;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->model;
}

bool ModelCache::Put(const Key& key, CachedModel model, int64_t bytes) {
  MutexLock lock(&mu_);
  if (auto it = index_.find(key); it != index_.end()) EraseLocked(it->second);
  if (bytes > capacity_) return false;
  while (bytes_ + bytes > capacity_ && !lru_.empty()) {
    EraseLocked(std::prev(lru_.end()));
    ++evictions_;
  }
  lru_.push_front(Entry{key, std::move(model), bytes});
  index_[key] = lru_.begin();
  bytes_ += bytes;
  return true;
}

void ModelCache::Erase(const Key& key) {
  MutexLock lock(&mu_);
  if (auto it = index_.find(key); it != index_.end()) EraseLocked(it->second);
}

void ModelCache::EraseLocked(List::iterator it) {
  bytes_ -= it->bytes;
  index_.erase(it->key);
  lru_.erase(it);
}

ModelCache::Stats ModelCache::stats() const {
  MutexLock lock(&mu_);
  Stats s;
  s.entries = static_cast<int64_t>(lru_.size());
  s.bytes = bytes_;
  s.capacity = capacity_;
  s.hits = hits_;
  s.misses = misses_;
  s.evictions = evictions_;
  return s;
}

}  // namespace dendro::server
