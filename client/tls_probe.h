// What a TLS server expects of its clients, asked directly, to explain a
// connection the server dropped (gRPC reports only "Socket closed").
#ifndef DENDRO_CLIENT_TLS_PROBE_H_
#define DENDRO_CLIENT_TLS_PROBE_H_

#include <string>

namespace dendro::client {

// True if the TLS server at `target` ("HOST:PORT" or "[V6]:PORT"; other
// gRPC target forms are not probed) asks for a client certificate during the
// handshake. The server's certificate is not checked: this only reads what
// the server asks. Waits at most about 3 s; false on any failure.
bool AsksForClientCertificate(const std::string& target);

}  // namespace dendro::client

#endif  // DENDRO_CLIENT_TLS_PROBE_H_
