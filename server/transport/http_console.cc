#include "server/transport/http_console.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <functional>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/common/mutex.h"
#include "nlohmann/json.hpp"
#include "server/base/client_status.h"
#include "server/base/logging.h"
#include "server/transport/console_assets.h"
#include "server/transport/http_json.h"
#include "server/transport/http_route.h"
#include "spdlog/spdlog.h"

namespace dendro::server {
namespace {

using nlohmann::json;

// Google's mapping of canonical codes to HTTP statuses
// (google/rpc/code.proto).
int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return 200;
    case absl::StatusCode::kCancelled: return 499;
    case absl::StatusCode::kInvalidArgument: return 400;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kAlreadyExists: return 409;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kFailedPrecondition: return 400;
    case absl::StatusCode::kAborted: return 409;
    case absl::StatusCode::kOutOfRange: return 400;
    case absl::StatusCode::kUnimplemented: return 501;
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kUnauthenticated: return 401;
    default: return 500;  // kUnknown, kInternal, kDataLoss
  }
}

const char* ContentTypeFor(const std::string& name) {
  if (absl::EndsWith(name, ".html")) return "text/html; charset=utf-8";
  if (absl::EndsWith(name, ".js")) return "text/javascript; charset=utf-8";
  if (absl::EndsWith(name, ".css")) return "text/css; charset=utf-8";
  return "application/octet-stream";
}

// Headers on every answer: nothing is cached or framed, scripts and styles
// come only from this server, and no answer is sniffed as another type.
void SetCommonHeaders(httplib::Response& res) {
  res.set_header("Cache-Control", "no-store");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("X-Frame-Options", "DENY");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("Content-Security-Policy",
                 "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                 "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'");
}

void SetJsonError(httplib::Response& res, int http_status, const std::string& code,
                  const std::string& message) {
  res.status = http_status;
  // A message may quote request bytes that are not UTF-8: replace them
  // rather than fail.
  res.set_content(json{{"error", message}, {"code", code}}.dump(-1, ' ', false,
                                                               json::error_handler_t::replace),
                  "application/json");
}

// A client-proposed request id: 1 to 64 characters [A-Za-z0-9._-].
bool IsRequestId(std::string_view v) {
  if (v.empty() || v.size() > 64) return false;
  for (char c : v) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) {
      return false;
    }
  }
  return true;
}

// The verified client certificate's common name, if any.
std::optional<std::string> PeerCommonName(const httplib::Request& req) {
  if (req.ssl == nullptr) return std::nullopt;
  X509* cert = SSL_get1_peer_certificate(req.ssl);
  if (cert == nullptr) return std::nullopt;
  std::optional<std::string> out;
  if (SSL_get_verify_result(req.ssl) == X509_V_OK) {
    char buf[256] = {0};
    const int n = X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, buf,
                                            sizeof(buf));
    if (n > 0) out = std::string(buf, static_cast<size_t>(n));
  }
  X509_free(cert);
  return out;
}

bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

// "HOST:PORT" or "[V6]:PORT".
absl::Status SplitListen(const std::string& listen, std::string* host, int* port) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(listen.substr(colon + 1), port) || *port < 0 || *port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http_listen must be HOST:PORT, got '", listen, "'"));
  }
  *host = listen.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  return absl::OkStatus();
}

// An absl::Status payload naming the HTTP status to answer instead of the
// code's usual one (415 for a body that is not JSON).
constexpr char kHttpStatusPayload[] = "dendro.dev/http-status";

absl::Status WithHttpStatus(absl::Status s, int http_status) {
  s.SetPayload(kHttpStatusPayload, absl::Cord(std::to_string(http_status)));
  return s;
}

// "application/json", with or without parameters ("; charset=utf-8").
bool IsJsonMediaType(absl::string_view v) {
  v = v.substr(0, v.find(';'));
  return absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(v), "application/json");
}

bool IsHealthPath(absl::string_view path) { return absl::StartsWith(path, "/v2/health/"); }

// cpp-httplib 0.11 compresses an answer with Brotli whenever the client
// accepts "br" (every browser does), at Brotli's default quality, 11: the
// JSON tree of 10,000 leaves (1.4 MB) took 2.3 s to send as 131 KB. Its
// gzip, at zlib's default level, sends it in 0.2 s as 257 KB. So "br" is
// struck from what the client accepts before the answer is written, and
// browsers get gzip. (The Request is cpp-httplib's own non-const object,
// handed to handlers as const; the encoding is chosen after the handler
// returns.)
void DeclineBrotli(const httplib::Request& req) {
  auto& headers = const_cast<httplib::Headers&>(req.headers);
  auto [begin, end] = headers.equal_range("Accept-Encoding");  // any case
  for (auto it = begin; it != end; ++it) {
    std::vector<absl::string_view> kept;
    for (absl::string_view coding : absl::StrSplit(it->second, ',', absl::SkipWhitespace())) {
      coding = absl::StripAsciiWhitespace(coding);
      const absl::string_view name = absl::StripAsciiWhitespace(coding.substr(0, coding.find(';')));
      if (!absl::EqualsIgnoreCase(name, "br")) kept.push_back(coding);
    }
    it->second = absl::StrJoin(kept, ", ");
  }
}

// ---------------------------------------------------------------------------
// Connections. cpp-httplib reads a request's headers on one of its workers,
// for as long as the client takes to send them, so a few clients sending a
// header line a second hold every worker and nobody else is answered, not
// even health probes. Here the listener's accept thread hands each
// connection to a Gate instead: one thread that waits (poll) for the whole
// request head of every connection, TLS handshake included, within
// --http_header_timeout_seconds and --http_max_header_kb, and checks the
// declared body size, before a worker is involved. A complete head goes to
// a worker (health probes to workers of their own), which runs
// cpp-httplib's request processing over the buffered bytes; a kept-alive
// connection comes back to the Gate between requests.

