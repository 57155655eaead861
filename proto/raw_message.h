// RawMessage: a gRPC message held as its serialized bytes, with no protobuf
// parse or serialization in between.
//
// Received, it holds the slices gRPC read from the connection (shared, not
// copied); sent, it holds slices the sender assembled, which may point at
// the caller's own memory. The upload stream uses it on both sides so that
// bulk bytes are never copied into or out of a protobuf string
// (server/upload_message.h decodes it, client/client.cc encodes it). The
// bytes on the wire are an ordinary protobuf encoding, so every other
// client and server interoperates with it unchanged.
#ifndef DENDRO_PROTO_RAW_MESSAGE_H_
#define DENDRO_PROTO_RAW_MESSAGE_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/status.h>

namespace dendro {

struct RawMessage {
  grpc::ByteBuffer bytes;
};

}  // namespace dendro

namespace grpc {

// How gRPC's generated and internal call code moves a RawMessage.
template <>
class SerializationTraits<dendro::RawMessage, void> {
 public:
  // Shares the slices (a reference count, not a copy).
  static Status Serialize(const dendro::RawMessage& msg, ByteBuffer* out, bool* own_buffer) {
    *out = msg.bytes;
    *own_buffer = true;
    return Status::OK;
  }
  // Takes the received buffer over. The caller releases `in` without
  // destroying it afterwards, so `in` must be left empty.
  static Status Deserialize(ByteBuffer* in, dendro::RawMessage* msg) {
    msg->bytes.Clear();
    msg->bytes.Swap(in);
    return Status::OK;
  }
};

}  // namespace grpc

#endif  // DENDRO_PROTO_RAW_MESSAGE_H_
