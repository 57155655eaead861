#include "tests/source_path.h"

namespace dendro {

std::string SourcePath(std::string_view relative) {
  std::string path = DENDRO_SOURCE_DIR "/";
  path.append(relative);
  return path;
}

}  // namespace dendro
