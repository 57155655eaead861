// ForClient: the form of an absl::Status that may leave the server.
//
// Messages from the stores and loaders can name files (a POSIX error says
// "<path>: write: No space left on device"). A client must never learn the
// server's directory layout, so every absolute path in a message is cut to
// its last component, and paths under the data directory (absolute or as
// configured) likewise. The code is kept.
#ifndef DENDRO_SERVER_BASE_CLIENT_STATUS_H_
#define DENDRO_SERVER_BASE_CLIENT_STATUS_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace dendro::server {

// `message` with every path replaced by its file name (see above).
std::string ScrubPaths(std::string_view message, std::string_view data_dir);

absl::Status ForClient(const absl::Status& status, std::string_view data_dir);

}  // namespace dendro::server

#endif  // DENDRO_SERVER_BASE_CLIENT_STATUS_H_
