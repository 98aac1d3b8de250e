// Conversions between absl::Time and google.protobuf.Timestamp. Pure
// functions, safe anywhere.
#ifndef TRAINYARD_SERVER_PROTO_TIME_H_
#define TRAINYARD_SERVER_PROTO_TIME_H_

#include <google/protobuf/timestamp.pb.h>

#include "absl/time/time.h"

namespace trainyard::server {

inline google::protobuf::Timestamp ToProtoTime(absl::Time t) {
  google::protobuf::Timestamp ts;
  const int64_t nanos = absl::ToUnixNanos(t);
  ts.set_seconds(nanos / 1'000'000'000);
  ts.set_nanos(static_cast<int32_t>(nanos % 1'000'000'000));
  if (ts.nanos() < 0) {
    ts.set_seconds(ts.seconds() - 1);
    ts.set_nanos(ts.nanos() + 1'000'000'000);
  }
  return ts;
}

inline absl::Time FromProtoTime(const google::protobuf::Timestamp& ts) {
  return absl::FromUnixSeconds(ts.seconds()) + absl::Nanoseconds(ts.nanos());
}

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_PROTO_TIME_H_
