// JobLifecycle: every change to a job's life, whoever asks for it — a
// client (submit, cancel), the scheduler (assign, give back), or a worker
// (started, progress, exited, log). Each change is checked against the
// state machine (job_state.h), committed to the JobStore, and only then
// acted on (a message to a worker, a scheduler wake-up).
//
// Worker reports are fenced: a report counts only when it is for the job's
// current attempt on that worker while the job holds the worker
// (SCHEDULED/RUNNING/PREEMPTING). Anything else is stale, and the caller
// answers it with StopAttempt so an old attempt never keeps running.
//
// A data-parallel job may spread its ranks over several workers (its
// placement's parts, Job.gang_parts). Its own worker (Job.worker_id) runs
// rank 0, which reports the trainer's events; the others report only their
// start and exit. A rank failing on any worker gets every other worker
// running ranks of the attempt told to stop them, and the attempt ends once
// all have reported or a worker of theirs is lost (exit_decision.h says
// which exit decides what); when an attempt ends for any reason, the same
// stop goes to every worker still running some of its ranks.
// No gRPC inside; safe for concurrent use (the store serializes commits).
#ifndef TRAINYARD_SERVER_JOB_LIFECYCLE_H_
#define TRAINYARD_SERVER_JOB_LIFECYCLE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "scheduler/placement_policy.h"
#include "server/job_store.h"
#include "server/worker_registry.h"
#include "spec/spec.h"
#include "trainyard/v1/jobs.pb.h"
#include "trainyard/v1/worker.pb.h"

namespace trainyard::server {

struct ExitDecision;  // exit_decision.h

// The longest wait before a restart, unless the base backoff is longer.
inline constexpr absl::Duration kMaxRestartBackoff = absl::Minutes(5);

// Removes what deletions interrupted by a crash left in `checkpoint_root`
// (directories moved aside to be removed); run at server start. Returns
// how many it removed.
int SweepDeletedCheckpoints(const std::string& checkpoint_root);

// How long restart `k` (1, 2, ...) waits: `base` * 2^(k-1), capped at
// max(base, kMaxRestartBackoff).
absl::Duration RestartBackoff(absl::Duration base, int32_t k);

struct JobLifecycleOptions {
  std::string tenant = "default";  // the tenant of Submit(request)
  // Absolute; each job checkpoints under CHECKPOINT_ROOT/<job id>, the
  // root given now (server/checkpoint_paths.h).
  std::string checkpoint_root;
  spec::ValidationOptions validation;  // data root for spec paths
  int32_t cancel_grace_ms = 10'000;    // SIGTERM, then SIGKILL after this
  int32_t preempt_grace_ms = 10'000;   // the same for a preempted job
  // Restart k of a failed job (spec.max_restarts) waits
  // restart_backoff * 2^(k-1) in the queue, at most kMaxRestartBackoff (or
  // restart_backoff itself when longer); zero restarts at once. A crash
  // that comes from the job itself (a bad batch, a NaN guard) or from a
  // broken node then does not spin through its restarts in seconds.
  absl::Duration restart_backoff = absl::Seconds(10);
  int32_t max_request_id_length = 128;
};

struct SubmitResult {
  v1::Job job;
  bool already_existed = false;
};

// What deleting a job removed from the checkpoint root.
struct DeletedJob {
  std::string checkpoint_dir;    // empty when none was removed
  int64_t checkpoint_bytes = 0;  // the bytes of its regular files
};

enum class ReportOutcome {
  kApplied,  // the report was for the current attempt and is recorded
  kStale,    // not the current attempt (or unknown job): stop it
};

// The waiting job a preemption makes room for and the workers held for it
// (Job.preempted_for, preempted_room_on).
struct PreemptedFor {
  std::string job_id;
  std::vector<std::string> room_on;
};

class JobLifecycle {
 public:
  JobLifecycle(JobStore* store, WorkerRegistry* workers, Clock* clock,
               JobLifecycleOptions options);

  // The clock the job states are stamped with.
  Clock* clock() const { return clock_; }

  // Called after any change that may let the scheduler place a job.
  void set_scheduler_wake(std::function<void()> wake) {
    wake_scheduler_ = std::move(wake);
  }
  // Called each time spec.halving stops a job at a rung.
  void set_on_halving_stop(std::function<void()> on_stop) {
    on_halving_stop_ = std::move(on_stop);
  }

