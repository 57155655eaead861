// Dynamic batching (server/batcher.h): calls that wait together are computed
// together, each gets its own rows' answer, batches respect their row bound
// and keys, and deadlines, refusals and failures stay per call.
#include "server/batcher.h"

#include <atomic>
#include <optional>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dendro::server {
namespace {

using ::testing::HasSubstr;

// Polls until `pred` holds (at most 30 s: a bound for a loaded machine, not
// a timing assertion).
template <typename Pred>
bool Eventually(Pred pred) {
  const absl::Time until = absl::Now() + absl::Seconds(30);
  while (absl::Now() < until) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return false;
}

// One call's rows: `n` rows of 3 columns, row r = (id, r, 0).
struct Rows {
  Rows(float id, int n) : data(3 * n) {
    for (int r = 0; r < n; ++r) {
      data[3 * r] = id;
      data[3 * r + 1] = static_cast<float>(r);
    }
  }
  MatrixView view() const { return MatrixView(data.data(), data.size() / 3, 3); }
  std::vector<float> data;
};

// The answer of a fake model: every row's first two columns, and the sizes
// of the evaluations it was part of.
struct Answer {
  std::vector<std::pair<float, float>> rows;
};

class Recorder {
 public:
  // Fills each share with its rows (as read from the stacked matrix).
  absl::Status Compute(const MatrixView& all, absl::Span<const Batcher::Share> shares) {
    sizes_.push_back(all.rows());  // callers serialise through the gate below
    for (const Batcher::Share& s : shares) {
      auto* out = static_cast<Answer*>(s.out);
      for (int64_t r = s.offset; r < s.offset + s.rows; ++r) {
        out->rows.emplace_back(all(r, 0), all(r, 1));
      }
    }
    return absl::OkStatus();
  }
  const std::vector<int64_t>& sizes() const { return sizes_; }

