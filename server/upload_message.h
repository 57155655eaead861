// UploadMessage: one UploadDatasetRequest of the upload stream, decoded from
// the bytes gRPC received without copying its data or label bytes.
//
// A data or label message is, on the wire, one length-delimited field. Its
// bytes are handed out as views into the received slices, in order. Any
// other encoding (the header, several fields in one message, unknown
// fields) goes through the protobuf parser, so the result is always what
// parsing the message as a v1::UploadDatasetRequest would give.
#ifndef DENDRO_SERVER_UPLOAD_MESSAGE_H_
#define DENDRO_SERVER_UPLOAD_MESSAGE_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include <grpcpp/support/slice.h>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "dendro/v1/dendro.pb.h"
#include "proto/raw_message.h"

namespace dendro::server {

class UploadMessage {
 public:
  // Decodes `raw`, whose slices this object then keeps (the views below
  // point into them). InvalidArgument if the bytes are not a valid
  // UploadDatasetRequest.
  absl::Status Parse(RawMessage& raw);

  v1::UploadDatasetRequest::PartCase part() const { return part_; }
  // part() == kHeader.
  const v1::DatasetHeader& header() const { return parsed_.header(); }
  // part() == kData or kLabels: the field's bytes, in order.
  absl::Span<const std::string_view> pieces() const { return pieces_; }
  int64_t size() const { return size_; }

 private:
  absl::Status ParseSlowly();

  std::vector<grpc::Slice> slices_;
  std::vector<std::string_view> pieces_;
  v1::UploadDatasetRequest parsed_;  // the general path
  v1::UploadDatasetRequest::PartCase part_ = v1::UploadDatasetRequest::PART_NOT_SET;
  int64_t size_ = 0;
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_UPLOAD_MESSAGE_H_
