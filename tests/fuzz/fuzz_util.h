// Helpers shared by the fuzz targets.
#ifndef DENDRO_TESTS_FUZZ_FUZZ_UTIL_H_
#define DENDRO_TESTS_FUZZ_FUZZ_UTIL_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace dendro::fuzz {

// Aborts (a crash libFuzzer reports) when `cond` is false: for properties
// that must hold for every input, beyond "does not crash".
inline void Check(bool cond, const char* what) {
  if (!cond) {
    std::fprintf(stderr, "property violated: %s\n", what);
    std::abort();
  }
}

// A file whose whole content is `bytes`, in memory (memfd), readable by path
// until the object is destroyed.
class MemFile {
 public:
  explicit MemFile(std::string_view bytes) {
    fd_ = ::memfd_create("dendro-fuzz", 0);
    Check(fd_ >= 0, "memfd_create");
    size_t off = 0;
    while (off < bytes.size()) {
      const ssize_t n = ::write(fd_, bytes.data() + off, bytes.size() - off);
      Check(n > 0, "write to memfd");
      off += static_cast<size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace dendro::fuzz

#endif  // DENDRO_TESTS_FUZZ_FUZZ_UTIL_H_
