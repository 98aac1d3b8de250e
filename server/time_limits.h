// Time limits (spec.time_limit_s): which jobs have held workers for as long
// as their spec allows, and when the next running one will have. The
// scheduler loop cancels the former each pass and wakes for the latter.
// Held time is what usage accounting charges (attempt_usage.h): from each
// attempt's assignment to its end, the time a server was down not counted
// against an attempt whose worker stopped it meanwhile.
// Pure functions; thread-safe.
#ifndef TRAINYARD_SERVER_TIME_LIMITS_H_
#define TRAINYARD_SERVER_TIME_LIMITS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/job_store.h"

namespace trainyard::server {

struct TimeLimitStop {
  std::string job_id;
  std::string reason;  // the cancel's reason, naming the limit
};

struct TimeLimitCheck {
  // Jobs (queued or holding workers, no cancel pending yet) whose TimeHeld
  // reached their limit, in the order given.
  std::vector<TimeLimitStop> stops;
  // When the first job still holding workers under a limit reaches it;
  // InfiniteFuture when none does.
  absl::Time next = absl::InfiniteFuture();
};

// `held_until`, when given, says how far each job's open attempt counts
// (HeldUntil in job_lifecycle.h: now while its workers are heard; their
// last contact plus the lease when the server has not heard them since,
// e.g. after it was down); unset, up to `now`.
TimeLimitCheck CheckTimeLimits(
    const std::vector<JobRecord>& jobs, absl::Time now,
    const std::function<absl::Time(const JobRecord&)>& held_until = nullptr);

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_TIME_LIMITS_H_
