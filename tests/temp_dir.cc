#include "tests/temp_dir.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "gtest/gtest.h"

namespace dendro {

ScopedTempDir::ScopedTempDir(std::string_view prefix) {
  std::string tmpl = ::testing::TempDir();
  if (!tmpl.empty() && tmpl.back() != '/') tmpl += '/';
  tmpl.append(prefix);
  tmpl += "XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp(" << tmpl << "): " << std::strerror(errno);
    return;
  }
  path_ = tmpl;
}

ScopedTempDir::~ScopedTempDir() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string ScopedTempDir::Path(std::string_view name) const {
  std::string p = path_;
  p += '/';
  p.append(name);
  return p;
}

}  // namespace dendro
