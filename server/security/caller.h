// IdentifyCaller: the principal behind one gRPC call, from its metadata
// (`authorization: Bearer <key>`) and its verified client certificate.
// Shared by the dendro.v1 services and the reflection guard so that every
// port identifies callers the same way.
#ifndef DENDRO_SERVER_SECURITY_CALLER_H_
#define DENDRO_SERVER_SECURITY_CALLER_H_

#include <grpcpp/grpcpp.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/security/auth.h"

namespace dendro::server {

// UNAUTHENTICATED (never repeating the key) when neither the key nor the
// certificate names a principal; any principal when authentication is off.
absl::StatusOr<Principal> IdentifyCaller(
    const Authenticator& auth,
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
    const grpc::AuthContext* auth_context);

// A server interceptor factory that makes gRPC server reflection
// (grpc.reflection.*) require a known caller of any role, for
// --auth_reflection. A refused call gets no descriptors: its requests are
// emptied before the reflection service sees them, and it ends
// UNAUTHENTICATED. Other methods pass untouched. `auth` must outlive the
// server.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MakeReflectionGuardFactory(const Authenticator* auth);

// A server interceptor factory that turns gRPC's answer to a request that
// does not parse (sent before any handler runs, with an empty message:
// INTERNAL for synchronous methods, UNIMPLEMENTED for `callback_methods`,
// full names as "/dendro.v1.ModelService/Predict") into INVALID_ARGUMENT
// naming the method. Every other status passes.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MakeParseFailureStatusFactory(std::vector<std::string> callback_methods);

}  // namespace dendro::server

#endif  // DENDRO_SERVER_SECURITY_CALLER_H_