 private:
  std::vector<int64_t> sizes_;
};

absl::Status RunOne(Batcher& b, Recorder& rec, const Batcher::Key& key, const Rows& rows,
                    Answer* out, absl::Time deadline = absl::InfiniteFuture()) {
  return b.Run("predict", key, rows.view(), deadline, out,
               [&rec](const MatrixView& all, absl::Span<const Batcher::Share> shares) {
                 return rec.Compute(all, shares);
               });
}

void ExpectOwnRows(const Answer& a, float id, int n) {
  ASSERT_EQ(a.rows.size(), static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(a.rows[r].first, id);
    EXPECT_EQ(a.rows[r].second, static_cast<float>(r));
  }
}

TEST(BatcherTest, CallsWaitingForTheGateAreComputedTogetherEachWithItsOwnRows) {
  ServingGate gate({/*concurrency=*/1, /*max_waiting=*/8});
  Batcher batcher({/*max_rows=*/64, absl::ZeroDuration()}, &gate);
  Recorder rec;
  const Batcher::Key key{&rec, 1};
  auto held = gate.Enter("predict", absl::InfiniteFuture());
  ASSERT_TRUE(held.ok());
  constexpr int kCalls = 6;
  std::vector<Rows> rows;
  for (int i = 0; i < kCalls; ++i) rows.emplace_back(static_cast<float>(i), 1 + i % 3);
  std::vector<Answer> answers(kCalls);
  std::vector<std::thread> callers;
  for (int i = 0; i < kCalls; ++i) {
    callers.emplace_back(
        [&, i] { EXPECT_TRUE(RunOne(batcher, rec, key, rows[i], &answers[i]).ok()); });
  }
  // One leader waits at the gate; the five others joined its batch.
  ASSERT_TRUE(Eventually([&] { return batcher.stats().waiting == kCalls; }));
  EXPECT_EQ(gate.stats().waiting, 1);
  { auto release = std::move(*held); }
  for (std::thread& t : callers) t.join();
  for (int i = 0; i < kCalls; ++i) ExpectOwnRows(answers[i], static_cast<float>(i), 1 + i % 3);
  int64_t rows_computed = 0;
  for (int64_t s : rec.sizes()) rows_computed += s;
  EXPECT_EQ(rows_computed, 12);  // every row once
  EXPECT_EQ(rec.sizes(), std::vector<int64_t>{12});
  EXPECT_GE(batcher.stats().batches, 1);
  EXPECT_GE(batcher.stats().batched_calls, 2);
}

TEST(BatcherTest, ABatchNeverExceedsMaxRowsAndLargeCallsGoAlone) {
  ServingGate gate({/*concurrency=*/1, /*max_waiting=*/64});
  Batcher batcher({/*max_rows=*/8, absl::ZeroDuration()}, &gate);
  Recorder rec;
  const Batcher::Key key{&rec, 1};
  auto held = gate.Enter("predict", absl::InfiniteFuture());
  ASSERT_TRUE(held.ok());
  constexpr int kCalls = 12;
  std::vector<Rows> rows;
  for (int i = 0; i < kCalls; ++i) rows.emplace_back(static_cast<float>(i), i == 0 ? 9 : 3);
  std::vector<Answer> answers(kCalls);
  std::vector<std::thread> callers;
  for (int i = 0; i < kCalls; ++i) {
    callers.emplace_back(
        [&, i] { EXPECT_TRUE(RunOne(batcher, rec, key, rows[i], &answers[i]).ok()); });
  }
  // The 9-row call waits at the gate alone; the 33 other rows in batches of
  // at most 8 rows, each batch's leader at the gate too.
  ASSERT_TRUE(Eventually([&] { return batcher.stats().waiting == kCalls - 1; }));
  { auto release = std::move(*held); }
  for (std::thread& t : callers) t.join();
  for (int i = 0; i < kCalls; ++i) ExpectOwnRows(answers[i], static_cast<float>(i), i == 0 ? 9 : 3);
  int64_t rows_computed = 0;
  for (int64_t s : rec.sizes()) {
    // The 9-row call alone; every batch of 3-row calls within 8 rows.
    EXPECT_TRUE(s == 9 || s <= 8) << s;
    rows_computed += s;
  }
  EXPECT_EQ(rows_computed, 9 + 11 * 3);
}

TEST(BatcherTest, CallsWithDifferentKeysAreNeverMixed) {
  ServingGate gate({/*concurrency=*/1, /*max_waiting=*/8});
  Batcher batcher({/*max_rows=*/64, absl::ZeroDuration()}, &gate);
  Recorder rec;
  auto held = gate.Enter("predict", absl::InfiniteFuture());
  ASSERT_TRUE(held.ok());
  std::vector<Rows> rows;
  for (int i = 0; i < 6; ++i) rows.emplace_back(static_cast<float>(i), 1);
  std::vector<Answer> answers(6);
  std::vector<std::thread> callers;
  for (int i = 0; i < 6; ++i) {
    // Calls 0, 2, 4 on one model, 1, 3, 5 on another (the keys differ in `c`).
    const Batcher::Key key{&rec, 1, 0, 0, i % 2};
    callers.emplace_back(
        [&, i, key] { EXPECT_TRUE(RunOne(batcher, rec, key, rows[i], &answers[i]).ok()); });
  }
  ASSERT_TRUE(Eventually([&] { return batcher.stats().waiting == 6; }));
  ASSERT_TRUE(Eventually([&] { return gate.stats().waiting == 2; }));  // one leader per key
  { auto release = std::move(*held); }
  for (std::thread& t : callers) t.join();
  for (int i = 0; i < 6; ++i) ExpectOwnRows(answers[i], static_cast<float>(i), 1);
  for (int64_t s : rec.sizes()) EXPECT_LE(s, 3);
}

TEST(BatcherTest, AMemberWhoseDeadlinePassesLeavesItsBatchUncomputed) {
  ServingGate gate({/*concurrency=*/1, /*max_waiting=*/8});
  Batcher batcher({/*max_rows=*/64, absl::ZeroDuration()}, &gate);
  Recorder rec;
  const Batcher::Key key{&rec, 1};
  auto held = gate.Enter("predict", absl::InfiniteFuture());
  ASSERT_TRUE(held.ok());
  Rows lead_rows(1, 1), late_rows(2, 1);
  Answer lead, late;
  std::thread leader([&] { EXPECT_TRUE(RunOne(batcher, rec, key, lead_rows, &lead).ok()); });
  ASSERT_TRUE(Eventually([&] { return gate.stats().waiting == 1; }));
  const absl::Status s =
      RunOne(batcher, rec, key, late_rows, &late, absl::Now() + absl::Milliseconds(20));
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("predict: "));
  EXPECT_EQ(batcher.stats().expired, 1);
  EXPECT_EQ(batcher.stats().waiting, 1);  // the leader
  { auto release = std::move(*held); }
  leader.join();
  ExpectOwnRows(lead, 1, 1);
  EXPECT_TRUE(late.rows.empty());
  ASSERT_EQ(rec.sizes().size(), 1u);
  EXPECT_EQ(rec.sizes()[0], 1);  // the late call's row was not computed
}

