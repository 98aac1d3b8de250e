// Durations and times as people write them on command lines: "7d", "36h",
// "90m", "30s"; "2026-11-01"; "2026-11-01T09:30:00Z". Pure functions;
// thread-safe.
#ifndef TRAINYARD_COMMON_TIME_TEXT_H_
#define TRAINYARD_COMMON_TIME_TEXT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trainyard {

// A whole number with a unit d, h, m or s ("7d", "36h", "90m", "30s"), at
// most `max`. INVALID_ARGUMENT saying only why ("no unit", "unknown unit",
// "not a whole number", "longer than 3650d"): callers name the value.
absl::StatusOr<absl::Duration> ParseWholeDuration(const std::string& value,
                                                  absl::Duration max);

// A point in time: "now"; an age, `now` less a whole duration as above
// (at most ten years); a date "YYYY-MM-DD" (its midnight, UTC); or an RFC
// 3339 time ("2026-11-01T09:30:00Z", "2026-11-01T10:30:00+01:00").
// INVALID_ARGUMENT naming the value and the forms otherwise.
absl::StatusOr<absl::Time> ParseTimeOrAge(const std::string& value,
                                          absl::Time now);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_TIME_TEXT_H_
