// ServingGate: how many Predict and Assign computations run at once, how
// many calls may wait for one, and what becomes of a call whose deadline
// passes while it waits.
//
// Without it every call that arrives gets a handler thread and starts
// computing at once: under overload hundreds of threads share the cores,
// each answer takes longer, and calls whose clients have already given up
// are still computed. With it, at most `concurrency` computations run; up
// to `max_waiting` further calls wait in line, and one more is refused at
// once (RESOURCE_EXHAUSTED, naming the flag); a call whose deadline passes
// before its turn is dropped uncomputed (DEADLINE_EXCEEDED). So overload
// turns into refusals, not into seconds of latency for everyone.
// Thread-safe.
#ifndef DENDRO_SERVER_API_SERVING_GATE_H_
#define DENDRO_SERVER_API_SERVING_GATE_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/common/mutex.h"

namespace dendro::server {

class ServingGate {
 public:
  struct Options {
    int concurrency = 4;    // >= 1 (dendrod: --serving_concurrency)
    int max_waiting = 1024;  // >= 0 (dendrod: --serving_queue)
  };
  explicit ServingGate(Options options);
  ServingGate(const ServingGate&) = delete;
  ServingGate& operator=(const ServingGate&) = delete;

  // A computing slot, held until destroyed.
  class Slot {
   public:
    Slot(Slot&& other) noexcept : gate_(other.gate_) { other.gate_ = nullptr; }
    Slot& operator=(Slot&&) = delete;
    Slot(const Slot&) = delete;
    ~Slot();

   private:
    friend class ServingGate;
    explicit Slot(ServingGate* gate) : gate_(gate) {}
    ServingGate* gate_;
  };

  // Waits for a slot until `deadline`. `what` ("predict") starts the
  // messages of the refusals above; a deadline already past is refused
  // without waiting.
  absl::StatusOr<Slot> Enter(const char* what, absl::Time deadline);

  // For threads that must not wait: a slot at once when one is free and no
  // call waits for one; otherwise nullopt, and nothing is counted (the
  // caller may then Enter from a thread that can wait). A deadline already
  // past is refused as Enter refuses it.
  absl::StatusOr<std::optional<Slot>> TryEnter(const char* what, absl::Time deadline);

  struct Stats {
    int64_t computing = 0;
    int64_t waiting = 0;
    int64_t refused = 0;  // the line was full
    int64_t expired = 0;  // the deadline passed first
  };
  Stats stats() const;
  const Options& options() const { return options_; }

 private:
  void Leave();

  const Options options_;
  mutable Mutex mu_;
  CondVar freed_;
  int computing_ ABSL_GUARDED_BY(mu_) = 0;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t expired_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_API_SERVING_GATE_H_