TEST(BatcherTest, ALeaderThatExpiresAtTheGateHandsTheBatchOn) {
  ServingGate gate({/*concurrency=*/1, /*max_waiting=*/8});
  Batcher batcher({/*max_rows=*/64, absl::ZeroDuration()}, &gate);
  Recorder rec;
  const Batcher::Key key{&rec, 1};
  auto held = gate.Enter("predict", absl::InfiniteFuture());
  ASSERT_TRUE(held.ok());
  Rows lead_rows(1, 1), other_rows(2, 2);
  Answer lead, other;
  absl::Status lead_status;
  std::thread leader([&] {
    lead_status =
        RunOne(batcher, rec, key, lead_rows, &lead, absl::Now() + absl::Milliseconds(300));
  });
  ASSERT_TRUE(Eventually([&] { return gate.stats().waiting == 1; }));
  std::thread follower([&] { EXPECT_TRUE(RunOne(batcher, rec, key, other_rows, &other).ok()); });
  leader.join();  // expired at the gate
  EXPECT_TRUE(absl::IsDeadlineExceeded(lead_status)) << lead_status;
  // The follower asks the gate in its turn.
  ASSERT_TRUE(Eventually([&] { return gate.stats().waiting == 1; }));
  { auto release = std::move(*held); }
  follower.join();
  ExpectOwnRows(other, 2, 2);
  ASSERT_EQ(rec.sizes().size(), 1u);
  EXPECT_EQ(rec.sizes()[0], 2);
}

TEST(BatcherTest, AFailedEvaluationFailsEveryMember) {
  ServingGate gate({/*concurrency=*/1, /*max_waiting=*/8});
  Batcher batcher({/*max_rows=*/64, absl::ZeroDuration()}, &gate);
  int key_target = 0;
  const Batcher::Key key{&key_target, 1};
  auto held = gate.Enter("predict", absl::InfiniteFuture());
  ASSERT_TRUE(held.ok());
  std::atomic<int> evaluations{0};
  std::vector<Rows> rows;
  for (int i = 0; i < 4; ++i) rows.emplace_back(static_cast<float>(i), 1);
  std::vector<absl::Status> got(4);
  std::vector<std::thread> callers;
  for (int i = 0; i < 4; ++i) {
    callers.emplace_back([&, i] {
      Answer a;
      got[i] = batcher.Run("predict", key, rows[i].view(), absl::InfiniteFuture(), &a,
                           [&](const MatrixView&, absl::Span<const Batcher::Share>) {
                             ++evaluations;
                             return absl::InvalidArgumentError("row 0 is not finite");
                           });
    });
  }
  ASSERT_TRUE(Eventually([&] { return batcher.stats().waiting == 4; }));
  { auto release = std::move(*held); }
  for (std::thread& t : callers) t.join();
  for (const absl::Status& s : got) EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(evaluations.load(), 1);
}

TEST(BatcherTest, ALeaderWaitsForCompanyUpToTheDelayAndGoesWhenTheBatchIsFull) {
  // No gate: the delay alone brings the two calls together; a full batch
  // ends the wait (the delay is far longer than the test).
  Batcher batcher({/*max_rows=*/2, absl::Hours(1)}, nullptr);
  Recorder rec;
  const Batcher::Key key{&rec, 1};
  Rows a_rows(1, 1), b_rows(2, 1);
  Answer a, b;
  std::thread first([&] { EXPECT_TRUE(RunOne(batcher, rec, key, a_rows, &a).ok()); });
  std::thread second([&] { EXPECT_TRUE(RunOne(batcher, rec, key, b_rows, &b).ok()); });
  first.join();
  second.join();
  ExpectOwnRows(a, 1, 1);
  ExpectOwnRows(b, 2, 1);
  ASSERT_EQ(rec.sizes().size(), 1u);
  EXPECT_EQ(rec.sizes()[0], 2);
  EXPECT_EQ(batcher.stats().batches, 1);
}

TEST(BatcherTest, BatchingOffComputesEveryCallAlone) {
  ServingGate gate({/*concurrency=*/1, /*max_waiting=*/8});
  Batcher batcher({/*max_rows=*/0, absl::ZeroDuration()}, &gate);
  Recorder rec;
  const Batcher::Key key{&rec, 1};
  auto held = gate.Enter("predict", absl::InfiniteFuture());
  ASSERT_TRUE(held.ok());
  std::vector<Rows> rows;
  for (int i = 0; i < 4; ++i) rows.emplace_back(static_cast<float>(i), 1);
  std::vector<Answer> answers(4);
  std::vector<std::thread> callers;
  for (int i = 0; i < 4; ++i) {
    callers.emplace_back(
        [&, i] { EXPECT_TRUE(RunOne(batcher, rec, key, rows[i], &answers[i]).ok()); });
  }
  ASSERT_TRUE(Eventually([&] { return gate.stats().waiting == 4; }));
  { auto release = std::move(*held); }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(rec.sizes(), std::vector<int64_t>(4, 1));
  EXPECT_EQ(batcher.stats().batches, 0);
}

}  // namespace
}  // namespace dendro::server
