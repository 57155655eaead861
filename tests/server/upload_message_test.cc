#include "server/upload_message.h"

#include <grpcpp/grpcpp.h>

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dendro::server {
namespace {

// A RawMessage holding `bytes`, cut into slices at `cuts` (offsets).
RawMessage Split(const std::string& bytes, std::vector<size_t> cuts) {
  std::vector<grpc::Slice> slices;
  size_t begin = 0;
  cuts.push_back(bytes.size());
  for (size_t end : cuts) {
    slices.emplace_back(bytes.data() + begin, end - begin);
    begin = end;
  }
  return RawMessage{grpc::ByteBuffer(slices.data(), slices.size())};
}

std::string Joined(const UploadMessage& m) {
  std::string out;
  for (std::string_view p : m.pieces()) out.append(p);
  return out;
}

std::string Bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

class UploadMessageTest : public ::testing::Test {
 protected:
  void SetUp() override { grpc_init(); }
  void TearDown() override { grpc_shutdown(); }
};

TEST_F(UploadMessageTest, DataAndLabelsAreViewsOfTheReceivedBytes) {
  for (const bool labels : {false, true}) {
    v1::UploadDatasetRequest req;
    const std::string payload = Bytes(300000, 1);  // a 3-byte length
    if (labels) {
      req.set_labels(payload);
    } else {
      req.set_data(payload);
    }
    const std::string wire = req.SerializeAsString();
    // Cuts inside the tag, inside the length and through the payload.
    for (const std::vector<size_t>& cuts : std::vector<std::vector<size_t>>{
             {}, {1}, {2}, {1, 2, 3}, {4, 5, 100, 65536, 200000}}) {
      RawMessage raw = Split(wire, cuts);
      std::vector<grpc::Slice> received;
      ASSERT_TRUE(raw.bytes.Dump(&received).ok());
      UploadMessage m;
      ASSERT_TRUE(m.Parse(raw).ok());
      // Every piece lies inside a received slice: nothing was copied. (Not
      // for tiny slices: gRPC keeps up to 23 bytes inside the slice handle
      // itself, so each handle has its own copy.)
      for (std::string_view p : m.pieces()) {
        if (p.size() <= 23) continue;
        bool inside = false;
        for (const grpc::Slice& r : received) {
          const auto* b = reinterpret_cast<const char*>(r.begin());
          inside |= p.data() >= b && p.data() + p.size() <= b + r.size();
        }
        EXPECT_TRUE(inside);
      }
      EXPECT_EQ(m.part(), labels ? v1::UploadDatasetRequest::kLabels
                                 : v1::UploadDatasetRequest::kData);
      EXPECT_EQ(m.size(), 300000);
      EXPECT_EQ(Joined(m), payload);
      EXPECT_FALSE(raw.bytes.Valid());  // the slices were taken over
    }
  }
}

TEST_F(UploadMessageTest, HeaderAndEmptyMessages) {
  v1::UploadDatasetRequest req;
  req.mutable_header()->set_rows(7);
  req.mutable_header()->set_cols(3);
  req.mutable_header()->set_display_name("x");
  RawMessage raw = Split(req.SerializeAsString(), {1});
  UploadMessage m;
  ASSERT_TRUE(m.Parse(raw).ok());
  EXPECT_EQ(m.part(), v1::UploadDatasetRequest::kHeader);
  EXPECT_EQ(m.header().rows(), 7);
  EXPECT_EQ(m.header().display_name(), "x");
  EXPECT_EQ(m.size(), 0);

  RawMessage empty;
  ASSERT_TRUE(m.Parse(empty).ok());
  EXPECT_EQ(m.part(), v1::UploadDatasetRequest::PART_NOT_SET);

  // A data field of length zero still names the part.
  v1::UploadDatasetRequest zero;
  zero.set_data("");
  RawMessage z = Split(zero.SerializeAsString(), {});
  ASSERT_TRUE(m.Parse(z).ok());
  EXPECT_EQ(m.part(), v1::UploadDatasetRequest::kData);
  EXPECT_EQ(m.size(), 0);
  EXPECT_TRUE(m.pieces().empty());
}

// Any encoding the fast path does not take means what protobuf says.
TEST_F(UploadMessageTest, OtherEncodingsMatchTheProtobufParser) {
  v1::UploadDatasetRequest data, labels, header;
  data.set_data(Bytes(1000, 2));
  labels.set_labels(Bytes(24, 3));
  header.mutable_header()->set_rows(2);
  const std::string unknown_field = std::string("\x20\x05", 2);  // field 4, varint 5
  for (const std::string& wire : {
           data.SerializeAsString() + labels.SerializeAsString(),  // last part wins
           labels.SerializeAsString() + data.SerializeAsString(),
           data.SerializeAsString() + unknown_field,
           unknown_field + labels.SerializeAsString(),
           header.SerializeAsString() + data.SerializeAsString(),
           data.SerializeAsString() + data.SerializeAsString(),
       }) {
    v1::UploadDatasetRequest want;
    ASSERT_TRUE(want.ParseFromString(wire));
    RawMessage raw = Split(wire, {3});
    UploadMessage m;
    ASSERT_TRUE(m.Parse(raw).ok());
    ASSERT_EQ(m.part(), want.part_case());
    if (want.has_data()) {
      EXPECT_EQ(Joined(m), want.data());
    }
    if (want.has_labels()) {
      EXPECT_EQ(Joined(m), want.labels());
    }
    if (want.has_header()) {
      EXPECT_EQ(m.header().rows(), want.header().rows());
    }
  }
}

TEST_F(UploadMessageTest, MalformedBytesAreInvalidArgument) {
  const std::string data = [] {
    v1::UploadDatasetRequest r;
    r.set_data(Bytes(500, 4));
    return r.SerializeAsString();
  }();
  for (const std::string& wire : {
           data.substr(0, data.size() - 1),              // length past the end
           std::string("\x12\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11),  // runaway varint
           std::string("\x12", 1),                       // no length
           std::string("\x0a\x05\x08", 3),               // truncated header
           std::string("\xff\xff\xff", 3),               // not a field
       }) {
    RawMessage raw = Split(wire, {});
    UploadMessage m;
    const absl::Status s = m.Parse(raw);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("UploadDatasetRequest"), std::string::npos) << s;
  }
}

// Random messages, random cuts: the decoded part and bytes always equal
// protobuf's parse of the same bytes.
TEST_F(UploadMessageTest, RandomMessagesAgreeWithProtobuf) {
  std::mt19937 rng(5);
  UploadMessage m;  // reused, as the server does
  for (int trial = 0; trial < 300; ++trial) {
    v1::UploadDatasetRequest req;
    const size_t n = rng() % 3 == 0 ? rng() % 20 : rng() % 70000;
    switch (rng() % 3) {
      case 0: req.set_data(Bytes(n, trial)); break;
      case 1: req.set_labels(Bytes(n, trial)); break;
      default: req.mutable_header()->set_cols(static_cast<int64_t>(n)); break;
    }
    const std::string wire = req.SerializeAsString();
    std::vector<size_t> cuts;
    for (size_t at = 0; !wire.empty() && cuts.size() < 8;) {
      at += 1 + rng() % (wire.size() / 4 + 1);
      if (at >= wire.size()) break;
      cuts.push_back(at);
    }
    RawMessage raw = Split(wire, cuts);
    ASSERT_TRUE(m.Parse(raw).ok());
    ASSERT_EQ(m.part(), req.part_case());
    if (req.has_data()) {
      ASSERT_EQ(Joined(m), req.data());
    }
    if (req.has_labels()) {
      ASSERT_EQ(Joined(m), req.labels());
    }
    if (req.has_header()) {
      ASSERT_EQ(m.header().cols(), req.header().cols());
    }
  }
}

}  // namespace
}  // namespace dendro::server
