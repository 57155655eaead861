// Eventually(pred): polls `pred` every millisecond until it holds, for at
// most 30 s. For tests that wait for other threads to reach a state; the
// bound is for a loaded machine, never a timing assertion.
#ifndef DENDRO_TESTS_SERVER_EVENTUALLY_H_
#define DENDRO_TESTS_SERVER_EVENTUALLY_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace dendro::testing {

template <typename Pred>
bool Eventually(Pred pred) {
  const absl::Time until = absl::Now() + absl::Seconds(30);
  while (absl::Now() < until) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return false;
}

}  // namespace dendro::testing

#endif  // DENDRO_TESTS_SERVER_EVENTUALLY_H_
