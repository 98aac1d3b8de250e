#include "server/scheduler_loop.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/proto_time.h"
#include "common/status_macros.h"
#include "server/cluster_view.h"
#include "server/concurrency_groups.h"
#include "server/job_dependencies.h"
#include "server/job_state.h"
#include "server/scheduler_snapshot.h"
#include "server/time_limits.h"
#include "server/warm_starts.h"
#include "server/worker_drains.h"

namespace trainyard::server {

SchedulerLoop::SchedulerLoop(JobStore* store, WorkerRegistry* workers,
                             JobLifecycle* lifecycle,
                             const scheduler::PlacementPolicy* policy,
                             Clock* clock, SchedulerLoopOptions options)
    : store_(store),
      workers_(workers),
      lifecycle_(lifecycle),
      policy_(policy),
      clock_(clock),
      options_(options),
      dispatcher_(lifecycle, workers) {}

SchedulerLoop::~SchedulerLoop() { Stop(); }

void SchedulerLoop::Start() {
  absl::MutexLock lock(&mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void SchedulerLoop::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void SchedulerLoop::Wake() {
  absl::MutexLock lock(&mu_);
  woken_ = true;
}

void SchedulerLoop::Loop() {
  while (true) {
    const absl::Time pass_start = absl::Now();  // wall time, not clock_
    absl::Status s = RunPass();
    const absl::Duration took = absl::Now() - pass_start;
    if (options_.on_pass_done) options_.on_pass_done(took);
    if (!s.ok()) {
      YARD_LOG(ERROR) << "scheduling pass failed: " << s;
    }
    // Sleep until woken, the next lease deadline, or the tick.
    absl::Duration wait = options_.tick;
    if (std::optional<absl::Time> lease = workers_->NextLeaseDeadline()) {
      wait = std::min(wait, *lease - clock_->Now() + absl::Milliseconds(1));
    }
    {
      absl::MutexLock pass(&pass_mu_);
      wait = std::min(wait,
                      next_deadline_ - clock_->Now() + absl::Milliseconds(1));
    }
    wait = std::max(wait, absl::Milliseconds(1));
    absl::MutexLock lock(&mu_);
    // Rest at least as long as the pass took: a storm of wake-ups (thousands
    // of submissions a second) then costs the RPC threads at most half a
    // core, and the jobs submitted meanwhile are placed by the next pass.
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), std::min(took, wait));
    auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return woken_ || stopping_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&ready), wait);
    if (stopping_) return;
    woken_ = false;
  }
}

// Declares silent workers lost, then gives back every job held by a lost or
// unknown worker. Scanning the jobs (rather than only those of workers lost
// just now) also settles jobs whose give-back failed in an earlier pass.
absl::StatusOr<std::vector<JobRecord>> SchedulerLoop::SettleLostWorkers() {
  // Remembered, so that a server restart lists them LOST at once (and
  // their alert goes on) instead of granting them a lease again.
  for (const std::string& id : workers_->ExpireLeases()) {
    if (absl::Status s = store_->MarkKnownWorkerLost(id); !s.ok()) {
      YARD_LOG(WARNING) << "worker " << id << " lost, not marked so in the "
                        << "store: " << s;
    }
  }
  ASSIGN_OR_RETURN(
      std::vector<JobRecord> active,
      store_->JobsInStates({v1::SCHEDULED, v1::RUNNING, v1::PREEMPTING}));
  std::map<std::string, v1::WorkerState> states;
  for (const WorkerStatus& w : workers_->List()) states[w.id] = w.state;
  std::vector<JobRecord> still_held;
  absl::Status first_error;
  for (JobRecord& r : active) {
    // A spread job is lost with any worker of its ranks.
    std::string lost;
    for (const std::string& worker : WorkersOf(r)) {
      auto it = states.find(worker);
      if (it == states.end() || it->second == v1::WORKER_LOST) {
        lost = worker;
        break;
      }
    }
    if (lost.empty()) {
      still_held.push_back(std::move(r));
      continue;
    }
    // Charged until its workers were last heard from plus the lease, not
    // until now: a server that was down does not bill its own downtime.
    absl::Status s = lifecycle_->ReturnToQueue(
        r.job.id(), r.job.attempt(), lost,
        absl::StrCat("worker ", lost, " lost"), HeldUntil(*workers_, r));
    if (!s.ok() && first_error.ok()) first_error = s;
  }
  if (!first_error.ok()) return first_error;
  return still_held;
}

void SchedulerLoop::MarkAlive() {
  const absl::Time now = clock_->Now();
  if (now - alive_marked_ < kAliveMarkEvery) return;
  if (absl::Status s = store_->MarkAlive(now); !s.ok()) {
    YARD_LOG(WARNING) << "cannot mark the server alive in the store (after "
                      << "a restart, workers that never come back are "
                      << "charged from an older mark): " << s;
    return;
  }
  alive_marked_ = now;
}

