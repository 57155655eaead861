// The serving gate (server/api/serving_gate.h): slots, the bounded line, and
// calls whose deadline passes while they wait.
#include "server/api/serving_gate.h"

#include <atomic>
#include <optional>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/eventually.h"

namespace dendro::server {
namespace {

using ::dendro::testing::Eventually;
using ::testing::HasSubstr;

TEST(ServingGateTest, AtMostConcurrencyComputeAndTheOthersWaitTheirTurn) {
  ServingGate gate({/*concurrency=*/2, /*max_waiting=*/8});
  std::atomic<int> inside{0}, most{0}, done{0};
  std::atomic<bool> open{false};
  std::vector<std::thread> callers;
  for (int i = 0; i < 6; ++i) {
    callers.emplace_back([&] {
      auto slot = gate.Enter("predict", absl::InfiniteFuture());
      ASSERT_TRUE(slot.ok()) << slot.status();
      const int now = ++inside;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      while (!open.load()) std::this_thread::yield();
      --inside;
      ++done;
    });
  }
  ASSERT_TRUE(Eventually([&] { return gate.stats().waiting == 4; }));
  EXPECT_EQ(gate.stats().computing, 2);
  open.store(true);
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(done.load(), 6);
  EXPECT_EQ(most.load(), 2);
  EXPECT_EQ(gate.stats().computing, 0);
  EXPECT_EQ(gate.stats().waiting, 0);
}

TEST(ServingGateTest, AFullLineIsRefusedAtOnceNamingTheFlag) {
  ServingGate gate({/*concurrency=*/1, /*max_waiting=*/1});
  auto held = gate.Enter("predict", absl::InfiniteFuture());
  ASSERT_TRUE(held.ok());
  std::thread waiter([&] {
    auto slot = gate.Enter("predict", absl::InfiniteFuture());
    EXPECT_TRUE(slot.ok()) << slot.status();
  });
  ASSERT_TRUE(Eventually([&] { return gate.stats().waiting == 1; }));
  auto refused = gate.Enter("assign", absl::InfiniteFuture());
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status()));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("--serving_queue"));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("assign: "));
  EXPECT_EQ(gate.stats().refused, 1);
  { auto release = std::move(*held); }
  waiter.join();
}

TEST(ServingGateTest, ACallWhoseDeadlinePassesWhileWaitingIsNotLetIn) {
  ServingGate gate({/*concurrency=*/1, /*max_waiting=*/4});
  auto held = gate.Enter("predict", absl::InfiniteFuture());
  ASSERT_TRUE(held.ok());
  auto late = gate.Enter("predict", absl::Now() + absl::Milliseconds(20));
  EXPECT_TRUE(absl::IsDeadlineExceeded(late.status()));
  EXPECT_THAT(std::string(late.status().message()), HasSubstr("not computed"));
  // Already past on arrival, with a free slot: refused without computing.
  { auto release = std::move(*held); }
  auto past = gate.Enter("predict", absl::Now() - absl::Seconds(1));
  EXPECT_TRUE(absl::IsDeadlineExceeded(past.status()));
  EXPECT_EQ(gate.stats().expired, 2);
  EXPECT_EQ(gate.stats().waiting, 0);
  // The gate is free again.
  EXPECT_TRUE(gate.Enter("predict", absl::Now() + absl::Seconds(30)).ok());
}

TEST(ServingGateTest, AnExpiredWaiterPassesItsWakeUpOn) {
  ServingGate gate({/*concurrency=*/1, /*max_waiting=*/4});
  std::optional<absl::StatusOr<ServingGate::Slot>> held;
  held.emplace(gate.Enter("predict", absl::InfiniteFuture()));
  ASSERT_TRUE(held->ok());
  std::atomic<bool> patient_in{false};
  std::thread patient([&] {
    auto slot = gate.Enter("predict", absl::InfiniteFuture());
    EXPECT_TRUE(slot.ok());
    patient_in.store(true);
  });
  ASSERT_TRUE(Eventually([&] { return gate.stats().waiting == 1; }));
  EXPECT_TRUE(absl::IsDeadlineExceeded(
      gate.Enter("predict", absl::Now() + absl::Milliseconds(5)).status()));
  held.reset();
  patient.join();
  EXPECT_TRUE(patient_in.load());
}

// TryEnter, for threads that must not wait: a slot only when one is free and
// nobody is in line for one (it never jumps the line), and no count of a
// refusal or a waiter when it gets none.
TEST(ServingGateTest, TryEnterTakesAFreeSlotButNeverJumpsTheLine) {
  ServingGate gate({/*concurrency=*/2, /*max_waiting=*/4});
  std::optional<ServingGate::Slot> first = *gate.TryEnter("predict", absl::InfiniteFuture());
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(gate.stats().computing, 1);
  std::optional<ServingGate::Slot> second = *gate.TryEnter("predict", absl::InfiniteFuture());
  ASSERT_TRUE(second.has_value());
  EXPECT_FALSE(gate.TryEnter("predict", absl::InfiniteFuture())->has_value());  // both slots taken
  EXPECT_EQ(gate.stats().computing, 2);
  EXPECT_EQ(gate.stats().waiting, 0);
  EXPECT_EQ(gate.stats().refused, 0);
  std::atomic<bool> got{false}, release{false};
  std::thread waiter([&] {
    auto slot = gate.Enter("predict", absl::InfiniteFuture());
    EXPECT_TRUE(slot.ok()) << slot.status();
    got.store(true);
    while (!release.load()) std::this_thread::yield();  // holds its slot until told
  });
  ASSERT_TRUE(Eventually([&] { return gate.stats().waiting == 1; }));
  // A slot frees while someone waits: it is the waiter's, not TryEnter's.
  // (Until the waiter takes it, it is still in line; after, it holds it, so
  // both slots are taken again.)
  first.reset();
  EXPECT_FALSE(gate.TryEnter("predict", absl::InfiniteFuture())->has_value());
  ASSERT_TRUE(Eventually([&] { return got.load(); }));
  EXPECT_FALSE(gate.TryEnter("predict", absl::InfiniteFuture())->has_value());
  release.store(true);
  waiter.join();
  second.reset();
  EXPECT_TRUE(gate.TryEnter("predict", absl::InfiniteFuture())->has_value());
  EXPECT_EQ(gate.stats().computing, 0);
  // A deadline already past is refused, as Enter refuses it.
  EXPECT_TRUE(
      absl::IsDeadlineExceeded(gate.TryEnter("predict", absl::Now() - absl::Seconds(1)).status()));
}

}  // namespace
}  // namespace dendro::server