using Clock = std::chrono::steady_clock;

struct Conn {
  int fd = -1;
  SSL* ssl = nullptr;  // with TLS
  bool handshaken = false;
  enum class Phase { kHead, kIdle, kDrain } phase = Phase::kHead;
  bool want_write = false;  // TLS may need to write before it can read
  bool check_now = false;   // buffered bytes may already hold a head
  std::string buf;          // read and not yet consumed
  Clock::time_point deadline;
  Clock::time_point entered;  // when it (last) came to the Gate
  int served = 0;
  std::string remote_ip, local_ip;
  int remote_port = 0, local_port = 0;
};

void CloseConn(Conn* c) {
  if (c->ssl != nullptr) {
    SSL_shutdown(c->ssl);  // best effort: the socket does not block
    SSL_free(c->ssl);
  }
  if (c->fd >= 0) close(c->fd);
  delete c;
}

void AddressOf(const sockaddr_storage& a, std::string* ip, int* port) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
    *port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text));
    *port = ntohs(v6->sin6_port);
  }
  *ip = text;
}

// > 0: bytes; 0: the peer closed; -1: would block (want_write says for
// what); -2: failed.
ssize_t RawRead(Conn& c, char* p, size_t n) {
  if (c.ssl != nullptr) {
    ERR_clear_error();
    const int r = SSL_read(c.ssl, p, static_cast<int>(std::min<size_t>(n, INT_MAX)));
    if (r > 0) return r;
    const int e = SSL_get_error(c.ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      c.want_write = e == SSL_ERROR_WANT_WRITE;
      return -1;
    }
    return e == SSL_ERROR_ZERO_RETURN ? 0 : -2;
  }
  for (;;) {
    const ssize_t r = recv(c.fd, p, n, 0);
    if (r >= 0) return r;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      c.want_write = false;
      return -1;
    }
    return -2;
  }
}

ssize_t RawWrite(Conn& c, const char* p, size_t n) {
  if (c.ssl != nullptr) {
    ERR_clear_error();
    const int r = SSL_write(c.ssl, p, static_cast<int>(std::min<size_t>(n, INT_MAX)));
    if (r > 0) return r;
    const int e = SSL_get_error(c.ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      c.want_write = e == SSL_ERROR_WANT_WRITE;
      return -1;
    }
    return -2;
  }
  for (;;) {
    const ssize_t r = send(c.fd, p, n, MSG_NOSIGNAL);
    if (r >= 0) return r;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      c.want_write = true;
      return -1;
    }
    return -2;
  }
}

// Waits until `c` can read (or write); false on timeout or error.
bool WaitFor(const Conn& c, bool write, int timeout_ms) {
  pollfd p{c.fd, static_cast<short>(write ? POLLOUT : POLLIN), 0};
  for (;;) {
    const int r = poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    return r > 0;
  }
}

// cpp-httplib's view of a connection on a worker: first the bytes the Gate
// read, then the socket, each read or write waiting at most its timeout.
class ConnStream final : public httplib::Stream {
 public:
  ConnStream(Conn& c, int read_timeout_ms, int write_timeout_ms)
      : c_(c), read_ms_(read_timeout_ms), write_ms_(write_timeout_ms) {}

  bool is_readable() const override {
    return !c_.buf.empty() || (c_.ssl != nullptr && SSL_pending(c_.ssl) > 0) ||
           WaitFor(c_, false, read_ms_);
  }
  bool is_writable() const override { return WaitFor(c_, true, write_ms_); }
  ssize_t read(char* p, size_t n) override {
    if (!c_.buf.empty()) {
      const size_t k = std::min(n, c_.buf.size());
      std::memcpy(p, c_.buf.data(), k);
      c_.buf.erase(0, k);
      return static_cast<ssize_t>(k);
    }
    for (;;) {
      const ssize_t r = RawRead(c_, p, n);
      if (r >= 0) return r;
      if (r == -2 || !WaitFor(c_, c_.want_write, read_ms_)) return -1;
    }
  }
  ssize_t write(const char* p, size_t n) override {
    for (;;) {
      const ssize_t r = RawWrite(c_, p, n);
      if (r >= 0) return r;
      if (r == -2 || !WaitFor(c_, c_.want_write, write_ms_)) return -1;
    }
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = c_.remote_ip;
    port = c_.remote_port;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = c_.local_ip;
    port = c_.local_port;
  }
  socket_t socket() const override { return c_.fd; }

 private:
  Conn& c_;
  const int read_ms_;
  const int write_ms_;
};

// The end of the request head in `buf` (just past the empty line), or npos.
size_t HeadEnd(const std::string& buf) {
  const size_t crlf = buf.find("\r\n\r\n");
  const size_t lf = buf.find("\n\n");
  const size_t a = crlf == std::string::npos ? std::string::npos : crlf + 4;
  const size_t b = lf == std::string::npos ? std::string::npos : lf + 2;
  return std::min(a, b);
}

struct Refusal {
  int status;
  const char* reason;
  const char* code;
  std::string message;
};

