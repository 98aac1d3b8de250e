// Time limits (spec.time_limit_s): which jobs have held workers for as long
// as their spec allows, and when the next running one will have. The
// scheduler loop cancels the former each pass and wakes for the latter.
// Pure functions; thread-safe.
#ifndef TRAINYARD_SERVER_TIME_LIMITS_H_
#define TRAINYARD_SERVER_TIME_LIMITS_H_

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

TimeLimitCheck CheckTimeLimits(const std::vector<JobRecord>& jobs,
                               absl::Time now);

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_TIME_LIMITS_H_
