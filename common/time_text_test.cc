#include "common/time_text.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kMax = absl::Hours(24 * 10);

TEST(ParseWholeDurationTest, ReadsEachUnit) {
  EXPECT_EQ(*ParseWholeDuration("7d", kMax), absl::Hours(24 * 7));
  EXPECT_EQ(*ParseWholeDuration("36h", kMax), absl::Hours(36));
  EXPECT_EQ(*ParseWholeDuration("90m", kMax), absl::Minutes(90));
  EXPECT_EQ(*ParseWholeDuration("30s", kMax), absl::Seconds(30));
  EXPECT_EQ(*ParseWholeDuration("0s", kMax), absl::ZeroDuration());
  EXPECT_EQ(*ParseWholeDuration("10d", kMax), kMax);
}

TEST(ParseWholeDurationTest, SaysWhyAValueIsRefused) {
  for (auto [value, why] : std::vector<std::pair<std::string, std::string>>{
           {"", "no unit"},
           {"7", "no unit"},
           {"7w", "unknown unit"},
           {"-7d", "not a whole number"},
           {"1.5h", "not a whole number"},
           {"d7d", "not a whole number"},
           {"11d", "longer than 10d"},
           {"99999999999999999999d", "not a whole number"},
           {"9223372036854775807s", "longer than 10d"},
       }) {
    absl::StatusOr<absl::Duration> d = ParseWholeDuration(value, kMax);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << value;
    EXPECT_EQ(d.status().message(), why) << value;
  }
  EXPECT_EQ(ParseWholeDuration("3601s", absl::Hours(1)).status().message(),
            "longer than 3600s");
}

TEST(ParseTimeOrAgeTest, ReadsAgesDatesAndRfc3339Times) {
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  EXPECT_EQ(*ParseTimeOrAge("now", now), now);
  EXPECT_EQ(*ParseTimeOrAge("7d", now), now - absl::Hours(24 * 7));
  EXPECT_EQ(*ParseTimeOrAge("90m", now), now - absl::Minutes(90));
  EXPECT_EQ(*ParseTimeOrAge("2026-11-01", now),
            absl::FromCivil(absl::CivilDay(2026, 11, 1), absl::UTCTimeZone()));
  EXPECT_EQ(*ParseTimeOrAge("2026-11-01T09:30:00Z", now),
            absl::FromCivil(absl::CivilSecond(2026, 11, 1, 9, 30, 0),
                            absl::UTCTimeZone()));
  EXPECT_EQ(*ParseTimeOrAge("2026-11-01T10:30:00+01:00", now),
            absl::FromCivil(absl::CivilSecond(2026, 11, 1, 9, 30, 0),
                            absl::UTCTimeZone()));
}

TEST(ParseTimeOrAgeTest, NamesTheValueAndTheFormsItTakes) {
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  for (const std::string value :
       {"yesterday", "2026-13-01", "2026-11-01 09:30", "", "7w"}) {
    absl::StatusOr<absl::Time> t = ParseTimeOrAge(value, now);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << value;
    EXPECT_THAT(t.status().message(),
                HasSubstr(absl::StrCat("\"", value, "\" is not a time")));
    EXPECT_THAT(t.status().message(), HasSubstr("such as 7d"));
  }
  EXPECT_THAT(ParseTimeOrAge("99999d", now).status().message(),
              HasSubstr("\"99999d\" is not a time (longer than 3650d)"));
}

}  // namespace
}  // namespace trainyard