// Checks a complete request head before any worker or body byte is spent
// on it: the declared body size, and that a body has a length at all
// (cpp-httplib would read a chunked or unsized body without a bound).
std::optional<Refusal> CheckHead(absl::string_view head, const HttpLimits& limits,
                                 bool* health) {
  const size_t line_end = head.find('\n');
  const absl::string_view line = head.substr(0, line_end);
  const absl::string_view method = line.substr(0, line.find(' '));
  absl::string_view target = line.substr(std::min(line.size(), method.size() + 1));
  target = target.substr(0, target.find(' '));
  *health = method == "GET" && IsHealthPath(target);
  std::optional<int64_t> length;
  bool chunked = false;
  for (absl::string_view rest = head.substr(line_end + 1); !rest.empty();) {
    const size_t eol = rest.find('\n');
    absl::string_view h = rest.substr(0, eol);
    rest = eol == absl::string_view::npos ? absl::string_view() : rest.substr(eol + 1);
    const size_t colon = h.find(':');
    if (colon == absl::string_view::npos) continue;
    const absl::string_view name = absl::StripAsciiWhitespace(h.substr(0, colon));
    const absl::string_view value = absl::StripAsciiWhitespace(h.substr(colon + 1));
    if (absl::EqualsIgnoreCase(name, "Transfer-Encoding")) chunked = true;
    if (absl::EqualsIgnoreCase(name, "Content-Length")) {
      int64_t n = 0;
      if (length.has_value() || value.empty() ||
          !std::all_of(value.begin(), value.end(), [](char ch) { return absl::ascii_isdigit(ch); }) ||
          !absl::SimpleAtoi(value, &n)) {
        return Refusal{400, "Bad Request", "INVALID_ARGUMENT",
                       "the request's Content-Length is not one number"};
      }
      length = n;
    }
  }
  if (length.has_value() && *length > limits.max_body_bytes) {
    return Refusal{413, "Payload Too Large", "RESOURCE_EXHAUSTED",
                   absl::StrCat("the request body is ", *length, " bytes, over the ",
                                limits.max_body_bytes >> 20,
                                " MiB limit (--http_max_body_mb); send fewer rows at a time")};
  }
  const bool has_body_method =
      method == "POST" || method == "PUT" || method == "PATCH" || method == "PRI";
  if (chunked || (has_body_method && !length.has_value())) {
    return Refusal{411, "Length Required", "INVALID_ARGUMENT",
                   "a request body needs a Content-Length header (chunked bodies are not "
                   "accepted)"};
  }
  return std::nullopt;
}

std::string RawJsonAnswer(const Refusal& r) {
  const std::string body = json{{"error", r.message}, {"code", r.code}}.dump();
  return absl::StrCat("HTTP/1.1 ", r.status, " ", r.reason,
                      "\r\nContent-Type: application/json\r\nContent-Length: ", body.size(),
                      "\r\nConnection: close\r\nCache-Control: no-store\r\n"
                      "X-Content-Type-Options: nosniff\r\n\r\n",
                      body);
}

class Gate {
 public:
  // `dispatch` takes a connection whose head is complete (health: a GET of
  // /v2/health/...), and owns it from then on.
  using Dispatch = std::function<void(Conn*, bool health)>;

  Gate(const HttpLimits& limits, SSL_CTX* tls, Dispatch dispatch)
      : limits_(limits), tls_(tls), dispatch_(std::move(dispatch)) {}
  ~Gate() { Stop(); }

