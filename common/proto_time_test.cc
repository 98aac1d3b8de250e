// ToProtoTime keeps every time within the range a Timestamp may hold, so a
// message the server fills in can always be printed as JSON.
#include "common/proto_time.h"

#include <google/protobuf/util/json_util.h>

#include "gtest/gtest.h"

namespace trainyard {
namespace {

std::string Json(const google::protobuf::Timestamp& ts) {
  std::string out;
  const auto s = google::protobuf::util::MessageToJsonString(ts, &out);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

TEST(ProtoTimeTest, RoundTripsTimesInRange) {
  const absl::Time t = absl::FromUnixSeconds(1'800'000'000) +
                       absl::Nanoseconds(123'456'789);
  EXPECT_EQ(FromProtoTime(ToProtoTime(t)), t);
  const absl::Time before_1970 = absl::FromUnixSeconds(-86'400 * 365) +
                                 absl::Nanoseconds(5);
  EXPECT_EQ(FromProtoTime(ToProtoTime(before_1970)), before_1970);
  EXPECT_EQ(ToProtoTime(before_1970).nanos(), 5);
}

// 9999-12-31 plus ten years' retention, and the infinities, are clamped to
// the range's ends: the JSON form stays a valid RFC 3339 time.
TEST(ProtoTimeTest, ClampsTimesPastTheTimestampRange) {
  const absl::Time end_of_9999 =
      absl::FromCivil(absl::CivilSecond(9999, 12, 31, 0, 0, 0),
                      absl::UTCTimeZone());
  const google::protobuf::Timestamp later =
      ToProtoTime(end_of_9999 + absl::Hours(24 * 3650));
  EXPECT_EQ(later.seconds(), kMaxProtoTimeSeconds);
  EXPECT_EQ(later.nanos(), 999'999'999);
  EXPECT_EQ(Json(later), "\"9999-12-31T23:59:59.999999999Z\"");
  EXPECT_EQ(ToProtoTime(absl::InfiniteFuture()).seconds(),
            kMaxProtoTimeSeconds);

  const google::protobuf::Timestamp earlier =
      ToProtoTime(absl::InfinitePast());
  EXPECT_EQ(earlier.seconds(), kMinProtoTimeSeconds);
  EXPECT_EQ(earlier.nanos(), 0);
  EXPECT_EQ(Json(earlier), "\"0001-01-01T00:00:00Z\"");
}

}  // namespace
}  // namespace trainyard
