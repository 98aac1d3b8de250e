// JobLifecycle: preemption. The scheduler stops a running job to make room
// for one of higher priority: RUNNING -> PREEMPTING is committed first, then
// the worker is told (Preempt: SIGTERM, the job checkpoints and exits). Its
// exit (job_reports.cc) makes it QUEUED again, and its next attempt resumes
// from the checkpoint in its per-job checkpoint directory.
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "server/job_lifecycle.h"
#include "server/job_state.h"

namespace trainyard::server {

absl::StatusOr<JobRecord> JobLifecycle::Preempt(const std::string& job_id,
                                                const std::string& worker_id,
                                                const std::string& reason,
                                                const PreemptedFor& for_job) {
  ASSIGN_OR_RETURN(
      JobRecord record,
      store_->UpdateJob(
          job_id, Durability::kTransition,
          [&](JobRecord& r,
              std::vector<v1::JobEvent>& events) -> absl::StatusOr<bool> {
            // A spread job whose ranks are stopping after a failure is
            // ending already: stopping it again frees nothing sooner.
            const bool failing = !r.job.pending_failure().empty();
            if (r.job.state() != v1::RUNNING ||
                !IsCurrentAttempt(r, worker_id, r.job.attempt()) ||
                r.cancel_requested() || failing) {
              return absl::FailedPreconditionError(
                  absl::StrCat("job ", job_id, " is not running on worker ",
                               worker_id, " (", JobStateName(r.job.state()),
                               r.cancel_requested() ? ", cancel pending" : "",
                               failing ? ", a rank failed" : "", ")"));
            }
            ASSIGN_OR_RETURN(
                *events.emplace_back().mutable_state_change(),
                Transition(r.job, v1::PREEMPTING, reason, clock_->Now()));
            r.job.set_preempted_for(for_job.job_id);
            for (const std::string& w : for_job.room_on) {
              r.job.add_preempted_room_on(w);
            }
            return true;
          }));
  YARD_LOG(INFO) << "job " << job_id << " attempt " << record.job.attempt()
                 << " on worker " << worker_id << " -> PREEMPTING: " << reason;
  return record;
}

v1::ServerMessage JobLifecycle::PreemptFor(const JobRecord& record) const {
  v1::ServerMessage msg;
  v1::Preempt* preempt = msg.mutable_preempt();
  preempt->set_job_id(record.job.id());
  preempt->set_attempt(record.job.attempt());
  preempt->set_grace_ms(options_.preempt_grace_ms);
  return msg;
}

}  // namespace trainyard::server
