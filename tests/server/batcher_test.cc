// Dynamic batching (server/api/batcher.h): calls that wait together are computed
// together, each gets its own rows' answer, batches respect their row bound
// and keys, and deadlines, refusals and failures stay per call.
#include "server/api/batcher.h"

#include <atomic>
#include <functional>
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

// A one-slot gate whose slot the test holds until Release().
struct HeldGate {
  explicit HeldGate(int max_waiting)
      : gate({/*concurrency=*/1, max_waiting}),
        held(gate.Enter("predict", absl::InfiniteFuture())) {
    EXPECT_TRUE(held.ok());
  }
  void Release() {
    if (held.ok()) auto release = std::move(*held);
    held = absl::CancelledError("released");
  }
  ServingGate gate;
  absl::StatusOr<ServingGate::Slot> held;
};

// Concurrent calls: call i sends `rows_of(i)` rows tagged i under
// `key_of(i)`; Join() waits for them and checks each got its own rows.
class Calls {
 public:
  // `held`, if any, is released before an early end joins the calls.
  Calls(Batcher& batcher, Recorder& rec, int n, const std::function<int(int)>& rows_of,
        const std::function<Batcher::Key(int)>& key_of, HeldGate* held)
      : held_(held), answers_(n) {
    for (int i = 0; i < n; ++i) rows_.emplace_back(static_cast<float>(i), rows_of(i));
    for (int i = 0; i < n; ++i) {
      threads_.emplace_back([&batcher, &rec, this, i, key = key_of(i)] {
        EXPECT_TRUE(RunOne(batcher, rec, key, rows_[i], &answers_[i]).ok());
      });
    }
  }
  ~Calls() {
    if (held_ != nullptr) held_->Release();
    Join();
  }
  void Join() {
    if (joined_) return;
    joined_ = true;
    for (std::thread& t : threads_) t.join();
    for (size_t i = 0; i < rows_.size(); ++i) {
      ExpectOwnRows(answers_[i], static_cast<float>(i), static_cast<int>(rows_[i].data.size() / 3));
    }
  }

 private:
  HeldGate* const held_;
  bool joined_ = false;
  std::vector<Rows> rows_;
  std::vector<Answer> answers_;
  std::vector<std::thread> threads_;
};

TEST(BatcherTest, CallsWaitingForTheGateAreComputedTogetherEachWithItsOwnRows) {
  HeldGate held(8);
  Batcher batcher({/*max_rows=*/64, absl::ZeroDuration()}, &held.gate);
  Recorder rec;
  constexpr int kCalls = 6;
  Calls calls(
      batcher, rec, kCalls, [](int i) { return 1 + i % 3; },
      [&rec](int) {
        return Batcher::Key{&rec, 1};
      },
      &held);
  // One leader waits at the gate; the five others joined its batch.
  ASSERT_TRUE(Eventually([&] { return batcher.stats().waiting == kCalls; }));
  EXPECT_EQ(held.gate.stats().waiting, 1);
  held.Release();
  calls.Join();
  EXPECT_EQ(rec.sizes(), std::vector<int64_t>{12});  // every row, once, in one evaluation
  EXPECT_EQ(batcher.stats().batches, 1);
  EXPECT_EQ(batcher.stats().batched_calls, kCalls);
}

TEST(BatcherTest, ABatchNeverExceedsMaxRowsAndLargeCallsGoAlone) {
  HeldGate held(64);
  Batcher batcher({/*max_rows=*/8, absl::ZeroDuration()}, &held.gate);
  Recorder rec;
  constexpr int kCalls = 12;
  Calls calls(
      batcher, rec, kCalls, [](int i) { return i == 0 ? 9 : 3; },
      [&rec](int) {
        return Batcher::Key{&rec, 1};
      },
      &held);
  // The 9-row call waits at the gate alone; the 33 other rows in batches of
  // at most 8 rows, each batch's leader at the gate too.
  ASSERT_TRUE(Eventually([&] { return batcher.stats().waiting == kCalls - 1; }));
  held.Release();
  calls.Join();
  int64_t rows_computed = 0;
  for (int64_t s : rec.sizes()) {
    // The 9-row call alone; every batch of 3-row calls within 8 rows.
    EXPECT_TRUE(s == 9 || s <= 8) << s;
    rows_computed += s;
  }
  EXPECT_EQ(rows_computed, 9 + 11 * 3);
}

TEST(BatcherTest, CallsWithDifferentKeysAreNeverMixed) {
  HeldGate held(8);
  Batcher batcher({/*max_rows=*/64, absl::ZeroDuration()}, &held.gate);
  Recorder rec;
  // Calls 0, 2, 4 on one model, 1, 3, 5 on another (the keys differ in `c`).
  Calls calls(
      batcher, rec, 6, [](int) { return 1; },
      [&rec](int i) {
        return Batcher::Key{&rec, 1, 0, 0, i % 2};
      },
      &held);
  ASSERT_TRUE(Eventually([&] { return batcher.stats().waiting == 6; }));
  ASSERT_TRUE(Eventually([&] { return held.gate.stats().waiting == 2; }));  // a leader per key
  held.Release();
  calls.Join();
  EXPECT_EQ(rec.sizes(), std::vector<int64_t>({3, 3}));
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
  HeldGate held(8);
  Batcher batcher({/*max_rows=*/0, absl::ZeroDuration()}, &held.gate);
  Recorder rec;
  Calls calls(
      batcher, rec, 4, [](int) { return 1; },
      [&rec](int) {
        return Batcher::Key{&rec, 1};
      },
      &held);
  ASSERT_TRUE(Eventually([&] { return held.gate.stats().waiting == 4; }));
  held.Release();
  calls.Join();
  EXPECT_EQ(rec.sizes(), std::vector<int64_t>(4, 1));
  EXPECT_EQ(batcher.stats().batches, 0);
}

}  // namespace
}  // namespace dendro::server
