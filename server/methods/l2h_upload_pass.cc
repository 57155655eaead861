#include "server/methods/l2h_upload_pass.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dendro::server {

L2hUploadPass::L2hUploadPass(int64_t rows, int32_t cols)
    : row_bytes_(int64_t{4} * cols),
      pass_(std::make_shared<L2hFirstPass>(rows, cols)),
      thread_([this] { Work(); }) {}

L2hUploadPass::~L2hUploadPass() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  changed_.SignalAll();
  thread_.join();
}

void L2hUploadPass::Take(std::string* bytes) {
  std::string chunk;
  chunk.swap(*bytes);
  const auto size = static_cast<int64_t>(chunk.size());
  if (size == 0) return;
  {
    MutexLock lock(&mu_);
    // Failed or stopped behind: the rest is not needed.
    if (!status_.ok() || behind_bytes_ > 0) return;
    // A chunk larger than the bound is let in alone.
    if (queued_bytes_ > 0 && queued_bytes_ + size > kMaxQueuedBytes) {
      // Stop here: what is queued is dropped; a chunk being consumed is
      // finished, so the rows done stay a prefix of the matrix. Behind by
      // what it would have had to hold, this chunk included.
      behind_bytes_ = queued_bytes_ + size;
      queue_.clear();
      queued_bytes_ = 0;
    } else {
      queued_bytes_ += size;
      queue_.push_back(std::move(chunk));
    }
  }
  changed_.SignalAll();
}

absl::StatusOr<std::shared_ptr<const L2hFirstPass>> L2hUploadPass::Finish(std::string* behind) {
  MutexLock lock(&mu_);
  while (!((queue_.empty() && !busy_) || !status_.ok())) changed_.Wait(&mu_);
  if (!status_.ok()) return status_;
  if (behind_bytes_ > 0) {
    if (behind != nullptr) {
      *behind = absl::StrCat("L2H first pass: stopped ", behind_bytes_ >> 20,
                             " MiB behind the upload (the server had no CPU to spare for it) "
                             "after ", pass_->rows_added(), " of ", pass_->rows(),
                             " rows; an L2H job passes over the rest");
    }
    return std::shared_ptr<const L2hFirstPass>(pass_);
  }
  if (!pass_->complete() || !carry_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("L2H first pass: ", pass_->rows_added(),
                                                      " of ", pass_->rows(), " rows arrived"));
  }
  return std::shared_ptr<const L2hFirstPass>(pass_);
}

void L2hUploadPass::Work() {
  // Linux gives each thread its own nice value; raising it needs no
  // privilege. Failing leaves the thread at the process's priority.
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19);
  MutexLock lock(&mu_);
  while (true) {
    while (!stop_ && queue_.empty()) changed_.Wait(&mu_);
    if (stop_) return;
    std::string chunk = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    mu_.Unlock();
    const auto size = static_cast<int64_t>(chunk.size());
    absl::Status s = Consume(chunk);
    chunk = std::string();  // freed outside the lock
    mu_.Lock();
    busy_ = false;
    // Else the queue was emptied.
    if (status_.ok() && behind_bytes_ == 0) queued_bytes_ -= size;
    if (!s.ok()) FailLocked(std::move(s));
    changed_.SignalAll();
  }
}

void L2hUploadPass::FailLocked(absl::Status why) {
  if (status_.ok()) status_ = std::move(why);
  queue_.clear();
  queued_bytes_ = 0;
}

absl::Status L2hUploadPass::Consume(std::string& chunk) {
  const char* p = chunk.data();
  auto left = static_cast<int64_t>(chunk.size());
  if (!carry_.empty()) {
    const int64_t n = std::min(row_bytes_ - static_cast<int64_t>(carry_.size()), left);
    carry_.append(p, static_cast<size_t>(n));
    p += n;
    left -= n;
    if (static_cast<int64_t>(carry_.size()) < row_bytes_) return absl::OkStatus();
    // A std::string's buffer (on the heap, or inside the object when short)
    // is aligned for float.
    absl::Status s = pass_->AddRows(reinterpret_cast<const float*>(carry_.data()), 1);
    carry_.clear();
    if (!s.ok()) return s;
  }
  const int64_t whole = left / row_bytes_;
  if (whole > 0) {
    const auto at = static_cast<size_t>(p - chunk.data());
    if (at % sizeof(float) != 0) {
      // The rows start inside a float of the buffer: move them to its start.
      chunk.erase(0, at);
      p = chunk.data();
    }
    absl::Status s = pass_->AddRows(reinterpret_cast<const float*>(p), whole);
    if (!s.ok()) return s;
    p += whole * row_bytes_;
    left -= whole * row_bytes_;
  }
  carry_.append(p, static_cast<size_t>(left));
  return absl::OkStatus();
}

// --- The preparation the dataset store runs ------------------------------------

namespace {

class L2hPrepared final : public PreparedData {
 public:
  explicit L2hPrepared(std::shared_ptr<const L2hFirstPass> pass) : pass_(std::move(pass)) {}
  int64_t bytes() const override { return pass_->bytes(); }
  const L2hFirstPass* pass() const { return pass_.get(); }

 private:
  std::shared_ptr<const L2hFirstPass> pass_;
};

class L2hPreparation final : public UploadPreparation {
 public:
  L2hPreparation(int64_t rows, int32_t cols) : pass_(rows, cols) {}
  void Take(std::string* bytes) override { pass_.Take(bytes); }
  absl::StatusOr<std::shared_ptr<const PreparedData>> Finish(std::string* note) override {
    // Behind is expected whenever the upload leaves no CPU over.
    absl::StatusOr<std::shared_ptr<const L2hFirstPass>> done = pass_.Finish(note);
    if (!done.ok()) return done.status();
    if ((*done)->rows_added() == 0) return nullptr;
    return std::make_shared<const L2hPrepared>(*std::move(done));
  }

 private:
  L2hUploadPass pass_;
};

class L2hPreparer final : public UploadPreparer {
 public:
  std::string_view name() const override { return "l2h"; }
  absl::Status CheckHeader(const v1::DatasetHeader& header) const override {
    if (header.cols() >= 2) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "upload: prepare \"l2h\" needs at least 2 columns (clusters), got ", header.cols()));
  }
  int64_t ResultBytes(const v1::DatasetHeader& header) const override {
    return L2hFirstPass::BytesFor(header.rows());
  }
  std::unique_ptr<UploadPreparation> Start(const v1::DatasetHeader& header) const override {
    // The store's validator bounds rows x cols far below 2^62.
    if (header.rows() < 1 || header.cols() > (int64_t{1} << 30)) return nullptr;
    return std::make_unique<L2hPreparation>(header.rows(), static_cast<int32_t>(header.cols()));
  }
};

}  // namespace

const UploadPreparer& L2hUploadPreparer() {
  static const L2hPreparer* preparer = new L2hPreparer();
  return *preparer;
}

const L2hFirstPass* L2hFirstPassOf(const PreparedData* prepared) {
  const auto* l2h = dynamic_cast<const L2hPrepared*>(prepared);
  return l2h != nullptr ? l2h->pass() : nullptr;
}

}  // namespace dendro::server
