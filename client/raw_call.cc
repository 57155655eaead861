#include "client/raw_call.h"

#include <grpcpp/generic/generic_stub.h>

#include <vector>

namespace dendro {

grpc::Status RawUnaryCall(const std::shared_ptr<grpc::Channel>& channel, grpc::ClientContext* ctx,
                          const std::string& method, std::string_view request,
                          std::string* response) {
  response->clear();
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::Slice slice(request.data(), request.size());
  const grpc::ByteBuffer request_buffer(&slice, 1);
  auto call = stub.PrepareUnaryCall(ctx, method, request_buffer, &cq);
  call->StartCall();
  grpc::ByteBuffer response_buffer;
  grpc::Status status;
  call->Finish(&response_buffer, &status, /*tag=*/reinterpret_cast<void*>(1));
  // The one event is the call's end; then the queue is drained and closed.
  void* tag = nullptr;
  bool ok = false;
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  if (!status.ok()) return status;
  std::vector<grpc::Slice> slices;
  (void)response_buffer.Dump(&slices);
  for (const grpc::Slice& s : slices) {
    response->append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return status;
}

}  // namespace dendro
