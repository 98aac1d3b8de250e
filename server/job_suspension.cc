// JobLifecycle: suspend and resume. A suspended job is parked: it holds no
// worker, the scheduler does not look at it, and it keeps its checkpoints
// until ResumeJob queues it again. A running job is stopped the way a
// preemption stops it (RUNNING -> PREEMPTING, SIGTERM, a checkpoint, exit),
// with Job.suspend_reason set so that its exit parks it instead of queueing
// it (Transition in job_state.cc does the redirect, whichever way it stops).
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "server/job_lifecycle.h"
#include "server/job_state.h"

namespace trainyard::server {

absl::StatusOr<v1::Job> JobLifecycle::Suspend(const std::string& job_id,
                                              const std::string& reason) {
  const std::string why = reason.empty() ? "suspended by user" : reason;
  v1::JobState before = v1::JOB_STATE_UNSPECIFIED;
  std::vector<std::string> held_by;  // of a SCHEDULED job, before the suspend
  ASSIGN_OR_RETURN(
      JobRecord record,
      store_->UpdateJob(
          job_id, Durability::kTransition,
          [&](JobRecord& r,
              std::vector<v1::JobEvent>& events) -> absl::StatusOr<bool> {
            before = r.job.state();
            RETURN_IF_ERROR(CheckNotEnded(r.job));
            if (r.cancel_requested()) {
              return absl::FailedPreconditionError(
                  absl::StrCat("job ", job_id, " is being cancelled"));
            }
            if (before == v1::QUEUED || before == v1::SCHEDULED) {
              held_by = WorkersOf(r);
              ASSIGN_OR_RETURN(
                  *events.emplace_back().mutable_state_change(),
                  Transition(r.job, v1::SUSPENDED, why, clock_->Now()));
              ReleaseHoldings(r);
              return true;
            }
            if (before == v1::RUNNING) {
              ASSIGN_OR_RETURN(
                  *events.emplace_back().mutable_state_change(),
                  Transition(r.job, v1::PREEMPTING,
                             absl::StrCat("suspending: ", why), clock_->Now()));
              r.job.set_suspend_reason(why);
              return true;
            }
            if (before == v1::PREEMPTING && r.job.suspend_reason().empty()) {
              // Already stopping (preempted, drained): it parks instead of
              // going back to the queue.
              r.job.set_suspend_reason(why);
              r.job.set_state_reason(
                  absl::StrCat(r.job.state_reason(), "; then suspended"));
              return true;
            }
            return false;  // SUSPENDED, or already stopping for a suspend
          }));
  if (before == v1::SCHEDULED) {
    // The workers may have started it already: stop that attempt at once.
    StopAttemptOn(workers_, job_id, record.job.attempt(), held_by);
  } else if (before == v1::RUNNING) {
    // Not delivered (the worker is away): it is sent again when the worker
    // re-attaches the job, and a lost worker's job is parked at once.
    for (const std::string& worker : WorkersOf(record)) {
      workers_->Send(worker, PreemptFor(record));
    }
  }
  YARD_LOG(INFO) << "job " << job_id << " suspend: " << why << " (was "
                 << JobStateName(before) << ", now "
                 << JobStateName(record.job.state()) << ")";
  WakeScheduler();
  return std::move(record.job);
}

absl::StatusOr<v1::Job> JobLifecycle::Resume(const std::string& job_id) {
  v1::JobState before = v1::JOB_STATE_UNSPECIFIED;
  ASSIGN_OR_RETURN(
      JobRecord record,
      store_->UpdateJob(
          job_id, Durability::kTransition,
          [&](JobRecord& r,
              std::vector<v1::JobEvent>& events) -> absl::StatusOr<bool> {
            before = r.job.state();
            if (before == v1::SUSPENDED) {
              ASSIGN_OR_RETURN(*events.emplace_back().mutable_state_change(),
                               Transition(r.job, v1::QUEUED, "resumed by user",
                                          clock_->Now()));
              return true;
            }
            if (before == v1::PREEMPTING && !r.job.suspend_reason().empty()) {
              // Still stopping: it goes back to the queue once stopped.
              r.job.clear_suspend_reason();
              r.job.set_state_reason("resumed by user before it had stopped");
              return true;
            }
            return absl::FailedPreconditionError(
                absl::StrCat("job ", job_id, " is not suspended (",
                             JobStateName(before), ")"));
          }));
  YARD_LOG(INFO) << "job " << job_id << " resumed (was " << JobStateName(before)
                 << ")";
  WakeScheduler();
  return std::move(record.job);
}

}  // namespace trainyard::server