// Cancels every job past its time limit; returns the queued jobs left.
// Sets next_deadline_ to when the next running job reaches its limit.
std::vector<JobRecord> SchedulerLoop::StopJobsPastTimeLimits(
    const std::vector<JobRecord>& active, std::vector<JobRecord> queued) {
  const absl::Time now = clock_->Now();
  TimeLimitCheck check = CheckTimeLimits(
      active, now, [&](const JobRecord& r) { return HeldUntil(*workers_, r); });
  next_deadline_ = check.next;  // queued jobs hold no worker: no deadline
  for (TimeLimitStop& stop : CheckTimeLimits(queued, now).stops) {
    check.stops.push_back(std::move(stop));
  }
  std::set<std::string> stopped;
  for (const TimeLimitStop& stop : check.stops) {
    absl::StatusOr<v1::Job> cancelled =
        lifecycle_->Cancel(stop.job_id, stop.reason);
    if (!cancelled.ok()) {
      YARD_LOG(WARNING) << "job " << stop.job_id
                        << " past its time limit: " << cancelled.status();
    } else if (options_.on_time_limit_stop) {
      options_.on_time_limit_stop();
    }
    stopped.insert(stop.job_id);
  }
  std::erase_if(
      queued, [&](const JobRecord& r) { return stopped.contains(r.job.id()); });
  return queued;
}

std::vector<JobRecord> SchedulerLoop::WithDependenciesMet(
    std::vector<JobRecord> queued) {
  // Every dependency still looked at, read in one go (state column only).
  std::vector<std::string> ids;
  for (const JobRecord& r : queued) {
    if (r.job.dependencies_met()) continue;
    ids.insert(ids.end(), r.job.spec().depends_on().begin(),
               r.job.spec().depends_on().end());
  }
  if (ids.empty()) return queued;
  absl::StatusOr<std::map<std::string, v1::JobState>> states =
      store_->StatesOf(ids);
  DependencyCheck check = CheckDependencies(
      queued, [&](const std::string& id) -> absl::StatusOr<v1::JobState> {
        if (!states.ok()) return states.status();
        auto it = states->find(id);
        if (it == states->end()) {
          return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
        }
        return it->second;
      });
  std::set<std::string> left_out =
      HoldBack(queued, check.waits, check.failures);
  for (const std::string& id : check.met) {
    // Unmarked, it is checked again next pass: start it now all the same.
    if (absl::Status s = lifecycle_->MarkDependenciesMet(id); !s.ok()) {
      YARD_LOG(WARNING) << "job " << id << " dependencies met: " << s;
    }
  }
  std::erase_if(queued, [&](const JobRecord& r) {
    return left_out.contains(r.job.id());
  });
  return queued;
}

std::set<std::string> SchedulerLoop::HoldBack(
    const std::vector<JobRecord>& queued,
    const std::vector<DependencyWait>& waits,
    const std::vector<DependencyFailure>& failures) {
  std::map<std::string, const std::string*> stored;  // reasons read now
  for (const JobRecord& r : queued) stored[r.job.id()] = &r.job.state_reason();
  std::set<std::string> left_out;
  for (const DependencyWait& w : waits) {
    left_out.insert(w.job_id);
    dispatcher_.RecordWaitReason(w.job_id, stored[w.job_id], w.reason);
  }
  for (const DependencyFailure& f : failures) {
    left_out.insert(f.job_id);
    absl::StatusOr<v1::Job> cancelled = lifecycle_->Cancel(f.job_id, f.reason);
    if (!cancelled.ok()) {
      YARD_LOG(WARNING) << "job " << f.job_id << " (" << f.reason
                        << "): " << cancelled.status();
    }
  }
  return left_out;
}

std::vector<JobRecord> SchedulerLoop::WithWarmStartsPicked(
    std::vector<JobRecord> queued) {
  WarmStartCheck check = CheckWarmStarts(
      queued, [&](const std::string& id) -> absl::StatusOr<v1::Job> {
        ASSIGN_OR_RETURN(JobRecord r, store_->GetJob(id));
        return std::move(r.job);
      });
  if (check.waits.empty() && check.failures.empty() && check.picks.empty()) {
    return queued;
  }
  std::set<std::string> left_out =
      HoldBack(queued, check.waits, check.failures);
  std::map<std::string, const WarmStartPick*> picked;
  for (const WarmStartPick& pick : check.picks) {
    if (absl::Status s =
            lifecycle_->SetWarmStart(pick.job_id, pick.checkpoint, pick.step);
        !s.ok()) {
      // Not recorded, it would start from nothing: try again next pass.
      YARD_LOG(WARNING) << "job " << pick.job_id << " warm start: " << s;
      left_out.insert(pick.job_id);
      continue;
    }
    picked[pick.job_id] = &pick;
  }
  std::erase_if(queued, [&](const JobRecord& r) {
    return left_out.contains(r.job.id());
  });
  for (JobRecord& r : queued) {
    if (auto it = picked.find(r.job.id()); it != picked.end()) {
      r.job.set_warm_start_checkpoint(it->second->checkpoint);
      r.job.set_warm_start_step(it->second->step);
    }
  }
  return queued;
}

