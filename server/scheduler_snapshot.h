// How the scheduler loop sees the jobs of the store: a queued job as a
// scheduler::PendingJob, a job holding a worker as a scheduler::RunningJob
// with its tenant, priority, holdings and the work it would lose if stopped
// now (so fair share counts what tenants already use, and preemption picks
// the victims that lose the least). Pure functions; thread-compatible.
#ifndef TRAINYARD_SERVER_SCHEDULER_SNAPSHOT_H_
#define TRAINYARD_SERVER_SCHEDULER_SNAPSHOT_H_

#include <vector>

#include "absl/time/time.h"
#include "scheduler/cluster_snapshot.h"
#include "server/job_store.h"

namespace trainyard::server {

scheduler::PendingJob PendingJobOf(const JobRecord& record);

// The work a running job would lose if stopped at `now`, in GPU-seconds
// (CPU-slot seconds for a job without GPUs): the steps since its last
// checkpoint (or the step its attempt resumed from) at its reported
// throughput; before any throughput is known, the whole attempt so far.
double WorkSinceCheckpoint(const v1::Job& job, absl::Time now);

// The jobs in `active` (SCHEDULED, RUNNING, PREEMPTING) held by one of
// `workers`; jobs of other workers (not schedulable now) are left out, as
// the snapshot would refuse them. Only RUNNING jobs without a pending
// cancel may be preempted. A PREEMPTING job is already stopping: it is
// offered as a victim at the lowest priority that loses nothing, so the job
// it makes room for keeps counting on it in later passes instead of
// stopping another job while it winds down.
std::vector<scheduler::RunningJob> RunningJobsOf(
    const std::vector<JobRecord>& active,
    const std::vector<scheduler::WorkerCapacity>& workers, absl::Time now);

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_SCHEDULER_SNAPSHOT_H_
