#include "server/storage/artifact_store.h"

#include "absl/strings/str_cat.h"

namespace dendro::server {

absl::StatusOr<std::unique_ptr<ArtifactWriter>> ArtifactStore::Link(const std::string& key,
                                                                    int /*fd*/) {
  return absl::UnimplementedError(
      absl::StrCat("artifact '", key, "': this store cannot link files"));
}

absl::Status ValidateArtifactKey(std::string_view key) {
  const auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("artifact key '", absl::string_view(key.data(), key.size()), "' ",
                     absl::string_view(why.data(), why.size())));
  };
  if (key.empty()) return bad("is empty");
  if (key.front() == '/' || key.back() == '/') return bad("must not start or end with '/'");
  size_t start = 0;
  while (start <= key.size()) {
    size_t end = key.find('/', start);
    if (end == std::string_view::npos) end = key.size();
    const std::string_view part = key.substr(start, end - start);
    if (part.empty()) return bad("has an empty component");
    if (part == "." || part == "..") return bad("has a '.' or '..' component");
    for (char c : part) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                      (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
      if (!ok) return bad("has a character other than letters, digits, '.', '_', '-' and '/'");
    }
    start = end + 1;
  }
  return absl::OkStatus();
}

}  // namespace dendro::server
