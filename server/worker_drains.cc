#include "server/worker_drains.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "common/field_errors.h"
#include "common/log.h"
#include "common/proto_time.h"
#include "common/status_macros.h"
#include "server/job_lifecycle.h"

namespace trainyard::server {

absl::Status WorkerDrains::Load() {
  ASSIGN_OR_RETURN(std::vector<v1::WorkerDrain> drains,
                   store_->ListWorkerDrains());
  for (v1::WorkerDrain& d : drains) {
    YARD_LOG(INFO) << "worker " << d.worker_id() << " stays drained"
                   << (d.reason().empty() ? "" : ": ") << d.reason();
    const std::string id = d.worker_id();
    workers_->SetDrain(id, std::move(d));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::WorkerDrain> WorkerDrains::Drain(
    const std::string& worker_id, const std::string& reason, bool keep_jobs) {
  if (worker_id.empty()) {
    return InvalidFieldError("worker_id", "required");
  }
  RETURN_IF_ERROR(CheckFreeText("reason", reason, kMaxDrainReason));
  // A worker not back since a server restart is known if drained already.
  if (!workers_->Knows(worker_id)) return UnknownWorkerError(worker_id);
  v1::WorkerDrain drain;
  drain.set_worker_id(worker_id);
  drain.set_reason(reason);
  drain.set_keep_jobs(keep_jobs);
  *drain.mutable_drain_time() = ToProtoTime(clock_->Now());
  RETURN_IF_ERROR(store_->PutWorkerDrain(drain));
  workers_->SetDrain(worker_id, drain);
  YARD_LOG(INFO) << "worker " << worker_id << " drained"
                 << (keep_jobs ? " (its jobs finish there)" : "")
                 << (reason.empty() ? "" : ": ") << reason;
  if (wake_) wake_();
  return drain;
}

absl::Status WorkerDrains::Undrain(const std::string& worker_id) {
  if (worker_id.empty()) {
    return InvalidFieldError("worker_id", "required");
  }
  absl::Status deleted = store_->DeleteWorkerDrain(worker_id);
  if (absl::IsNotFound(deleted)) {
    if (!workers_->Knows(worker_id)) return UnknownWorkerError(worker_id);
    return absl::FailedPreconditionError(
        absl::StrCat("worker '", worker_id, "' is not drained"));
  }
  RETURN_IF_ERROR(deleted);
  workers_->SetDrain(worker_id, std::nullopt);
  YARD_LOG(INFO) << "worker " << worker_id << " undrained";
  if (wake_) wake_();
  return absl::OkStatus();
}

absl::Status WorkerDrains::Forget(const std::string& worker_id) {
  if (worker_id.empty()) {
    return InvalidFieldError("worker_id", "required");
  }
  // The store first, as for drains: a failed write forgets nothing.
  RETURN_IF_ERROR(workers_->CheckForgettable(worker_id));
  const std::optional<WorkerStatus> before = workers_->Find(worker_id);
  RETURN_IF_ERROR(store_->ForgetWorker(worker_id));
  if (absl::Status forgot = workers_->Forget(worker_id); !forgot.ok()) {
    // It came back meanwhile: its drain is kept after all, and it is known
    // with the hello it came back with.
    if (before && before->drain) (void)store_->PutWorkerDrain(*before->drain);
    std::optional<WorkerStatus> now = workers_->Find(worker_id);
    if (now && !now->hello.worker_id().empty()) {
      (void)store_->PutKnownWorker(now->hello);
    }
    return forgot;
  }
  YARD_LOG(INFO) << "worker " << worker_id << " forgotten";
  if (wake_) wake_();
  return absl::OkStatus();
}

std::vector<DrainPreemption> DrainPreemptions(
    const std::vector<JobRecord>& active,
    const std::vector<WorkerStatus>& workers) {
  std::map<std::string, const v1::WorkerDrain*> moving;
  for (const WorkerStatus& w : workers) {
    if (w.drain && !w.drain->keep_jobs()) moving[w.id] = &*w.drain;
  }
  std::vector<DrainPreemption> out;
  if (moving.empty()) return out;
  for (const JobRecord& r : active) {
    if (r.job.state() != v1::RUNNING || r.cancel_requested()) continue;
    for (const std::string& worker : WorkersOf(r)) {
      auto it = moving.find(worker);
      if (it == moving.end()) continue;
      const std::string& why = it->second->reason();
      out.push_back({r.job.id(), r.job.worker_id(),
                     absl::StrCat("worker ", worker, " is drained",
                                  why.empty() ? "" : ": ", why)});
      break;
    }
  }
  return out;
}

}  // namespace trainyard::server
