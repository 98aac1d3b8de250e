// Conversions between absl::Time and google.protobuf.Timestamp. Pure
// functions, safe anywhere. Header-only: users link the protobuf runtime
// through their proto targets.
#ifndef TRAINYARD_COMMON_PROTO_TIME_H_
#define TRAINYARD_COMMON_PROTO_TIME_H_

#include <google/protobuf/timestamp.pb.h>

#include "absl/time/time.h"

namespace trainyard {

// Whole seconds (toward the past) and the nanoseconds after them, so that
// any time absl holds converts (int64 nanoseconds end in 1677 and 2262).
inline google::protobuf::Timestamp ToProtoTime(absl::Time t) {
  google::protobuf::Timestamp ts;
  const int64_t seconds = absl::ToUnixSeconds(t);
  ts.set_seconds(seconds);
  ts.set_nanos(static_cast<int32_t>(
      absl::ToInt64Nanoseconds(t - absl::FromUnixSeconds(seconds))));
  return ts;
}

inline absl::Time FromProtoTime(const google::protobuf::Timestamp& ts) {
  return absl::FromUnixSeconds(ts.seconds()) + absl::Nanoseconds(ts.nanos());
}

// True when the timestamp was set (the epoch itself counts as unset).
inline bool IsSet(const google::protobuf::Timestamp& ts) {
  return ts.seconds() != 0 || ts.nanos() != 0;
}

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_PROTO_TIME_H_
