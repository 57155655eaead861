#include "server/storage/local_artifact_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "core/common/crash_point.h"
#include "core/common/mutex.h"
#include "core/common/status_macros.h"
#include "core/io/whole_read.h"
#include "server/base/ids.h"
#include "server/storage/checksum.h"
#include "spdlog/spdlog.h"

namespace dendro::server {
namespace {

std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

absl::Status FromErrorCode(const std::error_code& ec, const std::string& key,
                           std::string_view what) {
  return absl::Status(absl::ErrnoToStatusCode(ec.value()),
                      absl::StrCat("artifact '", key, "': ", absl::string_view(what.data(), what.size()),
                                   ": ", ec.message()));
}

bool ModificationTime(const std::string& path, absl::Time* t) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return false;
  *t = absl::TimeFromTimespec(st.st_mtim);
  return true;
}

}  // namespace

bool NewestChange(const std::string& path, absl::Time* newest) {
  if (!ModificationTime(path, newest)) return false;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(path, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    absl::Time t;
    if (!ModificationTime(it->path().string(), &t)) return false;
    *newest = std::max(*newest, t);
  }
  return !ec;
}

// --- Writer ---------------------------------------------------------------------

class LocalArtifactStore::Writer : public ArtifactWriter {
 public:
  Writer(const LocalArtifactStore* store, Durability durability)
      : store_(store), durability_(durability) {}
  AtomicFileWriter& file() { return file_; }
  void set_dir(std::string dir) { dir_ = std::move(dir); }

  absl::Status Append(std::string_view bytes) override {
    DENDRO_RETURN_IF_ERROR(file_.Append(bytes));
    sum_.Update(bytes);
    return absl::OkStatus();
  }
  int64_t size() const override { return file_.size(); }
  std::string checksum() const override { return sum_.Hex(); }
  absl::Status Commit() override {
    DENDRO_RETURN_IF_ERROR(file_.Commit());
    // The file's own directory was synced by the commit; the names leading
    // to it may be new too.
    if (durability_ == Durability::kDurable && dir_ != store_->root()) {
      return store_->SyncUpToRoot(Parent(dir_));
    }
    return absl::OkStatus();
  }

 private:
  const LocalArtifactStore* store_;
  const Durability durability_;
  AtomicFileWriter file_;
  Checksum sum_;
  std::string dir_;
};

// --- LinkWriter -----------------------------------------------------------------

// A hard link to an open file, made at once under a temporary name in the
// key's directory and renamed onto it at Commit(). The file's checksum is
// computed on a thread of its own from the file itself, beside whatever the
// caller does with the bytes it passes to Append() (which are only counted).
class LocalArtifactStore::LinkWriter : public ArtifactWriter {
 public:
  LinkWriter(std::string temp, std::string path, int fd)
      : temp_(std::move(temp)), path_(std::move(path)), fd_(fd), summer_([this] { Sum(); }) {}
  ~LinkWriter() override {
    stop_.store(true);
    Join();
    ::close(fd_);
    if (!committed_) ::unlink(temp_.c_str());
  }
  absl::Status Append(std::string_view bytes) override {
    size_ += static_cast<int64_t>(bytes.size());
    return absl::OkStatus();
  }
  int64_t size() const override { return size_; }
  std::string checksum() const override {
    const_cast<LinkWriter*>(this)->Join();
    return sum_.Hex();
  }
  absl::Status Commit() override {
    Join();
    if (!sum_status_.ok()) return sum_status_;
    if (summed_bytes_ != size_) {
      return absl::InternalError(absl::StrCat("linking an imported file: ", size_,
                                              " bytes passed, the file has ", summed_bytes_));
    }
    if (::rename(temp_.c_str(), path_.c_str()) != 0) {
      return absl::InternalError(
          absl::StrCat("linking an imported file: rename: ", std::strerror(errno)));
    }
    committed_ = true;
    return absl::OkStatus();
  }

 private:
  void Join() {
    if (summer_.joinable()) summer_.join();
  }
  void Sum() {
    struct stat st;
    if (::fstat(fd_, &st) != 0) {
      sum_status_ =
          absl::InternalError(absl::StrCat("imported file: fstat: ", std::strerror(errno)));
      return;
    }
    const auto size = static_cast<size_t>(st.st_size);
    if (size == 0) return;
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED | WholeReadMapFlags(size), fd_, 0);
    if (map == MAP_FAILED) {
      sum_status_ =
          absl::InternalError(absl::StrCat("imported file: mmap: ", std::strerror(errno)));
      return;
    }
    ::madvise(map, size, MADV_SEQUENTIAL);
    const char* bytes = static_cast<const char*>(map);
    constexpr size_t kBlock = size_t{8} << 20;
    for (size_t at = 0; at < size && !stop_.load(std::memory_order_relaxed); at += kBlock) {
      const size_t n = std::min(kBlock, size - at);
      sum_.Update(std::string_view(bytes + at, n));
      summed_bytes_ += static_cast<int64_t>(n);
    }
    ::munmap(map, size);
  }

  const std::string temp_;
  const std::string path_;
  const int fd_;  // owned
  Checksum sum_;
  absl::Status sum_status_;
  int64_t summed_bytes_ = 0;  // by the thread, read after Join()
  std::atomic<bool> stop_{false};
  int64_t size_ = 0;
  bool committed_ = false;
  std::thread summer_;  // last: starts once the rest exists
};

