#include "server/upload_message.h"

#include <string>

namespace dendro::server {
namespace {

// Field tags of UploadDatasetRequest (field number << 3 | wire type 2).
constexpr uint8_t kDataTag = (2 << 3) | 2;
constexpr uint8_t kLabelsTag = (3 << 3) | 2;

// Reads bytes in order across a list of slices.
class SliceCursor {
 public:
  explicit SliceCursor(const std::vector<grpc::Slice>& slices) : slices_(slices) {}

  bool Next(uint8_t* byte) {
    while (slice_ < slices_.size() && offset_ == slices_[slice_].size()) {
      ++slice_;
      offset_ = 0;
    }
    if (slice_ == slices_.size()) return false;
    *byte = slices_[slice_].begin()[offset_++];
    ++consumed_;
    return true;
  }

  // A base-128 varint of at most 10 bytes.
  bool Varint(uint64_t* value) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!Next(&b)) return false;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) {
        *value = v;
        return true;
      }
    }
    return false;
  }

  // Views of the rest of the bytes, in order.
  void Rest(std::vector<std::string_view>* out) const {
    size_t slice = slice_, offset = offset_;
    for (; slice < slices_.size(); ++slice, offset = 0) {
      const grpc::Slice& s = slices_[slice];
      if (offset < s.size()) {
        out->emplace_back(reinterpret_cast<const char*>(s.begin()) + offset, s.size() - offset);
      }
    }
  }

  uint64_t consumed() const { return consumed_; }

 private:
  const std::vector<grpc::Slice>& slices_;
  size_t slice_ = 0;
  size_t offset_ = 0;
  uint64_t consumed_ = 0;
};

}  // namespace

absl::Status UploadMessage::Parse(RawMessage& raw) {
  slices_.clear();
  pieces_.clear();
  parsed_.Clear();
  part_ = v1::UploadDatasetRequest::PART_NOT_SET;
  size_ = 0;
  if (raw.bytes.Valid()) {
    if (!raw.bytes.Dump(&slices_).ok()) {
      return absl::InvalidArgumentError("upload: unreadable message");
    }
    raw.bytes.Clear();  // the slices are now held here alone
  }
  uint64_t total = 0;
  for (const grpc::Slice& s : slices_) total += s.size();

  // The common case: exactly one data or labels field.
  SliceCursor cursor(slices_);
  uint8_t tag = 0;
  uint64_t length = 0;
  if (cursor.Next(&tag) && (tag == kDataTag || tag == kLabelsTag) && cursor.Varint(&length) &&
      length == total - cursor.consumed()) {
    part_ = tag == kDataTag ? v1::UploadDatasetRequest::kData : v1::UploadDatasetRequest::kLabels;
    cursor.Rest(&pieces_);
    size_ = static_cast<int64_t>(length);
    return absl::OkStatus();
  }
  return ParseSlowly();
}

absl::Status UploadMessage::ParseSlowly() {
  std::string bytes;
  for (const grpc::Slice& s : slices_) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  slices_.clear();
  if (!parsed_.ParseFromString(bytes)) {
    return absl::InvalidArgumentError("upload: a message is not a valid UploadDatasetRequest");
  }
  part_ = parsed_.part_case();
  const std::string* field = nullptr;
  if (part_ == v1::UploadDatasetRequest::kData) field = &parsed_.data();
  if (part_ == v1::UploadDatasetRequest::kLabels) field = &parsed_.labels();
  if (field != nullptr) {
    if (!field->empty()) pieces_.emplace_back(*field);
    size_ = static_cast<int64_t>(field->size());
  }
  return absl::OkStatus();
}

}  // namespace dendro::server
