#include "server/base/client_status.h"

#include <cstring>
#include <string>

namespace dendro::server {
namespace {

// Characters that end a path inside a message.
bool EndsPath(char c) { return c == ' ' || c == '\'' || c == '"' || c == ',' || c == ')' || c == '\n'; }

// Whether a path may start at `i` (at the start, or after a separator).
bool PathStart(std::string_view s, size_t i) {
  return i == 0 || std::strchr(" '\"(=[", s[i - 1]) != nullptr;
}

// An absolute path the server could have written: a directory and a name
// below it ("/var/lib/dendro/x.npy"). A lone "/" or a single component
// ("/abs") is text a caller sent (a name it chose), and is kept as written.
bool LooksLikeServerPath(std::string_view token) {
  while (!token.empty() && (token.back() == ':' || token.back() == '/')) token.remove_suffix(1);
  const size_t last = token.rfind('/');
  return last != std::string_view::npos && last > 0 && last + 1 < token.size();
}

}  // namespace

std::string ScrubPaths(std::string_view message, std::string_view data_dir) {
  std::string out;
  out.reserve(message.size());
  size_t i = 0;
  while (i < message.size()) {
    const bool absolute = message[i] == '/';
    const bool under_data = !data_dir.empty() && message.substr(i, data_dir.size()) == data_dir;
    size_t end = i;
    if ((absolute || under_data) && PathStart(message, i)) {
      while (end < message.size() && !EndsPath(message[end])) ++end;
    }
    if (end > i && (under_data || LooksLikeServerPath(message.substr(i, end - i)))) {
      std::string_view path = message.substr(i, end - i);
      // A trailing ':' belongs to the message ("<path>: what"), not the path.
      const bool colon = !path.empty() && path.back() == ':';
      if (colon) path.remove_suffix(1);
      while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
      const size_t slash = path.rfind('/');
      out.append(slash == std::string_view::npos ? path : path.substr(slash + 1));
      if (colon) out.push_back(':');
      i = end;
      continue;
    }
    out.push_back(message[i++]);
  }
  return out;
}

absl::Status ForClient(const absl::Status& status, std::string_view data_dir) {
  if (status.ok()) return status;
  return absl::Status(status.code(), ScrubPaths(std::string(status.message()), data_dir));
}

}  // namespace dendro::server
