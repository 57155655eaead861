#include "core/common/crash_point.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace dendro {

void CrashPoint(const char* point, std::string_view detail) {
  static const std::string* const armed = [] {
    const char* v = std::getenv("DENDRO_CRASH_AT");
    return v != nullptr && *v != '\0' ? new std::string(v) : nullptr;
  }();
  if (armed == nullptr) return;
  std::string name = point;
  if (*armed != name) {
    if (detail.empty()) return;
    name.append(":").append(detail);
    if (*armed != name) return;
  }
  const std::string line = "crash point " + name + "\n";
  (void)!::write(STDERR_FILENO, line.data(), line.size());
  ::kill(::getpid(), SIGKILL);
  ::_exit(137);  // not reached
}

}  // namespace dendro