  // --- Clients ---
  // Validates the spec (defaults applied first; INVALID_ARGUMENT naming the
  // field), stores the job QUEUED. A repeated request_id returns the first
  // job; with a different spec it is ALREADY_EXISTS. With
  // request.validate_only, checks the same (depends_on included, not
  // request_id) and stores nothing: the job returned has no id.
  // The job belongs to `tenant` (the caller's, from its token).
  absl::StatusOr<SubmitResult> Submit(const v1::SubmitJobRequest& request,
                                      const std::string& tenant);
  absl::StatusOr<SubmitResult> Submit(const v1::SubmitJobRequest& request) {
    return Submit(request, options_.tenant);
  }
  // QUEUED/SCHEDULED/SUSPENDED: CANCELLED at once. RUNNING: the worker is told
  // to stop it and the job becomes CANCELLED when it exits. Terminal:
  // FAILED_PRECONDITION.
  absl::StatusOr<v1::Job> Cancel(const std::string& job_id,
                                 const std::string& reason);
  // Parks the job until Resume (job_suspension.cc): QUEUED/SCHEDULED
  // become SUSPENDED at once (a SCHEDULED attempt is stopped); RUNNING is
  // preempted (PREEMPTING, Job.suspend_reason) and parked once stopped;
  // PREEMPTING is parked instead of queued. SUSPENDED: returned unchanged.
  // Ended, or a cancel pending: FAILED_PRECONDITION.
  absl::StatusOr<v1::Job> Suspend(const std::string& job_id,
                                  const std::string& reason);
  // SUSPENDED -> QUEUED; a job still stopping for a suspend is queued
  // instead of parked once stopped. Otherwise FAILED_PRECONDITION naming
  // the state.
  absl::StatusOr<v1::Job> Resume(const std::string& job_id);
  // Sets spec.priority of a job that has not ended (ended:
  // FAILED_PRECONDITION naming the state; outside -1000..1000:
  // INVALID_ARGUMENT on priority) and wakes the scheduler. The tenant's
  // max_priority is the caller's to check (TenantGate::CheckPriority).
  absl::StatusOr<v1::Job> SetPriority(const std::string& job_id,
                                      int32_t priority);
  // Deletes a terminal job for good (job_deletion.cc): its record, events
  // and log, and unless `keep_checkpoints` its checkpoint directory when
  // that is CHECKPOINT_ROOT/<job id> (a directory the server did not name
  // is never removed). FAILED_PRECONDITION naming the state for a job that
  // has not ended; nothing is changed when any step fails.
  absl::StatusOr<DeletedJob> Delete(const std::string& job_id,
                                    bool keep_checkpoints);

  // --- Scheduler ---
  // QUEUED -> SCHEDULED on worker_id: a new attempt, its checkpoint dir,
  // its GPUs and what it holds of those it shares (Job.gpu_grants).
  // `more_nodes`: the parts of a job whose ranks are spread over workers.
  absl::StatusOr<JobRecord> Assign(
      const std::string& job_id, const std::string& worker_id,
      const std::vector<int32_t>& gpu_indices,
      const std::vector<scheduler::GpuShare>& shares = {},
      const std::vector<scheduler::PlacementPart>& more_nodes = {});
  // The Assignment message for a record returned by Assign: for its own
  // worker, or for `worker_id` of one of its parts.
  v1::ServerMessage AssignmentFor(const JobRecord& record) const;
  v1::ServerMessage AssignmentFor(const JobRecord& record,
                                  const std::string& worker_id) const;
  // Gives the job back to the queue (or CANCELLED if a cancel is pending,
  // SUCCEEDED if its trainer already reported TrainFinished) when
  // (attempt, worker_id) is still its current attempt; else no-op. The
  // attempt ends at `ended` when that is before now: when its worker
  // reported it stopped, or the last the server heard of the worker plus
  // the lease (HeldUntil).
  absl::Status ReturnToQueue(const std::string& job_id, int32_t attempt,
                             const std::string& worker_id,
                             const std::string& reason,
                             absl::Time ended = absl::InfiniteFuture());
  // RUNNING -> PREEMPTING on worker_id, `reason` naming the job it makes
  // room for, `for_job` recording it (Job.preempted_for; none for a
  // drain's). FAILED_PRECONDITION when the job is not RUNNING there (it
  // moved on, is already stopping, or a cancel is pending): nothing to do,
  // except that a job already stopping there for another waiting job is
  // now recorded as stopping for `for_job` (the scheduler's latest choice,
  // which a restarted server's hold follows). Its exit then makes it
  // QUEUED; it resumes from its checkpoint (job_preemption.cc).
  absl::StatusOr<JobRecord> Preempt(const std::string& job_id,
                                    const std::string& worker_id,
                                    const std::string& reason,
                                    const PreemptedFor& for_job = {});
  // The Preempt message for a PREEMPTING job.
  v1::ServerMessage PreemptFor(const JobRecord& record) const;
  // Records that every job the job depends on has SUCCEEDED
  // (Job.dependencies_met).
  absl::Status MarkDependenciesMet(const std::string& job_id);
  // Records the checkpoint a QUEUED job's warm start picked
  // (Job.warm_start_checkpoint, set once).
  absl::Status SetWarmStart(const std::string& job_id,
                            const std::string& checkpoint, int64_t step);
  // Records why a QUEUED job waits (written only when it changes).
  absl::Status SetWaitReason(const std::string& job_id,
                             const std::string& reason);

  // After a server restart: every worker that the store says holds a job
  // gets a fresh lease from now, to reconnect and re-attach its jobs before
  // they go back to the queue (last heard from, at the latest, when the
  // previous server last marked itself alive). Returns the number of such
  // jobs.
  absl::StatusOr<int> RecoverHeldJobs();

