// WorkerDrains: administrators' drains of workers, for maintenance, and
// forgetting workers gone for good. A
// drained worker takes no new jobs; unless the drain keeps them, the jobs
// running there are preempted (each writes a checkpoint, goes back to the
// queue and resumes on another worker). Drains are committed to the job
// store first, then mirrored in the worker registry (which keeps the worker
// unschedulable), so they hold across the worker's reconnects and server
// restarts until undrained.
//
// Moving the jobs is level-triggered: each scheduling pass preempts what
// still runs on a drained worker (DrainPreemptions), so a job that was only
// SCHEDULED at the drain, or that re-attaches after a server restart, moves
// too. Safe for concurrent use.
#ifndef TRAINYARD_SERVER_WORKER_DRAINS_H_
#define TRAINYARD_SERVER_WORKER_DRAINS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "server/job_store.h"
#include "server/worker_registry.h"
#include "trainyard/v1/cluster.pb.h"

namespace trainyard::server {

inline constexpr size_t kMaxDrainReason = 256;

class WorkerDrains {
 public:
  // `wake` is called after every change (the scheduler moves the jobs).
  WorkerDrains(JobStore* store, WorkerRegistry* workers, Clock* clock,
               std::function<void()> wake)
      : store_(store), workers_(workers), clock_(clock), wake_(wake) {}

  // At server start: the stored drains into the registry.
  absl::Status Load();

  // INVALID_ARGUMENT for an empty worker id or a reason over
  // kMaxDrainReason bytes; NOT_FOUND for a worker neither connected since
  // the server started nor drained already. Replaces an earlier drain.
  absl::StatusOr<v1::WorkerDrain> Drain(const std::string& worker_id,
                                        const std::string& reason,
                                        bool keep_jobs);
  // NOT_FOUND for an unknown worker; FAILED_PRECONDITION when no
  // administrator drains it.
  absl::Status Undrain(const std::string& worker_id);
  // Forgets a lost worker (WorkerRegistry::Forget) and ends its drain in
  // the store, if any; INVALID_ARGUMENT for an empty id.
  absl::Status Forget(const std::string& worker_id);

 private:
  JobStore* const store_;
  WorkerRegistry* const workers_;
  Clock* const clock_;
  const std::function<void()> wake_;
};

// A job that must leave a drained worker: preempt it on its own worker.
struct DrainPreemption {
  std::string job_id;
  std::string worker_id;  // the job's own worker (rank 0)
  std::string reason;
};

// The RUNNING jobs (no cancel pending) of `active` with a rank on a worker
// of `workers` drained without keep_jobs, each once.
std::vector<DrainPreemption> DrainPreemptions(
    const std::vector<JobRecord>& active,
    const std::vector<WorkerStatus>& workers);

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_WORKER_DRAINS_H_
