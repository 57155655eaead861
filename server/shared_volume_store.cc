#include "server/shared_volume_store.h"

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "core/common/status_macros.h"
#include "server/dataset_store.h"

namespace dendro::server {
namespace {

constexpr char kTrash[] = "trash";

// Trash entries are named "<unix seconds of the removal>-<random>-<key with
// '/' as '+'>": the age comes from the name, not from file times, which a
// rename does not change.
std::string TrashName(const std::string& key) {
  return absl::StrCat(absl::ToUnixSeconds(absl::Now()), "-", NewId("t"), "-",
                      absl::StrReplaceAll(key, {{"/", "+"}}));
}

bool RemovedAt(const std::string& name, absl::Time* when) {
  const size_t dash = name.find('-');
  int64_t seconds = 0;
  if (dash == std::string::npos || !absl::SimpleAtoi(name.substr(0, dash), &seconds)) return false;
  *when = absl::FromUnixSeconds(seconds);
  return true;
}

}  // namespace

SharedVolumeStore::SharedVolumeStore(std::string root, absl::Duration orphan_grace,
                                     absl::Duration trash_grace)
    : LocalArtifactStore(std::move(root)), orphan_grace_(orphan_grace), trash_grace_(trash_grace) {}

absl::Status SharedVolumeStore::Remove(const std::string& key) {
  DENDRO_RETURN_IF_ERROR(ValidateArtifactKey(key));
  if (key == kTrash || key.rfind(absl::StrCat(kTrash, "/"), 0) == 0) {
    return LocalArtifactStore::Remove(key);
  }
  const std::string trash = PathFor(kTrash);
  DENDRO_RETURN_IF_ERROR(MakeDirs(trash));
  const std::string from = PathFor(key);
  const std::string to = absl::StrCat(trash, "/", TrashName(key));
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    const int err = errno;
    if (err != ENOENT) {
      return absl::Status(absl::ErrnoToStatusCode(err),
                          absl::StrCat("artifact '", key, "': move to trash: ",
                                       std::generic_category().message(err)));
    }
  }
  return Maintain();
}

absl::Status SharedVolumeStore::Maintain() {
  std::lock_guard<std::mutex> lock(purge_mu_);
  const std::string trash = PathFor(kTrash);
  std::error_code ec;
  if (!std::filesystem::is_directory(trash, ec)) return absl::OkStatus();
  const absl::Time cutoff = absl::Now() - trash_grace_;
  for (auto it = std::filesystem::directory_iterator(trash, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    absl::Time when;
    const std::string name = it->path().filename().string();
    // Entries that do not parse are not ours to judge; leave them.
    if (!RemovedAt(name, &when) || when > cutoff) continue;
    std::error_code rm;
    std::filesystem::remove_all(it->path(), rm);  // another replica may race us; fine
  }
  return absl::OkStatus();
}

}  // namespace dendro::server