  absl::Status Start() {
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) return absl::InternalError("--http_listen: eventfd failed");
    thread_ = std::thread([this] { Loop(); });
    return absl::OkStatus();
  }

  // A newly accepted socket.
  void Admit(int fd) {
    const int flags = fcntl(fd, F_GETFL, 0);
    fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    auto* c = new Conn;
    c->fd = fd;
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      AddressOf(a, &c->remote_ip, &c->remote_port);
    }
    len = sizeof(a);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      AddressOf(a, &c->local_ip, &c->local_port);
    }
    if (tls_ != nullptr) {
      c->ssl = SSL_new(tls_);
      if (c->ssl == nullptr || SSL_set_fd(c->ssl, fd) != 1) {
        CloseConn(c);
        return;
      }
      SSL_set_accept_state(c->ssl);
    }
    c->phase = Conn::Phase::kHead;
    c->entered = Clock::now();
    c->deadline = c->entered + std::chrono::seconds(limits_.header_timeout_seconds);
    Push(c);
  }

  // A kept-alive connection after its answer: waits for the next request.
  void Return(Conn* c) {
    c->entered = Clock::now();
    if (c->buf.empty()) {
      c->phase = Conn::Phase::kIdle;
      c->deadline = c->entered + std::chrono::seconds(limits_.keep_alive_seconds);
    } else {  // the next request has begun (pipelined)
      c->phase = Conn::Phase::kHead;
      c->deadline = c->entered + std::chrono::seconds(limits_.header_timeout_seconds);
    }
    c->check_now = true;
    Push(c);
  }

  void Stop() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      MutexLock lock(&mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    Wake();
    if (thread_.joinable()) thread_.join();
    MutexLock lock(&mu_);
    for (Conn* c : incoming_) CloseConn(c);
    incoming_.clear();
    if (wake_fd_ >= 0) close(wake_fd_);
    wake_fd_ = -1;
  }

 private:
  void Push(Conn* c) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      MutexLock lock(&mu_);
      if (!stopping_) {
        incoming_.push_back(c);
        c = nullptr;
      }
    }
    if (c != nullptr) {
      CloseConn(c);
      return;
    }
    Wake();
  }
  void Wake() {
    const uint64_t one = 1;
    if (wake_fd_ >= 0 && ::write(wake_fd_, &one, sizeof(one)) < 0) {
      // The counter is already non-zero: the loop wakes anyway.
    }
  }

  void Loop() ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<Conn*> conns;
    std::vector<pollfd> fds;
    for (;;) {
      {
        MutexLock lock(&mu_);
        conns.insert(conns.end(), incoming_.begin(), incoming_.end());
        incoming_.clear();
        if (stopping_) break;
      }
      // Over the cap: close the connections that have waited longest.
      const size_t cap = static_cast<size_t>(std::max(1, limits_.max_pending_connections));
      if (conns.size() > cap) {
        std::sort(conns.begin(), conns.end(),
                  [](const Conn* a, const Conn* b) { return a->entered < b->entered; });
        const size_t drop = conns.size() - cap;
        spdlog::warn("HTTP: {} connections waiting for their request headers; closing the {} "
                     "waiting longest (--http_max_connections)", conns.size(), drop);
        for (size_t i = 0; i < drop; ++i) CloseConn(conns[i]);
        conns.erase(conns.begin(), conns.begin() + static_cast<ptrdiff_t>(drop));
      }
      Clock::time_point now = Clock::now();
      Clock::time_point next = now + std::chrono::seconds(1);
      bool immediate = false;
      fds.assign(1, pollfd{wake_fd_, POLLIN, 0});
      for (Conn* c : conns) {
        fds.push_back(pollfd{c->fd, static_cast<short>(c->want_write ? POLLOUT : POLLIN), 0});
        next = std::min(next, c->deadline);
        immediate = immediate || c->check_now;
      }
      const int64_t wait_ms =
          immediate ? 0
                    : std::clamp<int64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                              next - now).count() + 1,
                                          0, 1000);
      if (poll(fds.data(), fds.size(), static_cast<int>(wait_ms)) < 0 && errno != EINTR) {
        spdlog::error("HTTP: poll failed: {}", std::strerror(errno));
      }
      if (fds[0].revents != 0) {
        uint64_t n = 0;
        if (::read(wake_fd_, &n, sizeof(n)) < 0) {
          // Nothing to read: woken by another event.
        }
      }
      now = Clock::now();
      size_t kept = 0;
      for (size_t i = 0; i < conns.size(); ++i) {
        Conn* c = conns[i];
        bool stays = true;
        if (now >= c->deadline) {
          if (c->phase == Conn::Phase::kHead) {
            spdlog::info("HTTP: closed the connection from {}:{}: its request headers did not "
                         "arrive within {} s (--http_header_timeout_seconds)",
                         c->remote_ip, c->remote_port, limits_.header_timeout_seconds);
          }
          CloseConn(c);
          stays = false;
        } else if (fds[i + 1].revents != 0 || c->check_now) {
          c->check_now = false;
          stays = Step(c, now);
        }
        if (stays) conns[kept++] = c;
      }
      conns.resize(kept);
    }
    for (Conn* c : conns) CloseConn(c);
  }

  // Advances `c`; false when it has left the Gate (dispatched or closed).
  bool Step(Conn* c, Clock::time_point now) {
    char tmp[16384];
    if (c->phase == Conn::Phase::kDrain) {
      // Reads what the client still sends after a refusal, so that closing
      // does not reset the connection before the client reads the answer.
      for (int i = 0; i < 64; ++i) {
        const ssize_t r = RawRead(*c, tmp, sizeof(tmp));
        if (r == -1) return true;
        if (r <= 0) break;
      }
      CloseConn(c);
      return false;
    }
    if (c->ssl != nullptr && !c->handshaken) {
      ERR_clear_error();
      const int r = SSL_do_handshake(c->ssl);
      if (r != 1) {
        const int e = SSL_get_error(c->ssl, r);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
          c->want_write = e == SSL_ERROR_WANT_WRITE;
          return true;
        }
        spdlog::debug("HTTP: TLS handshake with {}:{} failed", c->remote_ip, c->remote_port);
        CloseConn(c);
        return false;
      }
      c->handshaken = true;
    }
    const size_t max_head = static_cast<size_t>(limits_.max_header_bytes);
    size_t end = HeadEnd(c->buf);
    while (end == std::string::npos && c->buf.size() <= max_head) {
      const ssize_t r = RawRead(*c, tmp, sizeof(tmp));
      if (r == -1) return true;  // wait for more
      if (r <= 0) {              // closed, or failed
        CloseConn(c);
        return false;
      }
      if (c->phase == Conn::Phase::kIdle) {
        c->phase = Conn::Phase::kHead;
        c->deadline = now + std::chrono::seconds(limits_.header_timeout_seconds);
      }
      c->buf.append(tmp, static_cast<size_t>(r));
      end = HeadEnd(c->buf);
    }
    if (end == std::string::npos || end > max_head) {
      return Refuse(c, now, Refusal{431, "Request Header Fields Too Large", "INVALID_ARGUMENT",
                                    absl::StrCat("the request line and headers are over the ",
                                                 limits_.max_header_bytes >> 10,
                                                 " KiB limit (--http_max_header_kb)")});
    }
    bool health = false;
    if (std::optional<Refusal> refused =
            CheckHead(absl::string_view(c->buf).substr(0, end), limits_, &health)) {
      return Refuse(c, now, *refused);
    }
    c->want_write = false;
    dispatch_(c, health);
    return false;
  }

  // Answers `r` and closes the connection (after draining what the client
  // still sends, for at most 2 seconds).
  bool Refuse(Conn* c, Clock::time_point now, const Refusal& r) {
    spdlog::info("HTTP: refused a request from {}:{}: {} {}", c->remote_ip, c->remote_port,
                 r.status, r.message);
    const std::string answer = RawJsonAnswer(r);
    size_t sent = 0;
    while (sent < answer.size()) {  // best effort: the socket does not block
      const ssize_t n = RawWrite(*c, answer.data() + sent, answer.size() - sent);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    if (c->ssl != nullptr) {
      SSL_shutdown(c->ssl);
    } else {
      shutdown(c->fd, SHUT_WR);
    }
    c->buf.clear();
    c->phase = Conn::Phase::kDrain;
    c->want_write = false;
    c->deadline = std::min(c->deadline, now + std::chrono::seconds(2));
    c->deadline = std::max(c->deadline, now + std::chrono::milliseconds(200));
    return true;
  }

  const HttpLimits limits_;
  SSL_CTX* const tls_;
  const Dispatch dispatch_;
  int wake_fd_ = -1;
  std::thread thread_;
  Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Conn*> incoming_ ABSL_GUARDED_BY(mu_);
};