// --- Staged ---------------------------------------------------------------------

class LocalArtifactStore::Staged : public StagedDirectory {
 public:
  Staged(const LocalArtifactStore* store, std::string path)
      : store_(store), path_(std::move(path)) {}
  ~Staged() override {
    if (published_) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const override { return path_; }
  absl::Status Publish() override {
    DENDRO_RETURN_IF_ERROR(store_->SyncUpToRoot(path_));
    published_ = true;
    return absl::OkStatus();
  }

 private:
  const LocalArtifactStore* store_;
  const std::string path_;
  bool published_ = false;
};

// --- Purger ---------------------------------------------------------------------

// Deletes trash entries, one at a time and in the order given, on a thread
// of its own that starts with the first entry. Destroying it waits for the
// entries given so far.
class LocalArtifactStore::Purger {
 public:
  Purger() = default;
  Purger(const Purger&) = delete;
  Purger& operator=(const Purger&) = delete;
  ~Purger() {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
    }
    cv_.SignalAll();
    // Only Add starts the thread, and no Add runs once the destructor does.
    if (thread_.joinable()) thread_.join();
  }

  void Add(std::string path) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    queue_.push_back(std::move(path));
    if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
    cv_.SignalAll();
  }

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    for (;;) {
      while (!stopping_ && queue_.empty()) cv_.Wait(&mu_);
      if (queue_.empty()) return;  // stopping, and nothing left
      const std::string path = std::move(queue_.front());
      queue_.pop_front();
      mu_.Unlock();
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
      // What is left is emptied at the next start (Maintain).
      if (ec) spdlog::warn("cannot delete removed artifact files: {}", ec.message());
      mu_.Lock();
    }
  }

  Mutex mu_;
  CondVar cv_;
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_ ABSL_GUARDED_BY(mu_);  // started by the first Add
};

// --- LocalArtifactStore -----------------------------------------------------------

LocalArtifactStore::LocalArtifactStore(std::string root)
    : root_(std::move(root)), purger_(std::make_unique<Purger>()) {}

LocalArtifactStore::~LocalArtifactStore() = default;

bool LocalArtifactStore::IsTrashKey(const std::string& key) {
  return key == kTrash || key.rfind(absl::StrCat(kTrash, "/"), 0) == 0;
}

bool LocalArtifactStore::RemovedAt(const std::string& name, absl::Time* when) {
  const size_t dash = name.find('-');
  int64_t seconds = 0;
  if (dash == std::string::npos || !absl::SimpleAtoi(name.substr(0, dash), &seconds)) return false;
  *when = absl::FromUnixSeconds(seconds);
  return true;
}

absl::StatusOr<std::string> LocalArtifactStore::MoveToTrash(const std::string& key) {
  const std::string trash = PathFor(kTrash);
  DENDRO_RETURN_IF_ERROR(MakeDirs(trash));
  const std::string from = PathFor(key);
  std::string to = absl::StrCat(trash, "/", absl::ToUnixSeconds(absl::Now()), "-", NewId("t"),
                                "-", absl::StrReplaceAll(key, {{"/", "+"}}));
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    const int err = errno;
    if (err == ENOENT) return std::string();
    return absl::Status(absl::ErrnoToStatusCode(err),
                        absl::StrCat("artifact '", key, "': move to trash: ",
                                     std::generic_category().message(err)));
  }
  return to;
}

absl::Status LocalArtifactStore::SyncUpToRoot(const std::string& dir) const {
  std::string d = dir;
  while (true) {
    DENDRO_RETURN_IF_ERROR(SyncDirectory(d));
    if (d.size() <= root_.size()) return absl::OkStatus();
    d = Parent(d);
  }
}

absl::StatusOr<std::unique_ptr<ArtifactWriter>> LocalArtifactStore::Create(
    const std::string& key, Durability durability) {
  DENDRO_RETURN_IF_ERROR(ValidateArtifactKey(key));
  const std::string path = PathFor(key);
  const std::string dir = Parent(path);
  DENDRO_RETURN_IF_ERROR(MakeDirs(dir));
  auto writer = std::make_unique<Writer>(this, durability);
  writer->set_dir(dir);
  DENDRO_RETURN_IF_ERROR(AtomicFileWriter::Open(path, &writer->file(), durability));
  return std::unique_ptr<ArtifactWriter>(std::move(writer));
}