// The queued jobs free to start now: those still waiting out a restart
// backoff are left out (they keep the reason their restart gave), and the
// earliest end of those backoffs brings next_deadline_ forward.
std::vector<JobRecord> SchedulerLoop::WithoutBackoffs(
    std::vector<JobRecord> queued) {
  const absl::Time now = clock_->Now();
  std::erase_if(queued, [&](const JobRecord& r) {
    if (!InRestartBackoff(r.job, now)) return false;
    next_deadline_ =
        std::min(next_deadline_, FromProtoTime(r.job.restart_after()));
    return true;
  });
  return queued;
}

namespace {

// The policy sees only the workers taking jobs: a job it finds no room for
// may fit a draining one, or a lost one once it is back, and "infeasible"
// alone would mislead. Its reason says which workers were not counted.
void NoteWorkersNotTakingJobs(const std::vector<WorkerStatus>& workers,
                              std::vector<scheduler::JobWait>& waits) {
  std::vector<std::string> draining, lost;
  for (const WorkerStatus& w : workers) {
    if (w.state == v1::WORKER_LOST) {
      lost.push_back(w.id);
    } else if (w.connected && w.state == v1::WORKER_DRAINING) {
      draining.push_back(w.id);
    }
  }
  if (draining.empty() && lost.empty()) return;
  // "1 worker draining: w1", "4 workers lost: a, b, c, ..."
  auto counted = [](std::vector<std::string> ids, const char* what) {
    const size_t n = ids.size();
    if (n > 3) ids.resize(3);
    return absl::StrCat(n, n == 1 ? " worker " : " workers ", what, ": ",
                        absl::StrJoin(ids, ", "),
                        n > ids.size() ? ", ..." : "");
  };
  std::vector<std::string> parts;
  if (!draining.empty()) parts.push_back(counted(draining, "draining"));
  if (!lost.empty()) parts.push_back(counted(lost, "lost"));
  const std::string note = absl::StrJoin(parts, "; ");
  for (scheduler::JobWait& w : waits) {
    if (w.kind != scheduler::WaitKind::kInfeasible) continue;
    if (w.reason == scheduler::kNoWorkerReason) {
      w.reason = absl::StrCat("no worker is taking jobs (", note, ")");
    } else {
      absl::StrAppend(&w.reason, " (not counting ", note, ")");
    }
  }
}

}  // namespace

void SchedulerLoop::RestoreHolds(const std::vector<JobRecord>& active) {
  std::set<std::string> held;
  for (const auto& [job, hold] : preemption_holds_) {
    held.insert(hold.victims.begin(), hold.victims.end());
  }
  for (const JobRecord& r : active) {
    if (r.job.state() != v1::PREEMPTING || r.job.preempted_for().empty() ||
        held.contains(r.job.id())) {
      continue;
    }
    PreemptionHold& hold = preemption_holds_[r.job.preempted_for()];
    hold.victims.insert(r.job.id());
    if (hold.room_on.empty()) {
      hold.room_on.assign(r.job.preempted_room_on().begin(),
                          r.job.preempted_room_on().end());
    }
  }
}

