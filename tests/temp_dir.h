// ScopedTempDir: a fresh directory for one test, removed with everything in
// it when the object goes out of scope, so that repeated runs of the suite
// leave nothing behind in the temporary directory.
#ifndef DENDRO_TESTS_TEMP_DIR_H_
#define DENDRO_TESTS_TEMP_DIR_H_

#include <string>
#include <string_view>

namespace dendro {

class ScopedTempDir {
 public:
  // Creates <gtest's TempDir()>/<prefix>XXXXXX with mkdtemp; a failure is a
  // test failure (and path() is then empty).
  explicit ScopedTempDir(std::string_view prefix = "dendro_test_");
  ~ScopedTempDir();
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::string& path() const { return path_; }
  // path() + "/" + name.
  std::string Path(std::string_view name) const;

 private:
  std::string path_;
};

}  // namespace dendro

#endif  // DENDRO_TESTS_TEMP_DIR_H_
