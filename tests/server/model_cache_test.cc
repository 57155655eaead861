// ModelCache: LRU order, the byte bound, oversize entries, erase, stats.
#include "server/models/model_cache.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace dendro::server {
namespace {

// A stand-in model; the cache never calls into it.
class FakeModel final : public FittedModel {
 public:
  explicit FakeModel(int id) : id_(id) {}
  int id() const { return id_; }
  std::string_view method() const override { return "fake"; }
  const Hierarchy& tree() const override { std::abort(); }
  int64_t input_dim() const override { return 1; }
  absl::Status Save(const std::string&) const override { return absl::OkStatus(); }
  absl::StatusOr<std::vector<int32_t>> AssignLeaves(const MatrixView&) const override {
    return std::vector<int32_t>{};
  }

 private:
  int id_;
};

ModelCache::Key K(int v) { return {"m", v}; }
CachedModel M(int id) { return {std::make_shared<FakeModel>(id), nullptr}; }
int IdOf(const CachedModel& m) {
  return m.model == nullptr ? -1 : static_cast<const FakeModel&>(*m.model).id();
}

TEST(ModelCache, HitsAndMisses) {
  ModelCache cache(100);
  EXPECT_EQ(IdOf(cache.Get(K(1))), -1);
  EXPECT_TRUE(cache.Put(K(1), M(1), 10));
  EXPECT_EQ(IdOf(cache.Get(K(1))), 1);
  EXPECT_EQ(IdOf(cache.Get({"other", 1})), -1);
  const ModelCache::Stats s = cache.stats();
  EXPECT_EQ(s.entries, 1);
  EXPECT_EQ(s.bytes, 10);
  EXPECT_EQ(s.capacity, 100);
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(s.evictions, 0);
}

TEST(ModelCache, EvictsLeastRecentlyUsedToStayWithinBytes) {
  ModelCache cache(100);
  ASSERT_TRUE(cache.Put(K(1), M(1), 40));
  ASSERT_TRUE(cache.Put(K(2), M(2), 40));
  ASSERT_EQ(IdOf(cache.Get(K(1))), 1);  // 2 is now the least recently used
  ASSERT_TRUE(cache.Put(K(3), M(3), 40));
  EXPECT_EQ(IdOf(cache.Get(K(1))), 1);
  EXPECT_EQ(IdOf(cache.Get(K(2))), -1);
  EXPECT_EQ(IdOf(cache.Get(K(3))), 3);
  EXPECT_EQ(cache.stats().bytes, 80);
  EXPECT_EQ(cache.stats().evictions, 1);
  // One large entry pushes out both others.
  ASSERT_TRUE(cache.Put(K(4), M(4), 100));
  EXPECT_EQ(cache.stats().entries, 1);
  EXPECT_EQ(cache.stats().bytes, 100);
  EXPECT_EQ(cache.stats().evictions, 3);
}

TEST(ModelCache, EntryLargerThanCapacityIsNotKept) {
  ModelCache cache(100);
  ASSERT_TRUE(cache.Put(K(1), M(1), 50));
  EXPECT_FALSE(cache.Put(K(2), M(2), 101));
  EXPECT_EQ(IdOf(cache.Get(K(2))), -1);
  EXPECT_EQ(IdOf(cache.Get(K(1))), 1);  // nothing was evicted for it
  EXPECT_EQ(cache.stats().bytes, 50);
}

TEST(ModelCache, PutReplacesAndEraseRemoves) {
  ModelCache cache(100);
  ASSERT_TRUE(cache.Put(K(1), M(1), 30));
  ASSERT_TRUE(cache.Put(K(1), M(11), 20));
  EXPECT_EQ(IdOf(cache.Get(K(1))), 11);
  EXPECT_EQ(cache.stats().bytes, 20);
  EXPECT_EQ(cache.stats().entries, 1);
  cache.Erase(K(1));
  cache.Erase(K(7));  // absent: no effect
  EXPECT_EQ(IdOf(cache.Get(K(1))), -1);
  EXPECT_EQ(cache.stats().bytes, 0);
  EXPECT_EQ(cache.stats().entries, 0);
}

TEST(ModelCache, EvictedModelStaysValidForItsHolder) {
  ModelCache cache(10);
  ASSERT_TRUE(cache.Put(K(1), M(1), 10));
  CachedModel held = cache.Get(K(1));
  ASSERT_TRUE(cache.Put(K(2), M(2), 10));
  EXPECT_EQ(IdOf(cache.Get(K(1))), -1);
  EXPECT_EQ(IdOf(held), 1);
}

}  // namespace
}  // namespace dendro::server