// Runs every accepted socket's task at once, on the accept thread: the task
// only hands the socket to the Gate.
class InlineQueue final : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

// cpp-httplib's server with its connection handling replaced by the Gate's
// (process_request, the parsing and routing, is cpp-httplib's own).
class GatedServer final : public httplib::Server {
 public:
  explicit GatedServer(std::function<void(int)> admit) : admit_(std::move(admit)) {
    new_task_queue = [] { return new InlineQueue; };
  }
  bool Process(httplib::Stream& strm, bool close_connection, bool& connection_closed,
               const std::function<void(httplib::Request&)>& setup) {
    return process_request(strm, close_connection, connection_closed, setup);
  }

 private:
  bool process_and_close_socket(socket_t sock) override {
    admit_(sock);
    return true;
  }
  std::function<void(int)> admit_;
};

// The server's TLS context (as cpp-httplib's SSLServer makes it, with
// TLS 1.2 at least); null with the error on failure.
SSL_CTX* MakeTlsContext(const HttpConsoleOptions& o) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return nullptr;
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_SESSION_RESUMPTION_ON_RENEGOTIATION);
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  bool ok = SSL_CTX_use_certificate_chain_file(ctx, o.tls_cert_file.c_str()) == 1 &&
            SSL_CTX_use_PrivateKey_file(ctx, o.tls_key_file.c_str(), SSL_FILETYPE_PEM) == 1 &&
            SSL_CTX_check_private_key(ctx) == 1;
  if (ok && !o.tls_client_ca_file.empty()) {
    ok = SSL_CTX_load_verify_locations(ctx, o.tls_client_ca_file.c_str(), nullptr) == 1;
    if (ok) {
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
      if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(o.tls_client_ca_file.c_str())) {
        SSL_CTX_set_client_CA_list(ctx, names);
      }
    }
  }
  if (!ok) {
    SSL_CTX_free(ctx);
    return nullptr;
  }
  return ctx;
}

}  // namespace

struct HttpConsole::Impl {
  Impl(HttpConsoleOptions o, HttpConsoleDeps d)
      : options(std::move(o)),
        deps(d),
        api(ApiDeps{d.datasets, d.jobs, d.models, options.max_message_bytes, d.gate,
                    d.batcher}) {}

  // One request: sets the log context, identifies the caller (unless
  // `open`), checks `rpc` (if any), runs `fn` and writes its answer.
  void Serve(const httplib::Request& req, httplib::Response& res, bool open,
             std::optional<Rpc> rpc,
             const std::function<absl::StatusOr<HttpBody>(const Principal&)>& fn);
  absl::Status Authorize(const httplib::Request& req, const Principal& who, Rpc rpc) const;
  // Whether the Host header names this server (DNS rebinding: a page of
  // another site whose name resolves to this address sends its own name).
  // Checked when authentication is off, or when --http_allowed_hosts is set.
  absl::Status CheckHost(const httplib::Request& req) const;
  void Route(httplib::Server& server);
  // Runs one request of `c` on a worker, then returns the connection to the
  // Gate (kept alive) or closes it.
  void ServeConn(Conn* c);

  ~Impl() {
    if (tls_ctx != nullptr) SSL_CTX_free(tls_ctx);
  }

  const HttpConsoleOptions options;
  const HttpConsoleDeps deps;
  const JsonApi api;
  std::atomic<bool> ready{false};
  std::atomic<bool> stopping{false};
  std::unique_ptr<GatedServer> server;
  SSL_CTX* tls_ctx = nullptr;
  std::unique_ptr<Gate> gate;
  std::unique_ptr<httplib::ThreadPool> data_pool;    // --http_threads
  std::unique_ptr<httplib::ThreadPool> health_pool;  // /v2/health/* only
  std::thread thread;
  std::string listen_host;
  int port = 0;
  Mutex stop_mu;  // one Stop at a time; guards no member
};

// Requests one connection may carry before it is closed.
constexpr int kKeepAliveMaxRequests = 100;
// Workers that serve only /v2/health/*.
constexpr int kHealthThreads = 2;

// When the request the worker is serving started (its bytes were ready),
// for the logger's timing: the logger runs on the same worker, after the
// answer's last byte.
static thread_local std::chrono::steady_clock::time_point t_request_start;

void HttpConsole::Impl::ServeConn(Conn* c) {
  t_request_start = std::chrono::steady_clock::now();
  ConnStream strm(*c, options.limits.read_timeout_seconds * 1000,
                  options.limits.write_timeout_seconds * 1000);
  const bool close_after = stopping.load() || c->served + 1 >= kKeepAliveMaxRequests;
  bool connection_closed = false;
  std::function<void(httplib::Request&)> setup;
  if (c->ssl != nullptr) setup = [ssl = c->ssl](httplib::Request& req) { req.ssl = ssl; };
  const bool ok = server->Process(strm, close_after, connection_closed, setup);
  ++c->served;
  if (!ok || close_after || connection_closed || stopping.load()) {
    CloseConn(c);
    return;
  }
  gate->Return(c);
}

