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
namespace {

void RecordPreemptedFor(v1::Job& job, const PreemptedFor& for_job) {
  job.set_preempted_for(for_job.job_id);
  job.clear_preempted_room_on();
  for (const std::string& w : for_job.room_on) job.add_preempted_room_on(w);
}

}  // namespace

absl::StatusOr<JobRecord> JobLifecycle::Preempt(const std::string& job_id,
                                                const std::string& worker_id,
                                                const std::string& reason,
                                                const PreemptedFor& for_job) {
  // Set when the job was stopping already, for another waiting job (or
  // a drain: none).
  bool re_pointed = false;
  std::string was_for;
  ASSIGN_OR_RETURN(
      JobRecord record,
      store_->UpdateJob(
          job_id, Durability::kTransition,
          [&](JobRecord& r,
              std::vector<v1::JobEvent>& events) -> absl::StatusOr<bool> {
            // A spread job whose ranks are stopping after a failure is
            // ending already: stopping it again frees nothing sooner.
            const bool failing = !r.job.pending_failure().empty();
            if (r.job.state() == v1::PREEMPTING &&
                IsCurrentAttempt(r, worker_id, r.job.attempt()) &&
                !for_job.job_id.empty() &&
                r.job.preempted_for() != for_job.job_id) {
              re_pointed = true;
              was_for = r.job.preempted_for();
              RecordPreemptedFor(r.job, for_job);
              return true;
            }
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
            RecordPreemptedFor(r.job, for_job);
            return true;
          }));
  if (re_pointed) {
    YARD_LOG(INFO) << "job " << job_id << " is stopping now for "
                   << for_job.job_id << " (was for "
                   << (was_for.empty() ? "a drain" : was_for) << ")";
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " is stopping already; now for ", for_job.job_id,
        " (was for ", was_for.empty() ? "a drain" : was_for, ")"));
  }
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
