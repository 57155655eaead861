#include "server/http_console.h"

#include <httplib.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>

#include <atomic>
#include <cctype>
#include <functional>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/client_status.h"
#include "server/console_assets.h"
#include "server/http_json.h"
#include "server/logging.h"
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

}  // namespace

struct HttpConsole::Impl {
  Impl(HttpConsoleOptions o, HttpConsoleDeps d)
      : options(std::move(o)),
        deps(d),
        api(JsonApiDeps{d.datasets, d.jobs, d.models, options.max_message_bytes}) {}

  // One request: sets the log context, identifies the caller (unless
  // `open`), checks `rpc` (if any), runs `fn` and writes its answer.
  void Serve(const httplib::Request& req, httplib::Response& res, bool open,
             std::optional<Rpc> rpc,
             const std::function<absl::StatusOr<HttpBody>(const Principal&)>& fn);
  absl::Status Authorize(const httplib::Request& req, const Principal& who, Rpc rpc) const;
  void Route(httplib::Server& server);

  const HttpConsoleOptions options;
  const HttpConsoleDeps deps;
  const JsonApi api;
  std::atomic<bool> ready{false};
  std::unique_ptr<httplib::Server> server;
  std::thread thread;
  int port = 0;
  std::mutex stop_mu;
};

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
  const std::string peer = absl::StrCat(req.remote_addr, ":", req.remote_port);

  Principal who;
  absl::Status refused;
  if (!open) {
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
  SetJsonError(res, HttpStatusFor(out.code()), absl::StatusCodeToString(out.code()),
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
  // /api/v1/models/{name}/versions/{v}[/tree|/tree.svg|/classes]
  srv.Get(R"(/api/v1/models/([^/]+)/versions/([^/]+)(/tree|/tree\.svg|/classes)?)",
          [this, query](const httplib::Request& req, httplib::Response& res) {
            const std::string what = req.matches[3];
            const Rpc rpc = what.empty()           ? Rpc::kGetModel
                            : what == "/classes"   ? Rpc::kGetClasses
                                                   : Rpc::kGetTree;
            Serve(req, res, false, rpc, [&](const Principal&) -> absl::StatusOr<HttpBody> {
              absl::StatusOr<v1::ModelRef> ref = ParseModelRef(req.matches[1].str(),
                                                               req.matches[2].str());
              if (!ref.ok()) return ref.status();
              if (what.empty()) return api.GetModel(*ref);
              if (what == "/classes") return api.GetClasses(*ref);
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
                    absl::StatusOr<v1::ModelRef> ref = ParseModelRef(req.matches[1].str(),
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
                     absl::StatusOr<v1::ModelRef> ref = ParseModelRef(req.matches[1].str(),
                                                                      req.matches[2].str());
                     if (!ref.ok()) return ref.status();
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
                   absl::StrCat("the request body is over the ", options.max_message_bytes >> 20,
                                " MiB limit (--max_message_mb)"));
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
  const bool tls = !s.options.tls_cert_file.empty();
  if (tls) {
    const char* ca =
        s.options.tls_client_ca_file.empty() ? nullptr : s.options.tls_client_ca_file.c_str();
    s.server = std::make_unique<httplib::SSLServer>(s.options.tls_cert_file.c_str(),
                                                    s.options.tls_key_file.c_str(), ca);
  } else {
    s.server = std::make_unique<httplib::Server>();
  }
  if (!s.server->is_valid()) {
    return absl::InvalidArgumentError(
        "--http_listen: cannot load --tls_cert, --tls_key or --tls_client_ca for HTTPS");
  }
  // One server per address: no SO_REUSEPORT (cpp-httplib's default), so a
  // second dendrod cannot bind the same port and take half the requests.
  s.server->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  s.server->set_payload_max_length(static_cast<size_t>(s.options.max_message_bytes));
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
  s.thread = std::thread([server = s.server.get()] { server->listen_after_bind(); });
  spdlog::info("web console and JSON endpoints ({}) on port {}", tls ? "HTTPS" : "HTTP", s.port);
  return absl::OkStatus();
}

int HttpConsole::port() const { return impl_->port; }

void HttpConsole::SetReady(bool ready) { impl_->ready.store(ready); }

void HttpConsole::Stop() {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.stop_mu);
  s.ready.store(false);
  if (s.server) s.server->stop();
  if (s.thread.joinable()) s.thread.join();
}

}  // namespace dendro::server
