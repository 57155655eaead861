// HttpRoute: the label an HTTP request's metrics carry.
//
// The route is the endpoint's pattern with its variable parts named
// ("/api/v1/models/{name}/versions/{version}/tree"), never the raw path, so
// the number of series stays fixed whatever callers send. The patterns are
// those HttpConsole::Impl::Route registers; any other path is "other".
#ifndef DENDRO_SERVER_TRANSPORT_HTTP_ROUTE_H_
#define DENDRO_SERVER_TRANSPORT_HTTP_ROUTE_H_

#include <string>
#include <string_view>

namespace dendro::server {

// `path` without its query string.
std::string HttpRoute(std::string_view path);

}  // namespace dendro::server

#endif  // DENDRO_SERVER_TRANSPORT_HTTP_ROUTE_H_
