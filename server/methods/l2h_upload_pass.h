// L2H's upload preparation (server/storage/upload_preparation.h): L2hUploadPass runs
// L2H's first pass (core/l2h/first_pass.h) over an upload's data while it
// arrives, on a thread of its own, so that an L2H job on the dataset starts
// at its merges (DatasetHeader.prepare = "l2h"). L2hUploadPreparer() offers
// it to the dataset store.
//
// The upload's thread hands over each data chunk once it is written: Take
// moves the bytes out of the request, without a copy. The pass's thread
// turns whole rows into statistics and carries a row split between chunks
// (chunk boundaries may fall anywhere, even inside a float).
//
// The pass only takes CPU the upload leaves over: its thread runs at the
// lowest scheduling priority (nice 19), and once more than kMaxQueuedBytes
// wait for it, it stops there rather than slowing the upload: the rows it
// has done are kept, and the job passes over the rest itself (RunL2h takes
// a first pass of the first rows). So the memory it adds is bounded, and an
// upload never waits for it except for the chunks still queued when the
// last one arrives. The chunks it is given must already be validated: a
// non-finite value fails the pass, not the upload.
#ifndef DENDRO_SERVER_METHODS_L2H_UPLOAD_PASS_H_
#define DENDRO_SERVER_METHODS_L2H_UPLOAD_PASS_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "core/common/mutex.h"
#include "core/l2h/first_pass.h"
#include "server/storage/upload_preparation.h"

namespace dendro::server {

class L2hUploadPass {
 public:
  static constexpr int64_t kMaxQueuedBytes = int64_t{64} << 20;

  // For rows x cols float32 data (rows >= 1, 2 <= cols <= 2^30).
  L2hUploadPass(int64_t rows, int32_t cols);
  // Stops the thread; an unfinished pass is dropped.
  ~L2hUploadPass();
  L2hUploadPass(const L2hUploadPass&) = delete;
  L2hUploadPass& operator=(const L2hUploadPass&) = delete;

  // Takes the next data chunk's bytes, leaving *bytes empty. Never blocks
  // for long: a pass that has fallen kMaxQueuedBytes behind stops taking
  // chunks.
  void Take(std::string* bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until every chunk taken is done. The pass if it is complete
  // (every announced row arrived), or if it stopped behind the upload the
  // rows it did (with *behind, if given, saying how far it got); otherwise
  // the reason there is none.
  absl::StatusOr<std::shared_ptr<const L2hFirstPass>> Finish(std::string* behind = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Work() ABSL_LOCKS_EXCLUDED(mu_);
  // Adds the whole rows of `chunk` to the pass (on the pass's thread).
  absl::Status Consume(std::string& chunk);
  // Records the first failure and drops the queued chunks.
  void FailLocked(absl::Status why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t row_bytes_;
  std::shared_ptr<L2hFirstPass> pass_;
  std::string carry_;  // the start of a row split between chunks

  Mutex mu_;
  CondVar changed_;
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  int64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;  // a chunk is being consumed
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);       // the first failure
  int64_t behind_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // > 0 once it stopped behind
  std::thread thread_;                             // last: started once the rest exists
};

// prepare = "l2h": at least 2 columns; an L2hUploadPass when the columns fit
// L2hFirstPass (<= 2^30). Its result holds the pass; a pass that did no row
// is not kept.
const UploadPreparer& L2hUploadPreparer();
// The first pass a dataset's preparation left (LoadedDataset::prepared()),
// or null when it has none or another method's.
const L2hFirstPass* L2hFirstPassOf(const PreparedData* prepared);

}  // namespace dendro::server

#endif  // DENDRO_SERVER_METHODS_L2H_UPLOAD_PASS_H_
