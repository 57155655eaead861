#include "server/storage/shared_volume_store.h"

#include <filesystem>
#include <system_error>

#include "absl/time/clock.h"
#include "core/common/status_macros.h"

namespace dendro::server {

SharedVolumeStore::SharedVolumeStore(std::string root, absl::Duration orphan_grace,
                                     absl::Duration trash_grace)
    : LocalArtifactStore(std::move(root)), orphan_grace_(orphan_grace), trash_grace_(trash_grace) {}

absl::Status SharedVolumeStore::Remove(const std::string& key) {
  DENDRO_RETURN_IF_ERROR(ValidateArtifactKey(key));
  if (IsTrashKey(key)) return RemoveNow(key);
  DENDRO_RETURN_IF_ERROR(MoveToTrash(key).status());
  return Maintain();
}

absl::Status SharedVolumeStore::Maintain() {
  MutexLock lock(&purge_mu_);
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
