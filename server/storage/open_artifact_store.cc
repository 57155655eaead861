#include "server/storage/open_artifact_store.h"

#include "server/storage/local_artifact_store.h"
#include "server/storage/shared_volume_store.h"

namespace dendro::server {

std::unique_ptr<ArtifactStore> OpenArtifactStore(const std::string& data_dir, bool shared) {
  if (shared) return std::make_unique<SharedVolumeStore>(data_dir);
  return std::make_unique<LocalArtifactStore>(data_dir);
}

}  // namespace dendro::server
