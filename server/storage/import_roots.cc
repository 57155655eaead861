#include "server/storage/import_roots.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace dendro::server {
namespace {

std::string Quoted(const std::string& path) { return absl::StrCat("'", path, "'"); }

}  // namespace

// --- ImportedFile -------------------------------------------------------------

ImportedFile::~ImportedFile() {
  if (fd_ >= 0) ::close(fd_);
}

ImportedFile::ImportedFile(ImportedFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), size_(other.size_) {}

ImportedFile& ImportedFile::operator=(ImportedFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
  }
  return *this;
}

// --- ImportRoots ----------------------------------------------------------------

absl::StatusOr<ImportRoots> ImportRoots::Open(const std::vector<std::string>& dirs) {
  ImportRoots out;
  for (const std::string& dir : dirs) {
    if (dir.empty() || dir[0] != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("--import_dirs: ", Quoted(dir), " is not an absolute path"));
    }
    char real[PATH_MAX];
    if (::realpath(dir.c_str(), real) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--import_dirs: ", Quoted(dir), ": ", std::strerror(errno)));
    }
    const int fd = ::open(real, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--import_dirs: ", Quoted(dir), ": ", std::strerror(errno)));
    }
    out.roots_.push_back(Root{real, fd});
  }
  return out;
}

ImportRoots::~ImportRoots() { Close(); }

ImportRoots::ImportRoots(ImportRoots&& other) noexcept : roots_(std::move(other.roots_)) {
  other.roots_.clear();
}

ImportRoots& ImportRoots::operator=(ImportRoots&& other) noexcept {
  if (this != &other) {
    Close();
    roots_ = std::move(other.roots_);
    other.roots_.clear();
  }
  return *this;
}

void ImportRoots::Close() {
  for (const Root& r : roots_) {
    if (r.fd >= 0) ::close(r.fd);
  }
  roots_.clear();
}

std::vector<std::string> ImportRoots::paths() const {
  std::vector<std::string> out;
  for (const Root& r : roots_) out.push_back(r.path);
  return out;
}

absl::StatusOr<ImportedFile> ImportRoots::OpenFile(const std::string& path) const {
  if (roots_.empty()) {
    return absl::FailedPreconditionError(
        "import: this server reads no files of its host (it was started without "
        "--import_dirs); upload the data instead");
  }
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("import: path ", Quoted(path), " is not absolute"));
  }
  if (path.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("import: path contains a NUL byte");
  }
  // The root whose directory the path names textually; the kernel then
  // resolves the rest beneath that root's descriptor and nowhere else.
  const Root* root = nullptr;
  std::string rest;
  for (const Root& r : roots_) {
    const std::string prefix = r.path == "/" ? "/" : r.path + "/";
    if (absl::StartsWith(path, prefix) && path.size() > prefix.size()) {
      root = &r;
      rest = path.substr(prefix.size());
      break;
    }
  }
  const std::string denied =
      absl::StrCat("import: ", Quoted(path),
                   " is not under a directory this server imports from (--import_dirs)");
  if (root == nullptr) return absl::PermissionDeniedError(denied);

  struct open_how how;
  std::memset(&how, 0, sizeof(how));
  how.flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  const std::string rel(rest);
  const long fd = ::syscall(SYS_openat2, root->fd, rel.c_str(), &how, sizeof(how));
  if (fd < 0) {
    const int err = errno;
    switch (err) {
      case EXDEV:  // climbed out of the root
      case ELOOP:  // a magic link, or a symlink loop
      case EACCES:
      case EPERM:
        return absl::PermissionDeniedError(
            err == EACCES || err == EPERM
                ? absl::StrCat("import: ", Quoted(path), ": the server may not read it")
                : denied);
      case ENOENT:
      case ENOTDIR:
        return absl::NotFoundError(absl::StrCat("import: ", Quoted(path), ": no such file"));
      case ENOSYS:
        return absl::FailedPreconditionError(
            "import: this kernel cannot open files safely beneath a directory (openat2, "
            "Linux 5.6); upload the data instead");
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("import: ", Quoted(path), ": ", std::strerror(err)));
    }
  }
  struct stat st;
  if (::fstat(static_cast<int>(fd), &st) != 0) {
    const int err = errno;
    ::close(static_cast<int>(fd));
    return absl::InternalError(absl::StrCat("import: ", Quoted(path), ": ", std::strerror(err)));
  }
  ImportedFile file(static_cast<int>(fd), static_cast<int64_t>(st.st_size));
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "import: ", Quoted(path),
        S_ISDIR(st.st_mode) ? " is a directory" : " is not a regular file", ", not a .npy file"));
  }
  // Reads from here on may block (a regular file ignores the flag anyway).
  ::fcntl(file.fd(), F_SETFL, 0);
  return file;
}

}  // namespace dendro::server
