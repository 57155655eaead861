#include "client/tls_probe.h"

#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <memory>

namespace dendro::client {
namespace {

// Records that the server sent a CertificateRequest, and sends none.
int NoteCertificateRequest(SSL* ssl, X509** /*cert*/, EVP_PKEY** /*key*/) {
  *static_cast<bool*>(SSL_get_app_data(ssl)) = true;
  return 0;
}

// HOST from HOST:PORT or [V6]:PORT; empty for anything else.
std::string HostOf(const std::string& target) {
  if (target.find("://") != std::string::npos || target.rfind("unix:", 0) == 0 ||
      target.rfind("ipv4:", 0) == 0 || target.rfind("ipv6:", 0) == 0 ||
      target.find(',') != std::string::npos) {
    return "";
  }
  if (!target.empty() && target.front() == '[') {
    const size_t close = target.find(']');
    return close == std::string::npos ? "" : target.substr(1, close - 1);
  }
  const size_t colon = target.rfind(':');
  return colon == std::string::npos ? "" : target.substr(0, colon);
}

}  // namespace

bool AsksForClientCertificate(const std::string& target) {
  const std::string host = HostOf(target);
  if (host.empty()) return false;
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()),
                                                        SSL_CTX_free);
  if (!ctx) return false;
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_NONE, nullptr);
  SSL_CTX_set_client_cert_cb(ctx.get(), NoteCertificateRequest);
  BIO* conn = BIO_new_connect(target.c_str());
  if (conn == nullptr) return false;
  if (BIO_do_connect(conn) <= 0) {
    BIO_free_all(conn);
    return false;
  }
  int fd = -1;
  BIO_get_fd(conn, &fd);
  if (fd >= 0) {
    const timeval limit{3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
  }
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), SSL_free);
  if (!ssl) {
    BIO_free_all(conn);
    return false;
  }
  SSL_set_bio(ssl.get(), conn, conn);  // ssl owns conn from here
  bool asked = false;
  SSL_set_app_data(ssl.get(), &asked);
  SSL_set_tlsext_host_name(ssl.get(), host.c_str());
  static const unsigned char kAlpn[] = {2, 'h', '2'};
  SSL_set_alpn_protos(ssl.get(), kAlpn, sizeof(kAlpn));
  // TLS 1.2 asks before the handshake ends, TLS 1.3 within the server's
  // first flight: either way the callback has run once this returns.
  SSL_connect(ssl.get());
  return asked;
}

}  // namespace dendro::client
