// Usage reports (GetUsage, `yard usage`): the GPU- and CPU-slot-seconds
// jobs held in a window, by tenant and by job, as Slurm's sreport and sacct
// give them. Each attempt counts from its assignment to its end, cut to the
// window, times what it held (server/attempt_usage.h). Ended attempts come
// from the store's usage table (kept after their job is deleted), running
// ones from the jobs themselves, charged up to now.
#ifndef TRAINYARD_SERVER_USAGE_REPORT_H_
#define TRAINYARD_SERVER_USAGE_REPORT_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/attempt_usage.h"
#include "server/job_store.h"
#include "trainyard/v1/jobs.pb.h"

namespace trainyard::server {

// The most job rows a report holds (UsageReport.jobs_truncated beyond).
inline constexpr int kMaxUsageJobRows = 1000;
// The window when the request names no start: this long before its end.
inline constexpr absl::Duration kDefaultUsageWindow = absl::Hours(24 * 7);

struct UsageQuery {
  absl::Time start;
  absl::Time end;
  std::string tenant;  // empty: every tenant
  bool by_job = false;
};

// The window of `request` at `now`: end unset or later than now is now;
// start unset is kDefaultUsageWindow before the end. INVALID_ARGUMENT
// naming the field when start is not before end or is before 1970.
absl::StatusOr<UsageQuery> UsageQueryOf(const v1::GetUsageRequest& request,
                                        absl::Time now);

// Sums `attempts` over the query's window: an attempt outside it or of
// another tenant adds nothing, and one listed twice counts once, as listed
// first. The by-job rows' states are left unset.
v1::UsageReport SumUsage(const std::vector<AttemptUsage>& attempts,
                         const UsageQuery& query);

// The report for `query` from `store`, running attempts charged up to
// `now` (or, with `held_until`, up to what it says of the job, never past
// now: how far its workers were heard from), with each listed job's state
// (unset for a deleted job).
absl::StatusOr<v1::UsageReport> ReportUsage(
    const JobStore& store, const UsageQuery& query, absl::Time now,
    const std::function<absl::Time(const JobRecord&)>& held_until = nullptr);

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_USAGE_REPORT_H_
