// JobLifecycle: reports from workers (started, trainer events, exits, log
// bytes), fenced by attempt. A numbered report (JobUpdate.sequence) is
// applied once: the highest number applied is committed with its effect
// (Attempt.last_report_sequence), and a report the worker sends again after
// a broken stream or a server restart, numbered at or below it, is dropped.
#include <algorithm>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/proto_time.h"
#include "common/status_macros.h"
#include "server/exit_decision.h"
#include "server/halving.h"
#include "server/job_lifecycle.h"
#include "server/job_state.h"

namespace trainyard::server {
namespace {

// The record of `update`'s attempt in `job`, or null.
v1::Attempt* AttemptOf(v1::Job& job, const v1::JobUpdate& update) {
  for (int i = job.attempts_size() - 1; i >= 0; --i) {
    if (job.attempts(i).number() == update.attempt()) {
      return job.mutable_attempts(i);
    }
  }
  return nullptr;
}

// True when `update` was applied before (it is a resent duplicate); else
// records it as the attempt's latest applied report. Unnumbered reports
// (from a worker that does not number them) are always applied. Only the
// job's own worker's reports are numbered here: the workers of a spread
// job's other parts number theirs apart, and their reports (start, exit)
// are idempotent.
bool AlreadyApplied(v1::Job& job, const v1::JobUpdate& update,
                    const std::string& worker_id) {
  if (worker_id != job.worker_id()) return false;
  v1::Attempt* attempt = AttemptOf(job, update);
  if (update.sequence() <= 0 || attempt == nullptr) return false;
  if (update.sequence() <= attempt->last_report_sequence()) return true;
  attempt->set_last_report_sequence(update.sequence());
  return false;
}

// A report for the current attempt while the job is still SCHEDULED means
// the process started (its JobStarted was lost or overtaken).
absl::Status EnsureRunning(JobRecord& r, const std::string& why, absl::Time now,
                           std::vector<v1::JobEvent>& events) {
  if (r.job.state() != v1::SCHEDULED) return absl::OkStatus();
  ASSIGN_OR_RETURN(*events.emplace_back().mutable_state_change(),
                   Transition(r.job, v1::RUNNING, why, now));
  return absl::OkStatus();
}

void ApplyTrainerEvent(const v1::TrainerEvent& e, v1::Job& job) {
  switch (e.event_case()) {
    case v1::TrainerEvent::kStarted:
      if (job.attempts_size() > 0) {
        job.mutable_attempts(job.attempts_size() - 1)
            ->set_resumed_from_step(e.started().start_step());
      }
      break;
    case v1::TrainerEvent::kProgress:
      *job.mutable_progress() = e.progress();
      break;
    case v1::TrainerEvent::kEval:
      *job.mutable_last_eval() = e.eval();
      break;
    case v1::TrainerEvent::kCheckpoint:
      *job.mutable_last_checkpoint() = e.checkpoint();
      break;
    case v1::TrainerEvent::kFinished:
      *job.mutable_result() = e.finished();
      break;
    case v1::TrainerEvent::kInterrupted:
      job.mutable_last_checkpoint()->set_step(e.interrupted().step());
      job.mutable_last_checkpoint()->set_path(
          e.interrupted().checkpoint_path());
      break;
    case v1::TrainerEvent::EVENT_NOT_SET:
      break;
  }
}

// A failed attempt of a job with restarts left goes back to the queue, to
// resume from its latest checkpoint once its backoff (RestartBackoff of
// `base_backoff`) has passed; `to` and `why` say so, and the result is
// true. A `final` failure (a usage error, yard-train exit 2: the spec or
// its files are wrong) would fail again, and a job refused by workers in a
// row has its own limit, so those fail the job at once.
bool RestartIfAllowed(bool final, absl::Duration base_backoff, absl::Time now,
                      v1::Job& job, v1::JobState& to, std::string& why) {
  if (final || job.restarts() >= job.spec().max_restarts()) return false;
  job.set_restarts(job.restarts() + 1);
  const absl::Duration wait = RestartBackoff(base_backoff, job.restarts());
  *job.mutable_restart_after() = ToProtoTime(now + wait);
  to = v1::QUEUED;
  why = absl::StrCat("restart ", job.restarts(), " of ",
                     job.spec().max_restarts(),
                     wait > absl::ZeroDuration()
                         ? absl::StrCat(" in ", absl::FormatDuration(wait))
                         : "",
                     " from the latest checkpoint after: ", why);
  return true;
}

// The reason of a job's first start: a spread job names where rank 0 runs
// besides the worker that started first.
std::string StartReason(const v1::Job& job, const std::string& worker_id,
                        int32_t pid) {
  if (job.gang_parts().empty()) {
    return absl::StrCat("started on worker ", worker_id, " (pid ", pid, ")");
  }
  if (worker_id == job.worker_id()) {
    return absl::StrCat("started: rank 0 on worker ", worker_id, " first (pid ",
                        pid, ")");
  }
  return absl::StrCat("started: worker ", worker_id, " first (pid ", pid,
                      "); rank 0 on worker ", job.worker_id());
}

// Whether some ranks of the job's latest attempt ran on `worker_id`.
bool LatestAttemptRanOn(const v1::Job& job, const std::string& worker_id) {
  if (job.worker_id() == worker_id) return true;
  if (job.attempts_size() == 0) return false;
  const auto& more = job.attempts(job.attempts_size() - 1).more_workers();
  return std::find(more.begin(), more.end(), worker_id) != more.end();
}

}  // namespace

absl::StatusOr<ReportOutcome> JobLifecycle::OnUpdate(
    const std::string& worker_id, const v1::JobUpdate& update) {
  absl::StatusOr<ReportOutcome> outcome;
  switch (update.update_case()) {
    case v1::JobUpdate::kStarted:
      outcome = OnStarted(worker_id, update);
      break;
    case v1::JobUpdate::kTrainer:
      outcome = OnTrainerEvent(worker_id, update);
      break;
    case v1::JobUpdate::kExited:
      outcome = OnExited(worker_id, update);
      break;
    case v1::JobUpdate::kLog:
      outcome = OnLog(worker_id, update);
      break;
    case v1::JobUpdate::UPDATE_NOT_SET:
      return absl::InvalidArgumentError(absl::StrCat(
          "JobUpdate for job ", update.job_id(), " carries no update"));
  }
  // A job this server does not know is as stale as an old attempt.
  if (absl::IsNotFound(outcome.status())) return ReportOutcome::kStale;
  return outcome;
}

absl::StatusOr<ReportOutcome> JobLifecycle::OnStarted(
    const std::string& worker_id, const v1::JobUpdate& update) {
  ReportOutcome outcome = ReportOutcome::kApplied;
  RETURN_IF_ERROR(
      store_
          ->UpdateJob(update.job_id(), Durability::kTransition,
                      [&](JobRecord& r, std::vector<v1::JobEvent>& events)
                          -> absl::StatusOr<bool> {
                        if (!IsCurrentAttempt(r, worker_id, update.attempt())) {
                          outcome = ReportOutcome::kStale;
                          return false;
                        }
                        if (r.job.state() != v1::SCHEDULED ||
                            AlreadyApplied(r.job, update, worker_id)) {
                          return false;
                        }
                        // A job spread over workers runs once the first
                        // of them has started its ranks.
                        RETURN_IF_ERROR(
                            EnsureRunning(r,
                                          StartReason(r.job, worker_id,
                                                      update.started().pid()),
                                          clock_->Now(), events));
                        return true;
                      })
          .status());
  return outcome;
}

absl::StatusOr<ReportOutcome> JobLifecycle::OnTrainerEvent(
    const std::string& worker_id, const v1::JobUpdate& update) {
  ReportOutcome outcome = ReportOutcome::kApplied;
  // Progress is telemetry, unless this event also moves the job to RUNNING
  // (its JobStarted was lost), or is an evaluation spec.halving ranks (it
  // may stop the job): a transition is always committed in full.
  ASSIGN_OR_RETURN(JobRecord current, store_->GetJob(update.job_id()));
  const v1::TrainerEvent& event = update.trainer();
  const std::optional<int64_t> rung =
      event.has_eval() ? RungFor(current.job.spec(), event.eval().step())
                       : std::nullopt;
  const Durability durability =
      current.job.state() == v1::SCHEDULED || rung.has_value()
          ? Durability::kTransition
          : Durability::kTelemetry;
  bool stopped = false;  // spec.halving stopped the job just now
  ASSIGN_OR_RETURN(
      JobRecord record,
      store_->UpdateJobWithRungs(
          update.job_id(), durability,
          [&](JobRecord& r, std::vector<v1::JobEvent>& events,
              RungBoard& rungs) -> absl::StatusOr<bool> {
            stopped = false;
            if (!IsCurrentAttempt(r, worker_id, update.attempt())) {
              outcome = ReportOutcome::kStale;
              return false;
            }
            // Rank 0 speaks for the job; other ranks have no events.
            if (worker_id != r.job.worker_id()) return false;
            if (AlreadyApplied(r.job, update, worker_id)) return false;
            RETURN_IF_ERROR(
                EnsureRunning(r, absl::StrCat("started on worker ", worker_id),
                              clock_->Now(), events));
            ApplyTrainerEvent(event, r.job);
            *events.emplace_back().mutable_trainer() = event;
            if (rung.has_value()) {
              ASSIGN_OR_RETURN(stopped, RankEvaluation(r, *rung, rungs));
            }
            return true;
          }));
  if (stopped) {
    YARD_LOG(INFO) << "job " << update.job_id()
                   << " stopped by halving: " << record.job.state_reason();
    for (const std::string& worker : WorkersOf(record)) {
      workers_->Send(worker, CancelFor(record));
    }
    if (on_halving_stop_) on_halving_stop_();
  }
  return outcome;
}

absl::StatusOr<bool> JobLifecycle::RankEvaluation(JobRecord& r, int64_t rung,
                                                  RungBoard& rungs) const {
  // A job on its way out (stopped by halving, cancelled) enters nothing:
  // the group's later jobs are ranked against those that went on.
  if (r.cancel_requested() || !IsActive(r.job.state())) return false;
  const v1::EvalResult& eval = r.job.last_eval();
  ASSIGN_OR_RETURN(std::optional<std::vector<double>> others,
                   rungs.Enter(r, rung, eval.loss()));
  // Entered there before: a resumed run passing the rung again.
  if (!others.has_value()) return false;
  std::optional<v1::HalvingStop> stop =
      RankAtRung(r.job.spec(), rung, eval, *others);
  if (!stop.has_value()) return false;
  *r.job.mutable_halving_stop() = *stop;
  const std::string why =
      DescribeHalvingStop(*stop, r.job.spec().halving().group());
  r.cancel_reason = absl::StrCat("stopped by halving: ", why);
  r.job.set_state_reason(absl::StrCat("stopping (halving): ", why));
  return true;
}

absl::StatusOr<ReportOutcome> JobLifecycle::OnExited(
    const std::string& worker_id, const v1::JobUpdate& update) {
  ReportOutcome outcome = ReportOutcome::kApplied;
  bool duplicate = false;
  bool ended = false;
  bool rank_failed = false;         // a spread job's rank: stop the others
  std::vector<std::string> others;  // workers of the attempt's other ranks
  ASSIGN_OR_RETURN(
      JobRecord record,
      store_->UpdateJob(
          update.job_id(), Durability::kTransition,
          [&](JobRecord& r,
              std::vector<v1::JobEvent>& events) -> absl::StatusOr<bool> {
            if (!IsCurrentAttempt(r, worker_id, update.attempt())) {
              outcome = ReportOutcome::kStale;
              return false;
            }
            const bool spread = !r.job.gang_parts().empty();
            if (AlreadyApplied(r.job, update, worker_id) ||
                (spread && RanksExitedOn(r.job, worker_id))) {
              duplicate = true;
              return false;
            }
            ExitDecision d =
                spread ? DecideSpreadExit(r, update.exited(), worker_id)
                       : DecideExit(r, update.exited(), worker_id);
            if (!d.ends) {
              rank_failed = d.stop_others;
              if (rank_failed) others = WorkersOf(r, worker_id);
              return true;
            }
            others = WorkersOf(r, worker_id);
            ended = true;
            // The attempt ended when the worker saw it end, not when this
            // report came (it may come again after a reconnect).
            RETURN_IF_ERROR(
                EndAttempt(r, d, worker_id,
                           ExitTimeOf(update.exited(), clock_->Now()), events));
            return true;
          }));
  if (ended || rank_failed) {
    // The ranks elsewhere cannot go on without these (after a clean finish
    // they are exiting anyway).
    StopAttemptOn(workers_, update.job_id(), update.attempt(), others);
  }
  if (outcome != ReportOutcome::kApplied || duplicate) return outcome;
  if (ended) {
    YARD_LOG(INFO) << "job " << update.job_id() << " attempt "
                   << update.attempt() << " exited on " << worker_id << ": "
                   << JobStateName(record.job.state()) << " ("
                   << record.job.state_reason() << ")";
  } else if (rank_failed) {
    YARD_LOG(INFO) << "job " << update.job_id() << " attempt "
                   << update.attempt() << ": ranks on " << worker_id
                   << " failed; stopping those on " << others.size()
                   << " other workers (" << record.job.state_reason() << ")";
  }
  // Slots were freed: the attempt's, or those of ranks that exited.
  WakeScheduler();
  return outcome;
}

absl::Status JobLifecycle::EndAttempt(JobRecord& r, ExitDecision d,
                                      const std::string& worker_id,
                                      absl::Time ended,
                                      std::vector<v1::JobEvent>& events) {
  // Failed while stopping for a suspend (its checkpoint could not be
  // written, say): parked as asked, the attempt FAILED with its error, no
  // restart spent; it resumes from its latest checkpoint.
  const bool failed_suspending = d.to == v1::FAILED &&
                                 r.job.state() == v1::PREEMPTING &&
                                 !r.job.suspend_reason().empty();
  if (failed_suspending) {
    r.job.set_suspend_reason(
        absl::StrCat(r.job.suspend_reason(),
                     "; the attempt failed while stopping: ", d.why));
    d.to = v1::QUEUED;  // Transition parks it
  }
  const bool restart =
      d.to == v1::FAILED && RestartIfAllowed(d.final, options_.restart_backoff,
                                             clock_->Now(), r.job, d.to, d.why);
  // A refused attempt never started: it does not pass RUNNING.
  if (d.refused && d.to == v1::QUEUED) {
    const absl::Duration wait = RefusalWait(r.job);
    *r.job.mutable_restart_after() = ToProtoTime(clock_->Now() + wait);
    absl::StrAppend(&d.why, "; offered again in ", absl::FormatDuration(wait));
  }
  if (d.to != v1::QUEUED && !d.refused) {
    RETURN_IF_ERROR(EnsureRunning(r,
                                  absl::StrCat("started on worker ", worker_id),
                                  clock_->Now(), events));
  }
  ASSIGN_OR_RETURN(*events.emplace_back().mutable_state_change(),
                   Transition(r.job, d.to, d.why, clock_->Now(), ended));
  if (d.to == v1::SUCCEEDED) FillHalvingResult(r.job);
  if (restart || failed_suspending) {
    // The job goes back to the queue (or parks), but this attempt failed.
    v1::Attempt* attempt = r.job.mutable_attempts(r.job.attempts_size() - 1);
    attempt->set_outcome(v1::FAILED);
    if (failed_suspending) attempt->set_reason(d.why);
  }
  if (d.to != v1::SUCCEEDED) r.job.clear_result();
  ReleaseHoldings(r);
  return absl::OkStatus();
}

absl::StatusOr<ReportOutcome> JobLifecycle::OnLog(const std::string& worker_id,
                                                  const v1::JobUpdate& update) {
  ASSIGN_OR_RETURN(JobRecord r, store_->GetJob(update.job_id()));
  // The last bytes of an attempt may arrive just after its exit was
  // recorded: keep them. Bytes from any other attempt (a job handed back to
  // the queue has no worker) are dropped.
  const bool same_attempt = r.job.attempt() == update.attempt() &&
                            LatestAttemptRanOn(r.job, worker_id);
  if (!same_attempt) return ReportOutcome::kStale;
  RETURN_IF_ERROR(store_->AppendLog(update.job_id(), update.log()));
  return ReportOutcome::kApplied;
}

absl::StatusOr<ReportOutcome> JobLifecycle::Reattach(
    const std::string& worker_id, int32_t attempt, const std::string& job_id) {
  ReportOutcome outcome = ReportOutcome::kApplied;
  absl::StatusOr<JobRecord> r = store_->UpdateJob(
      job_id, Durability::kTransition,
      [&](JobRecord& r,
          std::vector<v1::JobEvent>& events) -> absl::StatusOr<bool> {
        if (!IsCurrentAttempt(r, worker_id, attempt)) {
          outcome = ReportOutcome::kStale;
          return false;
        }
        if (r.job.state() != v1::SCHEDULED) return false;
        RETURN_IF_ERROR(EnsureRunning(
            r, absl::StrCat("running on worker ", worker_id, " (re-attached)"),
            clock_->Now(), events));
        return true;
      });
  if (absl::IsNotFound(r.status())) return ReportOutcome::kStale;
  if (!r.ok()) return r.status();
  return outcome;
}

}  // namespace trainyard::server
