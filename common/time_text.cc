#include "common/time_text.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace trainyard {
namespace {

// "3650d" for whole days, else "90s".
std::string Written(absl::Duration d) {
  const absl::Duration day = absl::Hours(24);
  if (d % day == absl::ZeroDuration()) return absl::StrCat(d / day, "d");
  return absl::StrCat(absl::ToInt64Seconds(d), "s");
}

}  // namespace

absl::StatusOr<absl::Duration> ParseWholeDuration(const std::string& value,
                                                  absl::Duration max) {
  if (value.size() < 2) return absl::InvalidArgumentError("no unit");
  absl::Duration unit;
  switch (value.back()) {
    case 'd':
      unit = absl::Hours(24);
      break;
    case 'h':
      unit = absl::Hours(1);
      break;
    case 'm':
      unit = absl::Minutes(1);
      break;
    case 's':
      unit = absl::Seconds(1);
      break;
    default:
      return absl::InvalidArgumentError("unknown unit");
  }
  const std::string number = value.substr(0, value.size() - 1);
  int64_t n = 0;
  if (number.find_first_not_of("0123456789") != std::string::npos ||
      !absl::SimpleAtoi(number, &n)) {
    return absl::InvalidArgumentError("not a whole number");
  }
  if (n > absl::ToInt64Seconds(max) || n * unit > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("longer than ", Written(max)));
  }
  return n * unit;
}

absl::StatusOr<absl::Time> ParseTimeOrAge(const std::string& value,
                                          absl::Time now) {
  if (value == "now") return now;
  absl::StatusOr<absl::Duration> age =
      ParseWholeDuration(value, absl::Hours(24 * 3650));
  if (age.ok()) return now - *age;
  absl::Time t;
  std::string error;
  if (absl::ParseTime("%Y-%m-%d", value, absl::UTCTimeZone(), &t, &error) ||
      absl::ParseTime(absl::RFC3339_full, value, absl::UTCTimeZone(), &t,
                      &error)) {
    return t;
  }
  // Say why it is no age when it looks like one ("5w", "99999d"), not like a
  // date or a time.
  const bool looks_like_age = !value.empty() && absl::ascii_isdigit(value[0]) &&
                              value.find_first_of("-:") == std::string::npos;
  return absl::InvalidArgumentError(absl::StrCat(
      "\"", value, "\" is not a time",
      looks_like_age ? absl::StrCat(" (", age.status().message(), ")") : "",
      ": give an age such as 7d, 36h or 90m, a date such as 2026-11-01 "
      "(UTC), an RFC 3339 time such as 2026-11-01T09:30:00Z, or now"));
}

}  // namespace trainyard
