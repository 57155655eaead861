// What every record carries: a random id and wall-clock timestamps.
#ifndef DENDRO_SERVER_BASE_IDS_H_
#define DENDRO_SERVER_BASE_IDS_H_

#include <string>
#include <string_view>

#include <google/protobuf/timestamp.pb.h>

namespace dendro::server {

// Random lowercase hex id with a prefix, e.g. NewId("ds") -> "ds-3f9c0a1b2d4e".
std::string NewId(std::string_view prefix);
// The wall clock now, for Timestamp fields.
void SetNow(google::protobuf::Timestamp* ts);

}  // namespace dendro::server

#endif  // DENDRO_SERVER_BASE_IDS_H_
