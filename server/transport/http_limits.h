// HttpLimits: what one client may hold of dendrod's HTTP listener
// (--http_listen, server/transport/http_console.h); set by the --http_* flags.
#ifndef DENDRO_SERVER_TRANSPORT_HTTP_LIMITS_H_
#define DENDRO_SERVER_TRANSPORT_HTTP_LIMITS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace dendro::server {

// What one client may hold of the listener (flags --http_*, docs/http.md).
struct HttpLimits {
  // Request bodies larger than this are refused (413) from their
  // Content-Length, before any of the body is read.
  int64_t max_body_bytes = int64_t{64} << 20;
  // Request line and headers together; more is refused (431).
  int64_t max_header_bytes = 16 << 10;
  // Workers running requests on data routes (everything but health).
  int threads = 8;
  // A request's line and headers must arrive whole within this time of
  // its first byte (of the connection, for the first request; the TLS
  // handshake included), or the connection is closed. Until then no worker
  // is taken: a separate thread waits for every connection's headers.
  int header_timeout_seconds = 10;
  // Any one read of a body, or write of an answer, that waits longer fails
  // the request and closes the connection.
  int read_timeout_seconds = 10;
  int write_timeout_seconds = 10;
  // An idle kept-alive connection is closed after this long.
  int keep_alive_seconds = 5;
  // Connections waiting for their headers at once; past it the one
  // waiting longest is closed.
  int max_pending_connections = 512;
  // Host header values accepted besides the listen address and loopback
  // names ("name" matches any port, "name:port" that port). Checked when
  // authentication is off, or always when not empty.
  std::vector<std::string> allowed_hosts;
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_TRANSPORT_HTTP_LIMITS_H_
