// Batcher: concurrent small Assign and Predict calls on one model version,
// evaluated together (dynamic batching).
//
// A single-row call pays the model's fixed costs (a matrix product for one
// row, its buffers, a pass over the classes) for one row; the same rows sent
// together cost a fraction per row. So calls that arrive while others are
// computing are coalesced: a call of fewer than `max_rows` rows joins the
// open batch of its key (the same model object and the same options) if its
// rows fit, or opens one and leads it. The leader waits until the batch is
// full or `max_delay` has passed since it opened, then for a serving-gate
// slot; calls keep joining until that slot is granted. Then the batch closes,
// its rows are stacked in joining order and evaluated once, and every member
// is given its own rows' share of the answer. With the default delay of 0 no
// call waits for company: batches form only from calls that would have
// waited for the gate anyway.
//
// The request layer sends a call here only when its model says batching pays
// (FittedModel::BatchingPays): rows that share no work gain nothing from
// waiting for each other.
//
// Deadlines and refusals stay per call: a member whose deadline passes before
// its batch closes leaves it (DEADLINE_EXCEEDED, uncomputed); a closed batch
// drops the members whose deadline has passed; a leader that the gate refuses
// or whose deadline passes at the gate leaves with that refusal and the next
// member takes the lead. A failed evaluation fails every member with its
// status. The gate counts a batch as one computation and one waiting call, so
// at most --serving_queue batches (each of at most `max_rows` rows) wait.
//
// Thread-safe. Keys name models by address: a member holds its model alive
// while it waits, so an address cannot be reused by another model then.
#ifndef DENDRO_SERVER_API_BATCHER_H_
#define DENDRO_SERVER_API_BATCHER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/common/mutex.h"
#include "core/matrix/matrix.h"
#include "server/api/serving_gate.h"

namespace dendro::server {

class Batcher {
 public:
  struct Options {
    // The most rows one batch evaluates; calls of at least this many rows
    // are evaluated alone. 0 or 1: no batching (dendrod: --batch_max_rows).
    int64_t max_rows = 64;
    // How long a batch's leader waits for company before asking the gate
    // (dendrod: --batch_max_delay_us).
    absl::Duration max_delay = absl::ZeroDuration();
  };

  // Calls with equal keys may share a batch: the model (by address), what is
  // computed (`kind`) and the options that change the answer.
  struct Key {
    const void* model = nullptr;
    int32_t kind = 0;
    int32_t a = 0, b = 0, c = 0;
    friend bool operator==(const Key& x, const Key& y) {
      return x.model == y.model && x.kind == y.kind && x.a == y.a && x.b == y.b && x.c == y.c;
    }
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.model, k.kind, k.a, k.b, k.c);
    }
  };

  // One member's rows in the stacked matrix and where its answer goes (the
  // `out` it passed to Run; every member of a batch passes the same type,
  // which the key's `kind` must imply).
  struct Share {
    int64_t offset = 0;
    int64_t rows = 0;
    void* out = nullptr;
  };
  // Evaluates the stacked rows and fills every share's `out`.
  using Compute =
      absl::FunctionRef<absl::Status(const MatrixView& rows, absl::Span<const Share> shares)>;

  // `gate` may be null (no bound on computations).
  Batcher(Options options, ServingGate* gate);
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Evaluates `rows` (alone or with other calls of `key`) before `deadline`
  // and fills `out` through `compute` of whichever member leads. `what`
  // ("predict") starts the messages of refusals.
  absl::Status Run(const char* what, const Key& key, const MatrixView& rows, absl::Time deadline,
                   void* out, Compute compute);

  struct Stats {
    int64_t batches = 0;        // evaluations of two or more calls
    int64_t batched_calls = 0;  // calls answered by those
    int64_t expired = 0;        // members whose deadline passed in a batch
    int64_t waiting = 0;        // members of batches not computing yet (leaders too)
  };
  Stats stats() const;
  const Options& options() const { return options_; }

 private:
  struct Member;
  struct Batch;

  // Takes a gate slot and evaluates `batch` for its members, or leaves it.
  absl::Status Lead(const char* what, const std::shared_ptr<Batch>& batch, Member* self,
                    Compute compute);
  // Removes `m` from `batch`, and the batch from open_ once it is empty.
  void LeaveLocked(const std::shared_ptr<Batch>& batch, Member* m)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CloseLocked(const std::shared_ptr<Batch>& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Alone(const char* what, const MatrixView& rows, absl::Time deadline, void* out,
                     Compute compute);

  const Options options_;
  ServingGate* const gate_;
  mutable Mutex mu_;
  absl::flat_hash_map<Key, std::shared_ptr<Batch>> open_ ABSL_GUARDED_BY(mu_);
  int64_t batches_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t batched_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t expired_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t waiting_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_API_BATCHER_H_
