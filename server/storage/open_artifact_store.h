// The factory of artifact stores, apart from the interface
// (server/storage/artifact_store.h) so that the interface depends on no
// implementation.
#ifndef DENDRO_SERVER_STORAGE_OPEN_ARTIFACT_STORE_H_
#define DENDRO_SERVER_STORAGE_OPEN_ARTIFACT_STORE_H_

#include <memory>
#include <string>

#include "server/storage/artifact_store.h"

namespace dendro::server {

// The store for `data_dir`: a SharedVolumeStore when replicas share it (a
// shared catalogue), else a LocalArtifactStore.
std::unique_ptr<ArtifactStore> OpenArtifactStore(const std::string& data_dir, bool shared);

}  // namespace dendro::server

#endif  // DENDRO_SERVER_STORAGE_OPEN_ARTIFACT_STORE_H_
