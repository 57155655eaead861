// ConsoleAssets: the web console's files (server/transport/console/), compiled into
// dendrod by server/transport/console/embed_assets.cmake at build time. Nothing is read
// from disk or fetched at run time.
#ifndef DENDRO_SERVER_TRANSPORT_CONSOLE_ASSETS_H_
#define DENDRO_SERVER_TRANSPORT_CONSOLE_ASSETS_H_

#include <string_view>
#include <vector>

namespace dendro::server {

struct ConsoleAsset {
  std::string_view name;   // file name, e.g. "app.js"
  std::string_view bytes;  // its content, unmodified
};

// Every asset, in a fixed order. The views point at static storage.
const std::vector<ConsoleAsset>& ConsoleAssets();

}  // namespace dendro::server

#endif  // DENDRO_SERVER_TRANSPORT_CONSOLE_ASSETS_H_
