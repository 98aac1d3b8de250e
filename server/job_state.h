// The job state machine of DESIGN.md §4, as pure functions over a v1::Job:
//
//   QUEUED -> SCHEDULED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED
//   QUEUED | SCHEDULED -> CANCELLED          (cancelled before it ran)
//   SCHEDULED | RUNNING -> QUEUED            (worker lost, assignment lost
//                                             or refused by the worker)
//   RUNNING -> PREEMPTING -> QUEUED          (preemption; resumes later)
//   SCHEDULED -> FAILED                      (the job could not start)
//   PREEMPTING -> SUCCEEDED | FAILED | CANCELLED (it ended while stopping)
//   QUEUED | SCHEDULED | PREEMPTING -> SUSPENDED (SuspendJob; a running
//                                             job stops through PREEMPTING)
//   SUSPENDED -> QUEUED | CANCELLED          (ResumeJob, CancelJob)
//
// Every SCHEDULED starts a new attempt (Job.attempt + 1, recorded in
// Job.attempts with its worker and times); leaving SCHEDULED/RUNNING/
// PREEMPTING for QUEUED or a terminal state ends it with that outcome.
// No I/O and no locks: callers apply these inside a store transaction.
#ifndef TRAINYARD_SERVER_JOB_STATE_H_
#define TRAINYARD_SERVER_JOB_STATE_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trainyard/v1/jobs.pb.h"

namespace trainyard::server {

// "QUEUED", "RUNNING", ...
std::string JobStateName(v1::JobState state);

bool IsTerminal(v1::JobState state);  // SUCCEEDED, FAILED, CANCELLED
// SCHEDULED, RUNNING, PREEMPTING: an attempt holds a worker.
bool IsActive(v1::JobState state);
// The states a job in the store can be in (QUEUED through SUSPENDED).
bool IsKnownState(v1::JobState state);

// What a queued job may wait for before the scheduler looks for room for
// it, each read from the job alone: a job of its depends_on to succeed (not
// yet marked met), its warm start's source to end (no checkpoint picked
// yet), the backoff of its last restart to pass.
bool AwaitsDependencies(const v1::Job& job);
bool AwaitsWarmStartSource(const v1::Job& job);
bool InRestartBackoff(const v1::Job& job, absl::Time now);

// OK when from -> to is a legal transition; else FAILED_PRECONDITION naming
// the job and both states.
absl::Status CheckTransition(std::string_view job_id, v1::JobState from,
                             v1::JobState to);

// Moves `job` to `to`: sets state, state_reason and the times (start_time at
// the first RUNNING, end_time when terminal); ends the current attempt when
// leaving an active state. Returns the StateChange to record as its event.
// A job with a suspend pending (Job.suspend_reason) that would go back to
// the queue — stopped, worker lost, restarting — becomes SUSPENDED instead,
// with the suspend's reason; leaving PREEMPTING in any way clears it.
// Use StartAttempt for QUEUED -> SCHEDULED.
absl::StatusOr<v1::StateChange> Transition(v1::Job& job, v1::JobState to,
                                           std::string reason, absl::Time now);
// The same, for a job whose current attempt ended at `attempt_end` rather
// than now: the time its worker reported, or the last the server heard of
// the worker plus the lease. The attempt (and a job that ends with it)
// ends then, brought within [the attempt's start, now] so that a skewed
// worker clock cannot make an attempt end before it began or in the
// future.
absl::StatusOr<v1::StateChange> Transition(v1::Job& job, v1::JobState to,
                                           std::string reason, absl::Time now,
                                           absl::Time attempt_end);

// QUEUED -> SCHEDULED on `worker_id`: starts attempt job.attempt + 1.
absl::StatusOr<v1::StateChange> StartAttempt(v1::Job& job,
                                             std::string worker_id,
                                             absl::Time now);

// FAILED_PRECONDITION "job j-.. is already SUCCEEDED" for a terminal job
// (what cancel and suspend refuse).
absl::Status CheckNotEnded(const v1::Job& job);

// How long the job's attempts have held workers (each from its assignment
// to its end, the open one up to `now`): what spec.time_limit_s limits.
// Pass for `now` how far an open attempt counts (WorkerRegistry::HeldUntil).
absl::Duration TimeHeld(const v1::Job& job, absl::Time now);

// When a job in the queue joined it: Job.queue_time, or for a record from
// before that field, its last attempt's end or its creation.
absl::Time QueuedSince(const v1::Job& job);

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_JOB_STATE_H_