absl::StatusOr<std::unique_ptr<ArtifactWriter>> LocalArtifactStore::Link(const std::string& key,
                                                                         int fd) {
  DENDRO_RETURN_IF_ERROR(ValidateArtifactKey(key));
  const std::string path = PathFor(key);
  const std::string dir = Parent(path);
  DENDRO_RETURN_IF_ERROR(MakeDirs(dir));
  std::string temp = absl::StrCat(path, ".link-", NewId("t"), ".tmp");
  // Linking a descriptor needs CAP_DAC_READ_SEARCH with AT_EMPTY_PATH, or
  // /proc: try one, then the other.
  int rc = ::linkat(fd, "", AT_FDCWD, temp.c_str(), AT_EMPTY_PATH);
  if (rc != 0 && (errno == ENOENT || errno == EPERM || errno == EINVAL)) {
    const std::string self = absl::StrCat("/proc/self/fd/", fd);
    rc = ::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, temp.c_str(), AT_SYMLINK_FOLLOW);
  }
  if (rc != 0) {
    const int err = errno;
    // EXDEV: another file system; EPERM: protected hard links (a file the
    // server neither owns nor may write).
    return absl::FailedPreconditionError(
        absl::StrCat("artifact '", key, "': cannot link the file here: ", std::strerror(err)));
  }
  const int own = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    return absl::InternalError(absl::StrCat("artifact '", key, "': dup: ", std::strerror(err)));
  }
  return std::unique_ptr<ArtifactWriter>(std::make_unique<LinkWriter>(std::move(temp), path, own));
}

absl::StatusOr<std::unique_ptr<StagedDirectory>> LocalArtifactStore::Stage(
    const std::string& prefix) {
  DENDRO_RETURN_IF_ERROR(ValidateArtifactKey(prefix));
  const std::string path = PathFor(prefix);
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    return absl::AlreadyExistsError(absl::StrCat("artifact '", prefix, "' already exists"));
  }
  DENDRO_RETURN_IF_ERROR(MakeDirs(path));
  return std::unique_ptr<StagedDirectory>(std::make_unique<Staged>(this, path));
}

absl::StatusOr<std::string> LocalArtifactStore::LocalPath(const std::string& key) {
  DENDRO_RETURN_IF_ERROR(ValidateArtifactKey(key));
  std::string path = PathFor(key);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    if (ec) return FromErrorCode(ec, key, "stat");
    return absl::NotFoundError(absl::StrCat("artifact '", key, "' is missing"));
  }
  return path;
}

int64_t LocalArtifactStore::Bytes(const std::string& key) {
  if (!ValidateArtifactKey(key).ok()) return 0;
  const std::string path = PathFor(key);
  int64_t total = 0;
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) {
    const auto size = std::filesystem::file_size(path, ec);
    return ec ? 0 : static_cast<int64_t>(size);
  }
  for (auto it = std::filesystem::recursive_directory_iterator(path, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec)) {
      const auto size = it->file_size(size_ec);
      if (!size_ec) total += static_cast<int64_t>(size);
    }
  }
  return total;
}

absl::Status LocalArtifactStore::RemoveNow(const std::string& key) {
  DENDRO_RETURN_IF_ERROR(ValidateArtifactKey(key));
  std::error_code ec;
  std::filesystem::remove_all(PathFor(key), ec);
  if (ec) return FromErrorCode(ec, key, "remove");
  return absl::OkStatus();
}

absl::Status LocalArtifactStore::Remove(const std::string& key) {
  DENDRO_RETURN_IF_ERROR(ValidateArtifactKey(key));
  if (IsTrashKey(key)) return RemoveNow(key);
  DENDRO_ASSIGN_OR_RETURN(std::string moved, MoveToTrash(key));
  if (moved.empty()) return absl::OkStatus();
  CrashPoint("artifact_remove.in_trash");
  purger_->Add(std::move(moved));
  return absl::OkStatus();
}

absl::Status LocalArtifactStore::Maintain() {
  // Run at start-up, before any removal: what is in the trash was left by a
  // crash or a kill.
  return RemoveNow(kTrash);
}

absl::StatusOr<std::vector<ArtifactEntry>> LocalArtifactStore::List(const std::string& prefix) {
  DENDRO_RETURN_IF_ERROR(ValidateArtifactKey(prefix));
  std::vector<ArtifactEntry> out;
  const std::string dir = PathFor(prefix);
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    if (ec && ec != std::errc::no_such_file_or_directory) return FromErrorCode(ec, prefix, "list");
    return out;
  }
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ArtifactEntry e;
    e.key = absl::StrCat(prefix, "/", it->path().filename().string());
    // An entry that vanished or cannot be read counts as just changed: a
    // sweep then leaves it for another time.
    if (!NewestChange(it->path().string(), &e.modified)) e.modified = absl::InfiniteFuture();
    out.push_back(std::move(e));
  }
  if (ec) return FromErrorCode(ec, prefix, "list");
  return out;
}

}  // namespace dendro::server