absl::Status SchedulerLoop::RunPass() {
  absl::MutexLock pass(&pass_mu_);
  // A pass that fails early must not leave a past deadline behind: the loop
  // would then run a failing pass every millisecond instead of every tick.
  next_deadline_ = absl::InfiniteFuture();
  ASSIGN_OR_RETURN(std::vector<JobRecord> active, SettleLostWorkers());
  // Only an attempt holding a worker can be charged for a downtime: an
  // idle server writes nothing.
  if (!active.empty()) MarkAlive();
  // Preempting changes no worker: one list serves the drains and capacity.
  const std::vector<WorkerStatus> workers = workers_->List();
  for (const DrainPreemption& p : DrainPreemptions(active, workers)) {
    dispatcher_.Preempt(p.job_id, p.worker_id, p.reason);
  }
  ASSIGN_OR_RETURN(std::vector<JobRecord> queued,
                   store_->JobsInStates({v1::QUEUED}));
  queued = WithWarmStartsPicked(WithDependenciesMet(
      WithoutBackoffs(StopJobsPastTimeLimits(active, std::move(queued)))));
  if (queued.empty()) {
    if (options_.queue_positions != nullptr) options_.queue_positions->Clear();
    return absl::OkStatus();
  }
  std::map<std::string, TenantHeld> held;
  std::vector<scheduler::JobWait> over_quota;
  absl::flat_hash_map<std::string, double> weights = options_.tenant_weights;
  TenantLimitsCache limits(options_.tenant_limits);
  if (options_.tenant_limits) {
    held = HeldByTenant(active);
    over_quota = OverQuotaWaits(limits, held, queued);
    for (const JobRecord& r : queued) {
      const std::string& t = r.job.tenant();
      if (!weights.contains(t)) weights[t] = limits.Of(t).weight();
    }
  }
  GroupCounts group_running = RunningByGroup(active);
  const std::vector<scheduler::JobWait> group_full =
      HeldBackWaits(GroupLimit(group_running), queued);
  std::set<std::string> left_out;
  for (const scheduler::JobWait& w : over_quota) left_out.insert(w.job_id);
  for (const scheduler::JobWait& w : group_full) left_out.insert(w.job_id);
  std::vector<scheduler::PendingJob> pending;
  for (scheduler::PendingJob& p : pending_jobs_.Of(queued)) {
    if (!left_out.contains(p.id)) pending.push_back(std::move(p));
  }
  scheduler::AvoidedWorkers avoided = AvoidedWorkersOf(queued);
  std::map<std::string, JobRecord> by_id;
  for (JobRecord& r : queued) by_id.emplace(r.job.id(), std::move(r));
  std::vector<scheduler::WorkerCapacity> capacity = SchedulableCapacity(
      workers, UsageByWorker(active), options_.share_gpus_without_mps);
  std::vector<scheduler::RunningJob> running =
      RunningJobsOf(active, capacity, clock_->Now());
  // Room is held for a waiting job while a job preempted for it stops.
  absl::flat_hash_set<std::string> preempting;
  for (const JobRecord& r : active) {
    if (r.job.state() == v1::PREEMPTING) preempting.insert(r.job.id());
  }
  RestoreHolds(active);
  scheduler::PreemptionHolds holds;
  for (auto it = preemption_holds_.begin(); it != preemption_holds_.end();) {
    std::erase_if(it->second.victims, [&](const std::string& victim) {
      return !preempting.contains(victim);
    });
    if (it->second.victims.empty()) {
      it = preemption_holds_.erase(it);
      continue;
    }
    holds[it->first] = it->second.room_on;
    ++it;
  }
  ASSIGN_OR_RETURN(
      scheduler::ClusterSnapshot snapshot,
      scheduler::ClusterSnapshot::Create(
          std::move(capacity), std::move(pending), {}, std::move(running),
          std::move(weights), std::move(avoided), std::move(holds)));
  scheduler::Plan plan = policy_->Place(snapshot);
  absl::Status valid = scheduler::CheckPlan(snapshot, plan);
  if (!valid.ok()) {
    return absl::InternalError(
        absl::StrCat("policy ", std::string(policy_->name()),
                     " made a bad plan: ", valid.message()));
  }
  NoteWorkersNotTakingJobs(workers, plan.waits);
  const size_t proposed = plan.placements.size();
  if (options_.tenant_limits) {
    ApplyTenantQuotas(limits, std::move(held), by_id, plan);
    plan.waits.insert(plan.waits.end(), over_quota.begin(), over_quota.end());
  }
  DropPlacementsPastLimit(GroupLimit(group_running), by_id, plan);
  // The room the policy gave to placements a limit dropped went to no one:
  // the next pass, at once, leaves those jobs out before the policy (their
  // group or tenant is at its limit now) and offers it to the jobs behind.
  constexpr int kMaxPassesAfterDrops = 8;
  if (plan.placements.size() < proposed &&
      ++passes_after_drops_ <= kMaxPassesAfterDrops) {
    Wake();
  } else if (plan.placements.size() == proposed) {
    passes_after_drops_ = 0;
  }
  plan.waits.insert(plan.waits.end(), group_full.begin(), group_full.end());
  dispatcher_.Carry(plan, by_id);
  // A job stopping already may be chosen again, for another waiting job:
  // the latest choice holds.
  for (const scheduler::Preemption& p : plan.preemptions) {
    for (auto& [job, hold] : preemption_holds_) {
      if (job != p.for_job_id) hold.victims.erase(p.job_id);
    }
    PreemptionHold& hold = preemption_holds_[p.for_job_id];
    hold.victims.insert(p.job_id);
    hold.room_on = p.room_on;
  }
  if (options_.queue_positions != nullptr) {
    options_.queue_positions->Replace(plan.waits);
  }
  return absl::OkStatus();
}

}  // namespace trainyard::server
