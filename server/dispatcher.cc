#include "server/dispatcher.h"

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace trainyard::server {

bool Dispatcher::Preempt(const std::string& job_id,
                         const std::string& worker_id,
                         const std::string& reason,
                         const PreemptedFor& for_job) {
  absl::StatusOr<JobRecord> record =
      lifecycle_->Preempt(job_id, worker_id, reason, for_job);
  if (!record.ok()) {
    // Already stopping (an earlier pass preempted it), or it moved on.
    if (!absl::IsFailedPrecondition(record.status())) {
      YARD_LOG(ERROR) << "preempting job " << job_id << ": " << record.status();
    }
    return false;
  }
  // Not delivered (the worker is away): it is sent again when the worker
  // re-attaches the job, and a lost worker's jobs go back to the queue.
  // Every rank of a spread job is told: they stop after the same step.
  for (const std::string& worker : WorkersOf(*record)) {
    workers_->Send(worker, lifecycle_->PreemptFor(*record));
  }
  return true;
}

void Dispatcher::CarryPreemptions(
    const scheduler::Plan& plan, const std::map<std::string, JobRecord>& queued,
    DispatchCounts& counts) {
  for (const scheduler::Preemption& p : plan.preemptions) {
    auto it = queued.find(p.for_job_id);
    const std::string reason =
        it == queued.end()
            ? absl::StrCat("preempted by ", p.for_job_id)
            : absl::StrCat("preempted by ", p.for_job_id, " (priority ",
                           it->second.job.spec().priority(), ")");
    if (Preempt(p.job_id, p.worker_id, reason,
                PreemptedFor{p.for_job_id, p.room_on})) {
      ++counts.preempted;
    }
  }
}

DispatchCounts Dispatcher::Carry(
    const scheduler::Plan& plan,
    const std::map<std::string, JobRecord>& queued) {
  DispatchCounts counts;
  CarryPreemptions(plan, queued, counts);
  for (const scheduler::Placement& p : plan.placements) {
    absl::StatusOr<JobRecord> record = lifecycle_->Assign(
        p.job_id, p.worker_id, p.gpu_indices, p.shares, p.more_nodes);
    if (!record.ok()) {
      // Cancelled or otherwise moved on since the snapshot: nothing to do.
      if (!absl::IsFailedPrecondition(record.status())) {
        YARD_LOG(ERROR) << "assigning job " << p.job_id << " to worker "
                        << p.worker_id << ": " << record.status();
      }
      ++counts.skipped;
      continue;
    }
    // All ranks or none: a part that cannot be delivered gives the job back
    // (which stops the parts already sent).
    std::string away;
    for (const std::string& worker : WorkersOf(*record)) {
      if (!workers_->Send(worker, lifecycle_->AssignmentFor(*record, worker),
                          /*require_ready=*/true)) {
        away = worker;
        break;
      }
    }
    if (!away.empty()) {
      ++counts.undeliverable;
      absl::Status s = lifecycle_->ReturnToQueue(
          p.job_id, record->job.attempt(), away,
          absl::StrCat("worker ", away,
                       " went away before the assignment was delivered"));
      if (!s.ok()) {
        YARD_LOG(ERROR) << "re-queueing job " << p.job_id << ": " << s;
      }
      continue;
    }
    ++counts.placed;
    YARD_LOG(INFO) << "job " << p.job_id << " attempt " << record->job.attempt()
                   << " assigned to worker " << p.worker_id
                   << (p.more_nodes.empty()
                           ? std::string()
                           : absl::StrCat(" (ranks spread over ",
                                          p.more_nodes.size() + 1,
                                          " workers)"));
  }
  for (const scheduler::JobWait& w : plan.waits) {
    auto it = queued.find(w.job_id);
    RecordWaitReason(
        w.job_id, it == queued.end() ? nullptr : &it->second.job.state_reason(),
        w.reason);
  }
  return counts;
}

void Dispatcher::RecordWaitReason(const std::string& job_id,
                                  const std::string* stored,
                                  const std::string& reason) {
  if (stored != nullptr && *stored == reason) return;
  absl::Status s = lifecycle_->SetWaitReason(job_id, reason);
  if (!s.ok() && !absl::IsNotFound(s)) {
    YARD_LOG(WARNING) << "job " << job_id << " wait reason: " << s;
  }
}

}  // namespace trainyard::server
