#include "server/security/caller.h"

#include <google/protobuf/message.h>
#include <grpcpp/support/server_interceptor.h>

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace dendro::server {

absl::StatusOr<Principal> IdentifyCaller(
    const Authenticator& auth,
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
    const grpc::AuthContext* auth_context) {
  std::optional<std::string_view> bearer;
  std::optional<std::string_view> common_name;
  if (auto it = metadata.find("authorization"); it != metadata.end()) {
    bearer = std::string_view(it->second.data(), it->second.size());
  }
  std::vector<grpc::string_ref> cns;
  if (auth_context != nullptr && auth_context->IsPeerAuthenticated()) {
    cns = auth_context->FindPropertyValues("x509_common_name");
    if (!cns.empty()) common_name = std::string_view(cns[0].data(), cns[0].size());
  }
  return auth.Identify(bearer, common_name);
}

namespace {

using grpc::experimental::InterceptionHookPoints;

class ReflectionGuard final : public grpc::experimental::Interceptor {
 public:
  ReflectionGuard(const Authenticator* auth, grpc::experimental::ServerRpcInfo* info)
      : auth_(auth), info_(info) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      grpc::ServerContextBase* ctx = info_->server_context();
      std::shared_ptr<const grpc::AuthContext> auth_context = ctx->auth_context();
      absl::StatusOr<Principal> who =
          IdentifyCaller(*auth_, *methods->GetRecvInitialMetadata(), auth_context.get());
      if (!who.ok()) {
        refusal_ = grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                                std::string(who.status().message()));
        spdlog::warn("audit: {} refused: {} (peer {})", info_->method(),
                     std::string(who.status().message()), ctx->peer());
      }
    }
    if (refusal_.has_value()) {
      if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE)) {
        // Reflection requests are protobuf messages; an empty one names
        // nothing, so the service can answer it without revealing a schema.
        if (void* msg = methods->GetRecvMessage()) {
          static_cast<google::protobuf::Message*>(msg)->Clear();
        }
      }
      if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
        methods->ModifySendStatus(*refusal_);
      }
    }
    methods->Proceed();
  }

 private:
  const Authenticator* const auth_;
  grpc::experimental::ServerRpcInfo* const info_;
  std::optional<grpc::Status> refusal_;
};

class ReflectionGuardFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit ReflectionGuardFactory(const Authenticator* auth) : auth_(auth) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    const char* method = info->method();
    if (method != nullptr && absl::StartsWith(method, "/grpc.reflection.")) {
      return new ReflectionGuard(auth_, info);
    }
    return nullptr;
  }

 private:
  const Authenticator* const auth_;
};

// gRPC answers a request it cannot parse as its method's message before any
// handler runs: INTERNAL and no message for a synchronous method, and
// UNIMPLEMENTED and no message for one served by the callback API. The
// client sent the bad bytes, and every handler's own status carries a
// message, so that pair is rewritten to INVALID_ARGUMENT saying what was
// wrong. (UNIMPLEMENTED is rewritten only for the callback methods: for a
// method the server does not have it is the right answer.)
class ParseFailureStatus final : public grpc::experimental::Interceptor {
 public:
  // `method` is the call's, which outlives this interceptor: not copied,
  // since one is made for every call.
  ParseFailureStatus(const char* method, bool callback)
      : method_(method != nullptr ? method : ""), callback_(callback) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status sent = methods->GetSendStatus();
      const grpc::StatusCode parse_failure =
          callback_ ? grpc::StatusCode::UNIMPLEMENTED : grpc::StatusCode::INTERNAL;
      if (sent.error_code() == parse_failure && sent.error_message().empty()) {
        const std::string_view full(method_);
        const std::string name(full.substr(full.rfind('/') + 1));
        methods->ModifySendStatus(grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat("the request is not a valid ", name,
                         " request: its bytes do not parse as the protobuf message the method "
                         "takes (dendro.v1 in proto/dendro/v1/dendro.proto)")));
      }
    }
    methods->Proceed();
  }

 private:
  const char* const method_;
  const bool callback_;
};

class ParseFailureStatusFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit ParseFailureStatusFactory(std::vector<std::string> callback_methods)
      : callback_methods_(std::move(callback_methods)) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    const std::string_view method = info->method() != nullptr ? info->method() : "";
    const bool callback = std::find(callback_methods_.begin(), callback_methods_.end(), method) !=
                          callback_methods_.end();
    return new ParseFailureStatus(info->method(), callback);
  }

 private:
  const std::vector<std::string> callback_methods_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MakeParseFailureStatusFactory(std::vector<std::string> callback_methods) {
  return std::make_unique<ParseFailureStatusFactory>(std::move(callback_methods));
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MakeReflectionGuardFactory(const Authenticator* auth) {
  return std::make_unique<ReflectionGuardFactory>(auth);
}

}  // namespace dendro::server
