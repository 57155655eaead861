#include "server/transport/http_route.h"

#include <vector>

#include "absl/strings/str_split.h"

namespace dendro::server {

std::string HttpRoute(std::string_view path) {
  if (path == "/") return "/";
  if (path.empty() || path.front() != '/') return "other";
  const std::vector<std::string> s = absl::StrSplit(std::string(path.substr(1)), '/');
  for (const std::string& part : s) {
    if (part.empty()) return "other";
  }
  const size_t n = s.size();
  if (n == 2 && s[0] == "console") return "/console/{file}";
  if (s[0] == "v2") {
    if (n == 1) return "/v2";
    if (n == 3 && s[1] == "health" && (s[2] == "live" || s[2] == "ready")) {
      return std::string(path);
    }
    if (s[1] != "models" || n < 3) return "other";
    // /v2/models/{name}[/versions/{version}][/ready|/infer]
    std::string route = "/v2/models/{name}";
    size_t at = 3;
    if (n >= 5 && s[3] == "versions") {
      route += "/versions/{version}";
      at = 5;
    }
    if (at == n) return route;
    if (at + 1 == n && (s[at] == "ready" || s[at] == "infer")) {
      return route + "/" + s[at];
    }
    return "other";
  }
  if (n < 3 || s[0] != "api" || s[1] != "v1") return "other";
  if (s[2] == "datasets" || s[2] == "jobs") {
    const std::string base = "/api/v1/" + s[2];
    if (n == 3) return base;
    if (n == 4) return base + "/{id}";
    return "other";
  }
  if (s[2] != "models") return "other";
  if (n == 3) return "/api/v1/models";
  // /api/v1/models/{name}/versions/{version}[/tree|/tree.svg|/classes|/diff|/diff.svg]
  if (n < 6 || s[4] != "versions") return "other";
  const std::string route = "/api/v1/models/{name}/versions/{version}";
  if (n == 6) return route;
  if (n == 7 && (s[6] == "tree" || s[6] == "tree.svg" || s[6] == "classes" || s[6] == "diff" ||
                 s[6] == "diff.svg")) {
    return route + "/" + s[6];
  }
  return "other";
}

}  // namespace dendro::server
