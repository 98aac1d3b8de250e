// ExitDecision: what a worker's report that a job's processes exited
// (JobExited) does to the job's current attempt, decided from the job's
// record alone. Pure functions, no I/O: JobLifecycle::OnExited
// (job_reports.cc) calls them inside its store transaction and carries the
// decision out (the transition, a restart, stopping ranks elsewhere).
//
// A job on one worker: its exit ends the attempt.
//
// A job spread over workers (Job.gang_parts) gets one exit per worker, and
// one rank's end soon ends the others (a peer that "closed its
// connection"), so the first exit to arrive often only echoes the cause:
//   - Ends the attempt at once: rank 0 finishing (SUCCEEDED) or stopping
//     after a checkpoint (QUEUED); any rank stopped on a lost lease (exit
//     4: its worker froze or was cut off; QUEUED, no restart spent); a
//     refusal by any worker (the ranks never met: offered again); a cancel.
//   - A rank failing does not: it is kept as Job.pending_failure and the
//     other workers are told to stop their ranks. The attempt ends when
//     every part has reported its exit (FAILED with that failure, or
//     restarted under max_restarts), or earlier with the outcome of a
//     decisive exit above, or when the worker of a part still running is
//     lost (scheduler_loop.cc: QUEUED, no restart spent). The first
//     failure is kept, unless it only echoes another rank's end and a
//     rank's own failure (a signal, another error) follows.
//   - Other parts finishing or stopping after a checkpoint, any part's end
//     while the job is being preempted, and ranks stopped as the server
//     asked after a failure say nothing of their own: they are recorded.
// Nothing waits forever: every part reports, or its worker misses its
// lease.
#ifndef TRAINYARD_SERVER_EXIT_DECISION_H_
#define TRAINYARD_SERVER_EXIT_DECISION_H_

#include <string>
#include <utility>

#include "absl/time/time.h"
#include "server/job_store.h"
#include "trainyard/v1/jobs.pb.h"
#include "trainyard/v1/worker.pb.h"

namespace trainyard::server {

struct ExitDecision {
  // False: the exit is recorded and the attempt goes on (some other part
  // still runs); the fields below but stop_others are unset.
  bool ends = false;
  v1::JobState to = v1::JOB_STATE_UNSPECIFIED;
  std::string why;
  // A failure a restart would repeat (a usage error, a refusal): the job
  // fails without spending one.
  bool final = false;
  // A worker refused the assignment: the attempt never ran.
  bool refused = false;
  // A rank failed and the attempt waits on the others: their workers must
  // be told to stop them now.
  bool stop_others = false;
};

// How a job with a cancel pending (JobRecord::cancel_requested) ends once
// its attempt does: CANCELLED with the cancel's reason, or SUCCEEDED,
// stopped early, when spec.halving stopped it (Job.halving_stop; the
// caller fills its result: FillHalvingResult in halving.h).
std::pair<v1::JobState, std::string> CancelledOutcome(const JobRecord& r);

// The exit of a job that runs on one worker, `worker_id`.
ExitDecision DecideExit(const JobRecord& r, const v1::JobExited& exit,
                        const std::string& worker_id);

// The exit of the ranks on `worker_id` of a job spread over workers; records
// it in `r` (those ranks exited; a failure pending).
// REQUIRES: `r` is the current attempt on `worker_id` (rank 0's or a
// part's), and RanksExitedOn(r.job, worker_id) is false.
ExitDecision DecideSpreadExit(JobRecord& r, const v1::JobExited& exit,
                              const std::string& worker_id);

// Whether the ranks of a spread job on `worker_id` have reported their exit.
bool RanksExitedOn(const v1::Job& job, const std::string& worker_id);

// How long a job refused just now waits before it is offered again.
absl::Duration RefusalWait(const v1::Job& job);

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_EXIT_DECISION_H_