  // --- Workers ---
  absl::StatusOr<ReportOutcome> OnUpdate(const std::string& worker_id,
                                         const v1::JobUpdate& update);
  // A worker re-attached a job it still runs (after reconnecting): a
  // SCHEDULED job becomes RUNNING. kStale when it is not the current attempt.
  absl::StatusOr<ReportOutcome> Reattach(const std::string& worker_id,
                                         int32_t attempt,
                                         const std::string& job_id);
  // The Cancel message for a running job whose cancel is pending.
  v1::ServerMessage CancelFor(const JobRecord& record) const;
  // HeldUntil (below) from this lifecycle's registry.
  absl::Time HeldUntil(const JobRecord& record) const;

 private:
  absl::StatusOr<v1::Job> OwnJob(const std::string& id,
                                 const std::string& tenant,
                                 absl::string_view field) const;
  // INVALID_ARGUMENT for a job of spec.depends_on that does not exist or is
  // another tenant's; FAILED_PRECONDITION for one that ended other than
  // SUCCEEDED.
  absl::Status CheckDependencies(const v1::JobSpec& spec,
                                 const std::string& tenant) const;
  // INVALID_ARGUMENT when spec.warm_start's job does not exist or is
  // another tenant's; FAILED_PRECONDITION when it has ended without the
  // checkpoint asked for.
  absl::Status CheckWarmStart(const v1::JobSpec& spec,
                              const std::string& tenant) const;
  // Both of the above: what a submission's spec must pass in the store.
  absl::Status CheckSourceJobs(const v1::JobSpec& spec,
                               const std::string& tenant) const;
  absl::StatusOr<ReportOutcome> OnStarted(const std::string& worker_id,
                                          const v1::JobUpdate& update);
  absl::StatusOr<ReportOutcome> OnTrainerEvent(const std::string& worker_id,
                                               const v1::JobUpdate& update);
  absl::StatusOr<ReportOutcome> OnExited(const std::string& worker_id,
                                         const v1::JobUpdate& update);
  // Ranks the job's latest evaluation at `rung` of its halving group
  // (halving.h), entering it there; when it is not among the best, marks
  // the job stopped (Job.halving_stop, a cancel pending that ends it
  // SUCCEEDED) and returns true. The caller tells its workers.
  absl::StatusOr<bool> RankEvaluation(JobRecord& r, int64_t rung,
                                      RungBoard& rungs) const;
  // Ends the current attempt of `r` as `d` says (an exit reported by
  // `worker_id`): restarts a failure under max_restarts, delays a refused
  // job, parks one that failed while stopping for a suspend. The attempt
  // ends at `ended` (the reported exit time; Transition keeps it within the
  // attempt).
  absl::Status EndAttempt(JobRecord& r, ExitDecision d,
                          const std::string& worker_id, absl::Time ended,
                          std::vector<v1::JobEvent>& events);
  absl::StatusOr<ReportOutcome> OnLog(const std::string& worker_id,
                                      const v1::JobUpdate& update);
  void WakeScheduler() const;

  JobStore* const store_;
  WorkerRegistry* const workers_;
  Clock* const clock_;
  const JobLifecycleOptions options_;
  std::function<void()> wake_scheduler_;
  std::function<void()> on_halving_stop_;
  // One Delete at a time: a user's and the retention's delete of the same
  // job would otherwise race over its checkpoint directory (one moving it
  // back after the other deleted the record). Deletes are rare.
  absl::Mutex delete_mu_;
};

// Whether `record` is held by (worker_id, attempt) right now: its own
// worker or one running a part of it.
bool IsCurrentAttempt(const JobRecord& record, const std::string& worker_id,
                      int32_t attempt);
// The part of the current attempt on `worker_id` when that is not the job's
// own worker; null otherwise.
const v1::GangPart* PartOn(const JobRecord& record,
                           const std::string& worker_id);
// Workers running some of the current attempt's ranks, other than
// `except`: the job's own (unless its ranks exited: Job.own_ranks_exited),
// then its parts not yet exited.
std::vector<std::string> WorkersOf(const JobRecord& record,
                                   const std::string& except = "");
// Until when the job's current attempt counts as holding its workers: the
// latest WorkerRegistry::HeldUntil of its workers for it (now while the
// server hears any of them and none said it ended).
absl::Time HeldUntil(const WorkerRegistry& workers, const JobRecord& record);
// When a reported exit happened: its exit_time, or `now` when the worker
// sent none (Transition keeps it within the attempt).
absl::Time ExitTimeOf(const v1::JobExited& exit, absl::Time now);
// Forgets what the attempt holds (its GPUs, grants and parts): it ended.
void ReleaseHoldings(JobRecord& record);
// Tells each of `workers` to stop the attempt.
void StopAttemptOn(WorkerRegistry* workers, const std::string& job_id,
                   int32_t attempt, const std::vector<std::string>& on);

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_JOB_LIFECYCLE_H_