absl::Status HttpConsole::Impl::CheckHost(const httplib::Request& req) const {
  if (deps.auth->enabled() && options.limits.allowed_hosts.empty()) return absl::OkStatus();
  const std::string host = absl::AsciiStrToLower(req.get_header_value("Host"));
  // "name", "name:port", "[v6]" or "[v6]:port".
  std::string name = host;
  std::string host_port;
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    if (close != std::string::npos) {
      name = host.substr(0, close + 1);
      if (close + 1 < host.size() && host[close + 1] == ':') host_port = host.substr(close + 2);
    }
  } else if (const size_t colon = host.find(':');
             colon != std::string::npos && host.find(':', colon + 1) == std::string::npos) {
    name = host.substr(0, colon);
    host_port = host.substr(colon + 1);
  }
  const bool our_port = host_port.empty() || host_port == std::to_string(port);
  std::string listen_name = absl::AsciiStrToLower(listen_host);
  if (listen_name.find(':') != std::string::npos) listen_name = absl::StrCat("[", listen_name, "]");
  if (our_port && (name == "localhost" || name == "127.0.0.1" || name == "[::1]" ||
                   name == listen_name)) {
    return absl::OkStatus();
  }
  for (const std::string& allowed : options.limits.allowed_hosts) {
    const std::string a = absl::AsciiStrToLower(allowed);
    if (a == name || a == host) return absl::OkStatus();
  }
  const std::string shown =
      host.empty() ? std::string("no Host header")
                   : absl::StrCat("Host '", absl::CHexEscape(host.substr(0, 100)), "'");
  spdlog::warn("audit: HTTP {} {} refused: {} is not an address of this server (peer {}:{})",
               req.method, req.path, shown, req.remote_addr, req.remote_port);
  return absl::PermissionDeniedError(absl::StrCat(
      shown, " is not an address of this server (", options.listen,
      "; loopback names are accepted); add the name the server is reached by to "
      "--http_allowed_hosts"));
}

void HttpConsole::Impl::Serve(
    const httplib::Request& req, httplib::Response& res, bool open, std::optional<Rpc> rpc,
    const std::function<absl::StatusOr<HttpBody>(const Principal&)>& fn) {
  LogContext& log = ThreadLogContext();
  log = LogContext();
  const std::string proposed = req.get_header_value("X-Request-Id");
  log.request_id = IsRequestId(proposed) ? proposed : NewRequestId();
  log.rpc = absl::StrCat("http ", req.method, " ", req.path);
  res.set_header("X-Request-Id", log.request_id);
  SetCommonHeaders(res);
  DeclineBrotli(req);
  const std::string peer = absl::StrCat(req.remote_addr, ":", req.remote_port);

  Principal who;
  absl::Status refused;
  if (!IsHealthPath(req.path)) refused = CheckHost(req);
  if (!open && refused.ok()) {
    std::optional<std::string> bearer;
    if (req.has_header("Authorization")) bearer = req.get_header_value("Authorization");
    const std::optional<std::string> cn = PeerCommonName(req);
    absl::StatusOr<Principal> identified = deps.auth->Identify(bearer, cn);
    if (!identified.ok()) {
      spdlog::warn("audit: HTTP {} {} refused: {} (peer {})", req.method, req.path,
                   std::string(identified.status().message()), peer);
      refused = identified.status();
    } else {
      who = *std::move(identified);
      log.principal = who.name;
      if (rpc.has_value()) refused = Authorize(req, who, *rpc);
    }
  }
  absl::StatusOr<HttpBody> body =
      refused.ok() ? fn(who) : absl::StatusOr<HttpBody>(std::move(refused));
  if (body.ok()) {
    res.status = 200;
    if (!body->write) {
      res.set_content(std::move(body->content), body->content_type);
      return;
    }
    res.set_chunked_content_provider(
        body->content_type,
        [write = std::move(body->write)](size_t /*offset*/, httplib::DataSink& sink) {
          const absl::Status s = write([&](std::string_view piece) {
            return sink.write(piece.data(), piece.size())
                       ? absl::OkStatus()
                       : absl::CancelledError("the HTTP client went away");
          });
          if (!s.ok()) return false;  // drops the connection mid-body
          sink.done();
          return true;
        });
    return;
  }
  const absl::Status& s = body.status();
  if (s.code() == absl::StatusCode::kInternal || s.code() == absl::StatusCode::kDataLoss ||
      s.code() == absl::StatusCode::kUnknown) {
    spdlog::error("HTTP {} {} failed: {}", req.method, req.path, s.ToString());
  } else {
    spdlog::info("HTTP {} {} failed: {}", req.method, req.path, s.ToString());
  }
  const absl::Status out = ForClient(s, options.data_dir);
  if (out.code() == absl::StatusCode::kUnauthenticated) {
    res.set_header("WWW-Authenticate", "Bearer realm=\"dendro\"");
  }
  int http_status = HttpStatusFor(out.code());
  if (absl::optional<absl::Cord> p = s.GetPayload(kHttpStatusPayload); p.has_value()) {
    int n = 0;
    if (absl::SimpleAtoi(std::string(*p), &n) && n >= 400 && n <= 599) http_status = n;
  }
  SetJsonError(res, http_status, absl::StatusCodeToString(out.code()),
               std::string(out.message()));
}

absl::Status HttpConsole::Impl::Authorize(const httplib::Request& req, const Principal& who,
                                          Rpc rpc) const {
  absl::Status allowed = Authenticator::Authorize(who, rpc);
  if (!allowed.ok()) {
    spdlog::warn("audit: HTTP {} {} ({}) refused for '{}': {} (peer {}:{})", req.method,
                 req.path, RuleFor(rpc).method, who.name, std::string(allowed.message()),
                 req.remote_addr, req.remote_port);
  }
  return allowed;
}

