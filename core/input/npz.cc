// .npz archives (numpy.savez, savez_compressed) through libzip.
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>
#include <zip.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/common/status_macros.h"
#include "core/input/internal.h"
#include "core/io/posix_error.h"

namespace dendro {
namespace input_internal {
namespace {

struct ArchiveCloser {
  void operator()(zip_t* z) const { zip_discard(z); }
};
struct EntryCloser {
  void operator()(zip_file_t* f) const { zip_fclose(f); }
};

std::string ZipError(int code) {
  zip_error_t error;
  zip_error_init_with_code(&error, code);
  std::string text = zip_error_strerror(&error);
  zip_error_fini(&error);
  return text;
}

// An unlinked file in $TMPDIR (else /tmp): gone when its descriptor closes.
absl::StatusOr<int> AnonymousFile() {
  const char* dir = ::getenv("TMPDIR");
  std::string pattern =
      absl::StrCat(dir != nullptr && *dir != '\0' ? dir : "/tmp", "/dendro-npz-XXXXXX");
  const int fd = ::mkstemp(pattern.data());
  if (fd < 0) return io_internal::PosixError(pattern, "create a temporary file", errno);
  ::unlink(pattern.c_str());
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Mapping>> MapNpzMember(const std::string& path,
                                                      const std::string& key, std::string* member) {
  int code = 0;
  std::unique_ptr<zip_t, ArchiveCloser> archive(zip_open(path.c_str(), ZIP_RDONLY, &code));
  if (archive == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot read the .npz archive: ", ZipError(code)));
  }
  const zip_int64_t n = zip_get_num_entries(archive.get(), 0);
  std::vector<std::string> keys;
  zip_int64_t chosen = -1;
  for (zip_int64_t i = 0; i < n; ++i) {
    const char* name = zip_get_name(archive.get(), static_cast<zip_uint64_t>(i), 0);
    if (name == nullptr) continue;
    std::string k(name);
    if (!absl::EndsWith(k, ".npy")) continue;
    k.resize(k.size() - 4);
    if (k == key || (key.empty() && chosen < 0)) chosen = i;
    keys.push_back(std::move(k));
  }
  if (keys.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the archive holds no .npy arrays; write it with numpy.savez"));
  }
  if (key.empty() && keys.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the archive holds ", keys.size(),
                                                   " arrays (", absl::StrJoin(keys, ", "),
                                                   "); choose one with --key NAME"));
  }
  if (!key.empty() && chosen < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": no array '", key, "' in the archive; it holds ", absl::StrJoin(keys, ", ")));
  }
  *member = key.empty() ? keys[0] : key;

  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat_index(archive.get(), static_cast<zip_uint64_t>(chosen), 0, &st) != 0 ||
      (st.valid & ZIP_STAT_SIZE) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot read the entry of '", *member,
                                                   "': ", zip_strerror(archive.get())));
  }
  std::unique_ptr<zip_file_t, EntryCloser> entry(
      zip_fopen_index(archive.get(), static_cast<zip_uint64_t>(chosen), 0));
  if (entry == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": cannot open '", *member, "' in the archive: ", zip_strerror(archive.get())));
  }
  DENDRO_ASSIGN_OR_RETURN(const int fd, AnonymousFile());
  std::vector<char> buffer(1 << 20);
  zip_uint64_t total = 0;
  while (true) {
    const zip_int64_t got = zip_fread(entry.get(), buffer.data(), buffer.size());
    if (got < 0) {
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": '", *member, "' is damaged in the archive: ", zip_file_strerror(entry.get())));
    }
    if (got == 0) break;
    for (zip_int64_t done = 0; done < got;) {
      const ssize_t w = ::write(fd, buffer.data() + done, static_cast<size_t>(got - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        const int err = errno;
        ::close(fd);
        return io_internal::PosixError("temporary copy of an .npz member", "write", err);
      }
      done += w;
    }
    total += static_cast<zip_uint64_t>(got);
  }
  if (total != st.size || total == 0) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": '", *member, "' is ", total,
                                                   " bytes unpacked, the archive says ", st.size));
  }
  absl::StatusOr<std::unique_ptr<Mapping>> mapping =
      Mapping::OfDescriptor(fd, static_cast<size_t>(total), path);
  ::close(fd);
  return mapping;
}

}  // namespace input_internal
}  // namespace dendro
