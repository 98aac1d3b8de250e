#include "server/job_state.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/proto_time.h"

namespace trainyard::server {
namespace {

using v1::JobState;

bool Allowed(JobState from, JobState to) {
  switch (from) {
    case v1::QUEUED:
      return to == v1::SCHEDULED || to == v1::CANCELLED || to == v1::SUSPENDED;
    case v1::SCHEDULED:
      return to == v1::RUNNING || to == v1::QUEUED || to == v1::CANCELLED ||
             to == v1::FAILED || to == v1::SUSPENDED;
    case v1::RUNNING:
      return to == v1::SUCCEEDED || to == v1::FAILED || to == v1::CANCELLED ||
             to == v1::QUEUED || to == v1::PREEMPTING;
    case v1::PREEMPTING:
      return to == v1::QUEUED || to == v1::SUCCEEDED || to == v1::FAILED ||
             to == v1::CANCELLED || to == v1::SUSPENDED;
    case v1::SUSPENDED:
      return to == v1::QUEUED || to == v1::CANCELLED;
    default:
      return false;  // terminal states and UNSPECIFIED go nowhere
  }
}

}  // namespace

std::string JobStateName(JobState state) {
  if (state == v1::JOB_STATE_UNSPECIFIED) return "UNSPECIFIED";
  const std::string& name = v1::JobState_Name(state);
  return name.empty() ? absl::StrCat("STATE_", static_cast<int>(state)) : name;
}

bool IsTerminal(JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED ||
         state == v1::CANCELLED;
}

bool IsActive(JobState state) {
  return state == v1::SCHEDULED || state == v1::RUNNING ||
         state == v1::PREEMPTING;
}

bool IsKnownState(JobState state) {
  return state == v1::QUEUED || state == v1::SUSPENDED || IsActive(state) ||
         IsTerminal(state);
}

bool AwaitsDependencies(const v1::Job& job) {
  return !job.spec().depends_on().empty() && !job.dependencies_met();
}

bool AwaitsWarmStartSource(const v1::Job& job) {
  return job.spec().has_warm_start() && job.warm_start_checkpoint().empty();
}

bool InRestartBackoff(const v1::Job& job, absl::Time now) {
  return job.has_restart_after() && FromProtoTime(job.restart_after()) > now;
}

absl::Status CheckTransition(std::string_view job_id, JobState from,
                             JobState to) {
  if (Allowed(from, to)) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("job ", std::string(job_id), ": cannot go from ",
                   JobStateName(from), " to ", JobStateName(to)));
}

absl::StatusOr<v1::StateChange> Transition(v1::Job& job, JobState to,
                                           std::string reason,
                                           absl::Time now) {
  return Transition(job, to, std::move(reason), now, now);
}

absl::StatusOr<v1::StateChange> Transition(v1::Job& job, JobState to,
                                           std::string reason, absl::Time now,
                                           absl::Time attempt_end) {
  if (to == v1::SCHEDULED) {
    return absl::InvalidArgumentError(
        "Transition: use StartAttempt to schedule a job");
  }
  if (to == v1::QUEUED && !job.suspend_reason().empty()) {
    // Stopped for a suspend: parked, not queued.
    to = v1::SUSPENDED;
    reason = job.suspend_reason();
  }
  absl::Status s = CheckTransition(job.id(), job.state(), to);
  if (!s.ok()) return s;
  if (to != v1::PREEMPTING) {
    job.clear_suspend_reason();
    job.clear_preempted_for();
    job.clear_preempted_room_on();
  }
  v1::StateChange change;
  change.set_from(job.state());
  change.set_to(to);
  change.set_reason(reason);
  change.set_attempt(job.attempt());
  change.set_worker_id(job.worker_id());

  const google::protobuf::Timestamp ts = ToProtoTime(now);
  google::protobuf::Timestamp end = ts;  // of the job, when it ends
  if (IsActive(job.state()) && !IsActive(to) && job.attempts_size() > 0) {
    v1::Attempt* attempt = job.mutable_attempts(job.attempts_size() - 1);
    absl::Time ended = std::min(attempt_end, now);
    if (attempt->has_start_time()) {
      ended = std::max(ended, FromProtoTime(attempt->start_time()));
    }
    // The job ends with it, though never before it started.
    end = ToProtoTime(job.has_start_time()
                          ? std::max(ended, FromProtoTime(job.start_time()))
                          : ended);
    *attempt->mutable_end_time() = ToProtoTime(ended);
    attempt->set_outcome(to);
    attempt->set_reason(reason);
  }
  if (to == v1::RUNNING && !job.has_start_time()) *job.mutable_start_time() = ts;
  if (IsTerminal(to)) *job.mutable_end_time() = end;
  if (to == v1::QUEUED) *job.mutable_queue_time() = ts;
  if (to == v1::QUEUED || to == v1::SUSPENDED) {
    job.clear_worker_id();  // no current attempt
  }
  job.set_state(to);
  job.set_state_reason(std::move(reason));
  return change;
}

absl::StatusOr<v1::StateChange> StartAttempt(v1::Job& job,
                                             std::string worker_id,
                                             absl::Time now) {
  absl::Status s = CheckTransition(job.id(), job.state(), v1::SCHEDULED);
  if (!s.ok()) return s;
  if (worker_id.empty()) {
    return absl::InvalidArgumentError("StartAttempt: empty worker id");
  }
  v1::StateChange change;
  change.set_from(job.state());
  change.set_to(v1::SCHEDULED);
  change.set_attempt(job.attempt() + 1);
  change.set_worker_id(worker_id);
  change.set_reason(absl::StrCat("assigned to worker ", worker_id));

  v1::Attempt* attempt = job.add_attempts();
  attempt->set_number(job.attempt() + 1);
  attempt->set_worker_id(worker_id);
  *attempt->mutable_start_time() = ToProtoTime(now);
  job.set_attempt(job.attempt() + 1);
  job.set_worker_id(std::move(worker_id));
  job.set_state(v1::SCHEDULED);
  job.set_state_reason(change.reason());
  return change;
}

absl::Duration TimeHeld(const v1::Job& job, absl::Time now) {
  absl::Duration held;
  for (const v1::Attempt& a : job.attempts()) {
    if (!a.has_start_time()) continue;
    const absl::Time end = a.has_end_time() ? FromProtoTime(a.end_time()) : now;
    held += std::max(end - FromProtoTime(a.start_time()), absl::ZeroDuration());
  }
  return held;
}

absl::Time QueuedSince(const v1::Job& job) {
  if (job.has_queue_time()) return FromProtoTime(job.queue_time());
  if (job.attempts_size() > 0 &&
      job.attempts(job.attempts_size() - 1).has_end_time()) {
    return FromProtoTime(job.attempts(job.attempts_size() - 1).end_time());
  }
  return FromProtoTime(job.create_time());
}

absl::Status CheckNotEnded(const v1::Job& job) {
  if (!IsTerminal(job.state())) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "job ", job.id(), " is already ", JobStateName(job.state())));
}

}  // namespace trainyard::server