void HttpConsole::Impl::Route(httplib::Server& srv) {
  // Every answer cpp-httplib writes, the refusals of its own (400, 413) and
  // the 404s included, is counted under its route pattern.
  if (deps.metrics != nullptr) {
    srv.set_logger([m = deps.metrics](const httplib::Request& req, const httplib::Response& res) {
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t_request_start).count();
      m->HttpRequestFinished(req.method, HttpRoute(req.path), res.status, seconds);
    });
  }
  // The console's files.
  auto asset = [](std::string_view name) -> const ConsoleAsset* {
    for (const ConsoleAsset& a : ConsoleAssets()) {
      if (a.name == name) return &a;
    }
    return nullptr;
  };
  auto serve_asset = [this, asset](const httplib::Request& req, httplib::Response& res,
                                   std::string name) {
    Serve(req, res, /*open=*/true, std::nullopt,
          [&](const Principal&) -> absl::StatusOr<HttpBody> {
            const ConsoleAsset* a = asset(name);
            if (a == nullptr) {
              return absl::NotFoundError(absl::StrCat("no console file named '", name, "'"));
            }
            return HttpBody{std::string(a->bytes), ContentTypeFor(std::string(a->name))};
          });
  };
  srv.Get("/", [serve_asset](const httplib::Request& req, httplib::Response& res) {
    serve_asset(req, res, "index.html");
  });
  srv.Get(R"(/console/([A-Za-z0-9._-]+))",
          [serve_asset](const httplib::Request& req, httplib::Response& res) {
            serve_asset(req, res, req.matches[1]);
          });

  // Health and server metadata: open, like gRPC health checks.
  srv.Get("/v2/health/live", [this](const httplib::Request& req, httplib::Response& res) {
    Serve(req, res, true, std::nullopt, [](const Principal&) -> absl::StatusOr<HttpBody> {
      return HttpBody{json{{"live", true}}.dump()};
    });
  });
  srv.Get("/v2/health/ready", [this](const httplib::Request& req, httplib::Response& res) {
    Serve(req, res, true, std::nullopt, [this](const Principal&) -> absl::StatusOr<HttpBody> {
      if (!ready.load()) return absl::UnavailableError("dendrod is not serving (starting or draining)");
      return HttpBody{json{{"ready", true}}.dump()};
    });
  });
  srv.Get("/v2", [this](const httplib::Request& req, httplib::Response& res) {
    Serve(req, res, true, std::nullopt,
          [](const Principal&) -> absl::StatusOr<HttpBody> { return JsonApi::ServerMetadata(); });
  });

  // dendro.v1 mirrors.
  auto query = [](const httplib::Request& req) {
    return QueryParams(req.params.begin(), req.params.end());
  };
  srv.Get("/api/v1/datasets", [this, query](const httplib::Request& req, httplib::Response& res) {
    Serve(req, res, false, Rpc::kListDatasets,
          [&](const Principal&) { return api.ListDatasets(query(req)); });
  });
  srv.Get(R"(/api/v1/datasets/([^/]+))",
          [this](const httplib::Request& req, httplib::Response& res) {
            Serve(req, res, false, Rpc::kGetDataset,
                  [&](const Principal&) { return api.GetDataset(req.matches[1]); });
          });
  srv.Get("/api/v1/jobs", [this, query](const httplib::Request& req, httplib::Response& res) {
    Serve(req, res, false, Rpc::kListJobs,
          [&](const Principal&) { return api.ListJobs(query(req)); });
  });
  srv.Get(R"(/api/v1/jobs/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    Serve(req, res, false, Rpc::kGetJob,
          [&](const Principal&) { return api.GetJob(req.matches[1]); });
  });
  srv.Get("/api/v1/models", [this, query](const httplib::Request& req, httplib::Response& res) {
    Serve(req, res, false, Rpc::kListModels,
          [&](const Principal&) { return api.ListModels(query(req)); });
  });
  // /api/v1/models/{name}/versions/{v}[/tree|/tree.svg|/classes|/diff|/diff.svg]
  srv.Get(R"(/api/v1/models/([^/]+)/versions/([^/]+)(/tree|/tree\.svg|/classes|/diff|/diff\.svg)?)",
          [this, query](const httplib::Request& req, httplib::Response& res) {
            const std::string what = req.matches[3];
            const bool diff = what == "/diff" || what == "/diff.svg";
            const Rpc rpc = what.empty()         ? Rpc::kGetModel
                            : what == "/classes" ? Rpc::kGetClasses
                            : diff               ? Rpc::kDiffModels
                                                 : Rpc::kGetTree;
            Serve(req, res, false, rpc, [&](const Principal&) -> absl::StatusOr<HttpBody> {
              absl::StatusOr<v1::ModelRef> ref = ModelRefFromText(req.matches[1].str(),
                                                               req.matches[2].str());
              if (!ref.ok()) return ref.status();
              if (what.empty()) return api.GetModel(*ref);
              if (what == "/classes") return api.GetClasses(*ref);
              if (diff) return api.DiffModels(*ref, query(req), what == "/diff.svg");
              if (what == "/tree") return api.GetTree(*ref, query(req));
              return api.GetTreeSvg(*ref, query(req));
            });
          });

  // KServe-v2-like model endpoints.
  // /v2/models/{name}[/versions/{v}][/ready]
  srv.Get(R"(/v2/models/([^/]+)(?:/versions/([^/]+))?(/ready)?)",
          [this](const httplib::Request& req, httplib::Response& res) {
            Serve(req, res, false, Rpc::kGetModel,
                  [&](const Principal&) -> absl::StatusOr<HttpBody> {
                    absl::StatusOr<v1::ModelRef> ref = ModelRefFromText(req.matches[1].str(),
                                                                     req.matches[2].str());
                    if (!ref.ok()) return ref.status();
                    if (req.matches[3].length() > 0) return api.ModelReady(*ref);
                    return api.ModelMetadata(*ref);
                  });
          });
  srv.Post(R"(/v2/models/([^/]+)(?:/versions/([^/]+))?/infer)",
           [this](const httplib::Request& req, httplib::Response& res) {
             Serve(req, res, false, std::nullopt,
                   [&](const Principal& who) -> absl::StatusOr<HttpBody> {
                     absl::StatusOr<v1::ModelRef> ref = ModelRefFromText(req.matches[1].str(),
                                                                      req.matches[2].str());
                     if (!ref.ok()) return ref.status();
                     // A page of another site can POST a form or text
                     // without asking first, but not JSON.
                     if (!IsJsonMediaType(req.get_header_value("Content-Type"))) {
                       return WithHttpStatus(
                           absl::InvalidArgumentError(absl::StrCat(
                               "the request body must be sent with Content-Type: "
                               "application/json, got '",
                               absl::CHexEscape(
                                   req.get_header_value("Content-Type").substr(0, 100)),
                               "'")),
                           415);
                     }
                     return api.Infer(*ref, req.body,
                                      [&](Rpc rpc) { return Authorize(req, who, rpc); });
                   });
           });

  // Whatever no route answered, and cpp-httplib's own refusals (413 for an
  // oversized body, 400 for a malformed request), get a JSON error too.
  srv.set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    SetCommonHeaders(res);
    if (res.status == 404) {
      SetJsonError(res, 404, "NOT_FOUND",
                   absl::StrCat("no such endpoint: ", req.method, " ", req.path,
                                " (see docs/http.md; everything but /v2/models/.../infer is GET)"));
    } else if (res.status == 413) {
      SetJsonError(res, 413, "RESOURCE_EXHAUSTED",
                   absl::StrCat("the request body is over the ",
                                options.limits.max_body_bytes >> 20,
                                " MiB limit (--http_max_body_mb)"));
    } else {
      SetJsonError(res, res.status, "INVALID_ARGUMENT",
                   absl::StrCat("the request could not be read (HTTP ", res.status, ")"));
    }
    return httplib::Server::HandlerResponse::Handled;
  }));
  srv.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        spdlog::error("HTTP {} {} threw: {}", req.method, req.path, what);
        SetCommonHeaders(res);
        SetJsonError(res, 500, "INTERNAL", "internal error (logged by the server)");
      });
}

