// Conversions between absl::Time and google.protobuf.Timestamp. Pure
// functions, safe anywhere. Header-only: users link the protobuf runtime
// through their proto targets.
#ifndef TRAINYARD_COMMON_PROTO_TIME_H_
#define TRAINYARD_COMMON_PROTO_TIME_H_

#include <google/protobuf/timestamp.pb.h>

#include <algorithm>
#include <cstdint>

#include "absl/time/time.h"

namespace trainyard {

// The range a google.protobuf.Timestamp may hold (0001-01-01T00:00:00Z to
// 9999-12-31T23:59:59.999999999Z): its JSON form has four-digit years, and
// protobuf refuses to print a message with a time outside it.
inline constexpr int64_t kMinProtoTimeSeconds = -62'135'596'800;
inline constexpr int64_t kMaxProtoTimeSeconds = 253'402'300'799;

// Whole seconds (toward the past) and the nanoseconds after them, so that
// any time absl holds converts (int64 nanoseconds end in 1677 and 2262).
// A time outside the Timestamp range (a far end plus a retention, an
// infinite time) is clamped to its nearest end, so every timestamp a
// message carries can be printed as JSON.
inline google::protobuf::Timestamp ToProtoTime(absl::Time t) {
  t = std::clamp(t, absl::FromUnixSeconds(kMinProtoTimeSeconds),
                 absl::FromUnixSeconds(kMaxProtoTimeSeconds) +
                     absl::Nanoseconds(999'999'999));
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
