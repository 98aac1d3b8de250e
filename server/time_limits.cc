#include "server/time_limits.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/job_state.h"

namespace trainyard::server {

TimeLimitCheck CheckTimeLimits(
    const std::vector<JobRecord>& jobs, absl::Time now,
    const std::function<absl::Time(const JobRecord&)>& held_until) {
  TimeLimitCheck check;
  for (const JobRecord& r : jobs) {
    const int64_t limit_s = r.job.spec().time_limit_s();
    if (limit_s <= 0 || IsTerminal(r.job.state()) || r.cancel_requested()) {
      continue;
    }
    const absl::Duration limit = absl::Seconds(limit_s);
    const absl::Time until =
        held_until && IsActive(r.job.state()) ? held_until(r) : now;
    const absl::Duration held = TimeHeld(r.job, std::min(until, now));
    if (held >= limit) {
      check.stops.push_back(
          {r.job.id(), absl::StrCat("time limit reached: held workers for ",
                                    absl::FormatDuration(
                                        absl::Trunc(held, absl::Seconds(1))),
                                    " (time_limit_s: ", limit_s, ")")});
    } else if (IsActive(r.job.state())) {
      check.next = std::min(check.next, now + (limit - held));
    }
  }
  return check;
}

}  // namespace trainyard::server
