// One unary call whose request and answer are encoded bytes, for calls the
// generated stubs do not cover (grpc.health.v1, whose protos this library
// does not build) or must not (a test's malformed request).
#ifndef DENDRO_CLIENT_RAW_CALL_H_
#define DENDRO_CLIENT_RAW_CALL_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <string_view>

namespace dendro {

// Calls `method` ("/package.Service/Method") on `channel` with `request` as
// the message bytes and waits for the answer; its bytes go to `*response`
// (cleared first) when the status is OK. `ctx` carries the deadline and
// metadata as for any call.
grpc::Status RawUnaryCall(const std::shared_ptr<grpc::Channel>& channel, grpc::ClientContext* ctx,
                          const std::string& method, std::string_view request,
                          std::string* response);

}  // namespace dendro

#endif  // DENDRO_CLIENT_RAW_CALL_H_
