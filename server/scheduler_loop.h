// SchedulerLoop: the thread that keeps the cluster busy. Each pass
// declares workers whose lease ran out lost and gives back the jobs of lost
// workers (to the queue, or CANCELLED when a cancel was pending; their
// attempts charged until the workers were last heard from plus the lease),
// marks the server alive in the store while jobs hold workers (at most
// every second: after a restart, the latest it can have heard them),
// preempts the jobs still running on workers an administrator drains
// (worker_drains.h), takes an immutable ClusterSnapshot (queued jobs from
// the store, free capacity of schedulable workers, the jobs running on them
// with their tenant, priority and work at risk), asks the PlacementPolicy
// for a plan, checks the plan never over-commits, hands it to the
// Dispatcher, and records the waiting jobs' queue positions.
//
// A pass runs when woken (submit, cancel, job end, worker joins or leaves,
// a drain)
// or after `tick` at the latest, and as soon as the next lease runs out, a
// restarted job's backoff ends (a job waits out its Job.restart_after
// before any policy sees it) or a running job reaches its time limit (each
// pass cancels the jobs that have: time_limits.h).
// Wake-ups coalesce: many events while a pass runs cause one more pass, and
// after each pass the loop rests at least as long as the pass took, so the
// scheduler never takes more than half a core from the RPC threads. The
// pass holds no lock that RPC threads wait on: it reads the store and the
// registry through their own short critical sections.
// Start/Stop/Wake are thread-safe; RunPass is serialized internally.
#ifndef TRAINYARD_SERVER_SCHEDULER_LOOP_H_
#define TRAINYARD_SERVER_SCHEDULER_LOOP_H_

#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "scheduler/placement_policy.h"
#include "server/dispatcher.h"
#include "server/job_dependencies.h"
#include "server/job_lifecycle.h"
#include "server/job_store.h"
#include "server/queue_positions.h"
#include "server/scheduler_snapshot.h"
#include "server/tenant_quota.h"
#include "server/worker_registry.h"

namespace trainyard::server {

struct SchedulerLoopOptions {
  absl::Duration tick = absl::Seconds(1);
  // Told how long each pass of the loop's thread took (metrics).
  std::function<void(absl::Duration)> on_pass_done;
  // Told of each job the loop cancels for reaching its time limit.
  std::function<void()> on_time_limit_stop;
  // Where each pass leaves the waiting jobs' queue positions; may be null.
  QueuePositions* queue_positions = nullptr;
  // Fair-share weight per tenant (1 when absent), for the +drf policies.
  absl::flat_hash_map<std::string, double> tenant_weights;
  // Each tenant's quotas and weight (tenant_quota.h), read every pass so
  // that `yard tenant set` takes effect at once; its weight overrides
  // tenant_weights. Null: no quotas.
  TenantLimits tenant_limits;
  // Share GPUs without MPS too (YardServerOptions::share_gpus_without_mps).
  bool share_gpus_without_mps = false;
};

class SchedulerLoop {
 public:
  SchedulerLoop(JobStore* store, WorkerRegistry* workers,
                JobLifecycle* lifecycle,
                const scheduler::PlacementPolicy* policy, Clock* clock,
                SchedulerLoopOptions options);
  ~SchedulerLoop();

  void Start();
  void Stop();
  void Wake();

  // One scheduling pass. Tests call it directly instead of Start().
  absl::Status RunPass();

 private:
  void Loop();
  absl::StatusOr<std::vector<JobRecord>> SettleLostWorkers();
  // Records in the store that the server is alive (JobStore::MarkAlive),
  // at most every kAliveMarkEvery; a pass calls it while jobs hold
  // workers.
  void MarkAlive() ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);
  // Puts each PREEMPTING job of `active` that no hold lists back into the
  // one its record names (after a server restart).
  void RestoreHolds(const std::vector<JobRecord>& active)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);
  std::vector<JobRecord> WithoutBackoffs(std::vector<JobRecord> queued)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);
  // The queued jobs whose dependencies (spec.depends_on) let them start:
  // the others are left out with their wait reason recorded, or cancelled
  // when a dependency can no longer succeed (job_dependencies.h).
  std::vector<JobRecord> WithDependenciesMet(std::vector<JobRecord> queued)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);
  // The queued jobs whose warm start (spec.warm_start) has its checkpoint:
  // picked now and recorded for those whose source job has ended; the
  // others are left out waiting, or cancelled when there is no checkpoint
  // to start from (warm_starts.h).
  std::vector<JobRecord> WithWarmStartsPicked(std::vector<JobRecord> queued)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);
  // Records the waits' reasons and cancels the failures (with their
  // reasons); returns the jobs of both, which this pass leaves out.
  std::set<std::string> HoldBack(const std::vector<JobRecord>& queued,
                                 const std::vector<DependencyWait>& waits,
                                 const std::vector<DependencyFailure>& failures)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);
  std::vector<JobRecord> StopJobsPastTimeLimits(
      const std::vector<JobRecord>& active, std::vector<JobRecord> queued)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);

  JobStore* const store_;
  WorkerRegistry* const workers_;
  JobLifecycle* const lifecycle_;
  const scheduler::PlacementPolicy* const policy_;
  Clock* const clock_;
  const SchedulerLoopOptions options_;
  Dispatcher dispatcher_;

  // How stale the store's alive mark may get: after a restart, a worker
  // that never came back is charged up to this much less than it held.
  static constexpr absl::Duration kAliveMarkEvery = absl::Seconds(1);

  absl::Mutex pass_mu_;  // one pass at a time
  absl::Time alive_marked_ ABSL_GUARDED_BY(pass_mu_) = absl::InfinitePast();
  // Queued jobs' resource needs with their memory estimate, kept per job.
  PendingJobCache pending_jobs_ ABSL_GUARDED_BY(pass_mu_);
  // When the next pass has work that no event announces: the earliest end
  // of a restart backoff or of a running job's time limit, as the last pass
  // saw them; InfiniteFuture when none.
  absl::Time next_deadline_ ABSL_GUARDED_BY(pass_mu_) = absl::InfiniteFuture();
  // By waiting job: the jobs this server preempted for it that may still be
  // stopping, and the workers it is to run on, held for it while any of
  // them stops (scheduler::PreemptionHolds). A PREEMPTING job missing from
  // every hold (the server restarted) is put back into the hold its record
  // names (Job.preempted_for, preempted_room_on; RestoreHolds).
  struct PreemptionHold {
    std::set<std::string> victims;
    std::vector<std::string> room_on;
  };
  std::map<std::string, PreemptionHold> preemption_holds_
      ABSL_GUARDED_BY(pass_mu_);
  // Passes in a row that dropped placements past a start limit and asked
  // for the next pass at once (bounded: a pass that keeps dropping then
  // waits for the tick or an event).
  int passes_after_drops_ ABSL_GUARDED_BY(pass_mu_) = 0;

  absl::Mutex mu_;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_SCHEDULER_LOOP_H_
