// StreamLimiter: the cap on open streams and the idle timeout, including
// the time the server itself is busy (Slot::Working), which is not idling.
#include "server/transport/stream_limiter.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "gtest/gtest.h"

namespace dendro::server {
namespace {

using namespace std::chrono_literals;

constexpr absl::Duration kIdle = absl::Milliseconds(40);

// Waits (up to the test's own timeout) until `done` holds.
template <typename Pred>
void Eventually(Pred done) {
  while (!done()) std::this_thread::sleep_for(5ms);
}

TEST(StreamLimiterTest, RefusesOverTheCapAndFreesOnRelease) {
  StreamLimiter limiter(2, kIdle);
  auto a = limiter.Acquire("upload", nullptr);
  auto b = limiter.Acquire("upload", nullptr);
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = limiter.Acquire("watch", nullptr);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(c.status().message().find("watch"), std::string::npos) << c.status();
  EXPECT_EQ(limiter.open_streams(), 2);
  a->reset();
  EXPECT_EQ(limiter.open_streams(), 1);
  EXPECT_TRUE(limiter.Acquire("upload", nullptr).ok());
}

TEST(StreamLimiterTest, AnIdleSlotIsCalledBackOnce) {
  StreamLimiter limiter(4, kIdle);
  std::atomic<int> calls{0};
  auto slot = limiter.Acquire("upload", [&] { calls.fetch_add(1); });
  ASSERT_TRUE(slot.ok());
  Eventually([&] { return (*slot)->timed_out(); });
  std::this_thread::sleep_for(4 * absl::ToChronoMilliseconds(kIdle));
  EXPECT_EQ(calls.load(), 1);
}

TEST(StreamLimiterTest, ASlotWithoutCallbackNeverTimesOut) {
  StreamLimiter limiter(4, kIdle);
  auto slot = limiter.Acquire("watch", nullptr);
  ASSERT_TRUE(slot.ok());
  std::this_thread::sleep_for(5 * absl::ToChronoMilliseconds(kIdle));
  EXPECT_FALSE((*slot)->timed_out());
}

// The server writing or committing for longer than the idle timeout does
// not count against the client; once it is done, the clock runs again.
TEST(StreamLimiterTest, WorkingStopsTheIdleClock) {
  StreamLimiter limiter(4, kIdle);
  std::atomic<int> calls{0};
  auto slot = limiter.Acquire("upload", [&] { calls.fetch_add(1); });
  ASSERT_TRUE(slot.ok());
  {
    const StreamLimiter::Slot::Working working(slot->get());
    std::this_thread::sleep_for(5 * absl::ToChronoMilliseconds(kIdle));
    EXPECT_FALSE((*slot)->timed_out());
    {
      const StreamLimiter::Slot::Working nested(slot->get());
    }
    std::this_thread::sleep_for(3 * absl::ToChronoMilliseconds(kIdle));
    EXPECT_FALSE((*slot)->timed_out()) << "a nested Working ended, the outer one still lives";
  }
  EXPECT_EQ(calls.load(), 0);
  Eventually([&] { return (*slot)->timed_out(); });
  EXPECT_EQ(calls.load(), 1);
}

}  // namespace
}  // namespace dendro::server