HttpConsole::HttpConsole(HttpConsoleOptions options, HttpConsoleDeps deps)
    : impl_(std::make_unique<Impl>(std::move(options), deps)) {}

HttpConsole::~HttpConsole() { Stop(); }

absl::Status HttpConsole::Start() {
  Impl& s = *impl_;
  std::string host;
  int port = 0;
  if (absl::Status split = SplitListen(s.options.listen, &host, &port); !split.ok()) return split;
  if (!s.deps.auth->enabled() && !IsLoopbackHost(host) && !s.options.allow_insecure) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to serve the console on ", s.options.listen, " without authentication: give ",
        "--auth_keys (or --tls_client_ca), or --allow_insecure to accept any client"));
  }
  const HttpLimits& limits = s.options.limits;
  if (limits.max_body_bytes < 1 || limits.max_header_bytes < 1024 || limits.threads < 1 ||
      limits.header_timeout_seconds < 1 || limits.read_timeout_seconds < 1 ||
      limits.write_timeout_seconds < 1 || limits.keep_alive_seconds < 1 ||
      limits.max_pending_connections < 1) {
    return absl::InvalidArgumentError(
        "--http_max_body_mb, --http_max_header_kb, --http_threads, --http_*_seconds and "
        "--http_max_connections must be >= 1");
  }
  const bool tls = !s.options.tls_cert_file.empty();
  if (tls) {
    s.tls_ctx = MakeTlsContext(s.options);
    if (s.tls_ctx == nullptr) {
      return absl::InvalidArgumentError(
          "--http_listen: cannot load --tls_cert, --tls_key or --tls_client_ca for HTTPS");
    }
  }
  s.listen_host = host;
  s.server = std::make_unique<GatedServer>([&s](int sock) { s.gate->Admit(sock); });
  // One server per address: no SO_REUSEPORT (cpp-httplib's default), so a
  // second dendrod cannot bind the same port and take half the requests.
  s.server->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  // The Gate refuses larger bodies from their Content-Length; this only
  // backs it up.
  s.server->set_payload_max_length(static_cast<size_t>(limits.max_body_bytes));
  s.server->set_keep_alive_timeout(limits.keep_alive_seconds);
  s.server->set_keep_alive_max_count(kKeepAliveMaxRequests);
  s.server->set_read_timeout(limits.read_timeout_seconds);
  s.server->set_write_timeout(limits.write_timeout_seconds);
  s.Route(*s.server);
  if (port == 0) {
    s.port = s.server->bind_to_any_port(host);
  } else {
    s.port = s.server->bind_to_port(host, port) ? port : -1;
  }
  if (s.port <= 0) {
    s.port = 0;
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", s.options.listen, " (--http_listen; is the port in use?)"));
  }
  s.data_pool = std::make_unique<httplib::ThreadPool>(static_cast<size_t>(limits.threads));
  s.health_pool = std::make_unique<httplib::ThreadPool>(kHealthThreads);
  s.gate = std::make_unique<Gate>(limits, s.tls_ctx, [&s](Conn* c, bool health) {
    (health ? s.health_pool : s.data_pool)->enqueue([&s, c] { s.ServeConn(c); });
  });
  if (absl::Status started = s.gate->Start(); !started.ok()) return started;
  s.thread = std::thread([server = s.server.get()] { server->listen_after_bind(); });
  spdlog::info("web console and JSON endpoints ({}) on port {}", tls ? "HTTPS" : "HTTP", s.port);
  return absl::OkStatus();
}

int HttpConsole::port() const { return impl_->port; }

void HttpConsole::SetReady(bool ready) { impl_->ready.store(ready); }

void HttpConsole::Stop() {
  Impl& s = *impl_;
  MutexLock lock(&s.stop_mu);
  s.ready.store(false);
  s.stopping.store(true);
  if (s.server) s.server->stop();
  if (s.thread.joinable()) s.thread.join();
  // Waiting connections are closed; requests in progress finish, and their
  // connections are closed after them.
  if (s.gate) s.gate->Stop();
  if (s.data_pool) s.data_pool->shutdown();
  if (s.health_pool) s.health_pool->shutdown();
  s.data_pool.reset();
  s.health_pool.reset();
}

}  // namespace dendro::server
