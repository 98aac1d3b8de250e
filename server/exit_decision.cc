#include "server/exit_decision.h"

#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace trainyard::server {
namespace {

// yard-train's exit code after SIGTERM with a checkpoint written.
constexpr int32_t kExitInterrupted = 3;
// yard-train's exit code for a bad spec, config or data file.
constexpr int32_t kExitUsage = 2;
// yard-train's exit code when it stopped itself because its worker's lease
// ran out untold (the worker frozen or cut off).
constexpr int32_t kExitLeaseLost = 4;
// JobExited.exit_code of an assignment the worker refused without starting
// it (no free slot yet, shutting down, ...).
constexpr int32_t kExitRefused = -1;
// A job refused this many times in a row fails instead of going round.
constexpr int kMaxRefusals = 3;
// A refused job waits this long in the queue before it is offered again,
// doubling with each refusal in a row: a worker refuses for a state that
// passes (a slot still held by a rank it is reaping, a GPU that is not
// free yet), and without a wait the next passes would use up every
// refusal within milliseconds.
constexpr absl::Duration kRefusalWait = absl::Seconds(1);
constexpr char kRefusedBy[] = "refused by worker ";

// What a rank says when it fails only because another rank ended first:
// its peer's socket closed or reset (socket_collective.cc, the NCCL
// emulation's wire), NCCL's remote error, or ranks that never met.
constexpr const char* kEchoes[] = {
    "closed its connection", "Connection reset by peer", "Broken pipe",
    "remote process exited", "could not join rank 0",    "ranks met within",
};

// How many attempts before the current one were refused, counting back.
int RefusalsInARow(const v1::Job& job) {
  int n = 0;
  for (int i = job.attempts_size() - 2; i >= 0; --i) {
    const v1::Attempt& a = job.attempts(i);
    if (a.outcome() != v1::QUEUED ||
        !absl::StartsWith(a.reason(), kRefusedBy)) {
      break;
    }
    ++n;
  }
  return n;
}

// The outcome of a refused assignment: the job never ran, so it goes back
// to the queue, unless workers keep refusing it (a job no worker will take
// must not go round forever).
std::pair<v1::JobState, std::string> RefusalOutcome(
    const JobRecord& r, const v1::JobExited& exit,
    const std::string& worker_id) {
  const std::string why =
      absl::StrCat(kRefusedBy, worker_id, ": ",
                   exit.error().empty() ? "no reason given" : exit.error());
  if (RefusalsInARow(r.job) + 1 >= kMaxRefusals) {
    return {v1::FAILED,
            absl::StrCat(why, " (", kMaxRefusals, " refusals in a row)")};
  }
  return {v1::QUEUED, why};
}

bool IsRefusal(const v1::JobExited& exit) {
  return exit.exit_code() == kExitRefused && exit.signal() == 0;
}

// The state a job's exit leads to, and why. A spread job's refusal by any
// of its workers is one even once another part has started (the job is
// RUNNING then): its ranks never met.
std::pair<v1::JobState, std::string> ExitOutcome(const JobRecord& r,
                                                 const v1::JobExited& exit,
                                                 const std::string& worker_id) {
  if (exit.exit_code() == 0 && exit.signal() == 0 && !exit.cancelled()) {
    if (!r.job.result().stopped_early().empty()) {
      return {v1::SUCCEEDED,
              absl::StrCat("finished: stopped early at step ",
                           r.job.result().step(), " (eval.patience)")};
    }
    return {v1::SUCCEEDED, "finished"};
  }
  if (r.cancel_requested()) return CancelledOutcome(r);
  if (exit.cancelled()) return {v1::CANCELLED, "stopped by the worker"};
  if (IsRefusal(exit) &&
      (r.job.state() == v1::SCHEDULED || !r.job.gang_parts().empty())) {
    return RefusalOutcome(r, exit, worker_id);
  }
  if (r.job.state() == v1::PREEMPTING &&
      (exit.exit_code() == kExitInterrupted || exit.signal() != 0)) {
    // Checkpointed and stopped, or killed after the grace period: it
    // resumes from its latest checkpoint. The reason names the preemptor.
    return {v1::QUEUED, r.job.state_reason()};
  }
  if (exit.worker_shutdown() && exit.signal() != 0 &&
      (r.job.state() == v1::SCHEDULED || r.job.state() == v1::RUNNING)) {
    // Not the job's fault: its worker shut down, and the stop came before
    // the job could checkpoint (still starting, or past the grace period).
    return {v1::QUEUED,
            absl::StrCat("stopped on worker ", worker_id,
                         " as it shut down (signal ", exit.signal(),
                         ", before the job checkpointed); will resume from "
                         "its latest checkpoint")};
  }
  if (exit.exit_code() == kExitLeaseLost && exit.signal() == 0 &&
      (r.job.state() == v1::RUNNING || r.job.state() == v1::PREEMPTING)) {
    // Not the job's fault: its worker stopped renewing the lease (and
    // was not declared lost yet). It resumes from its latest checkpoint.
    return {v1::QUEUED,
            absl::StrCat("stopped on worker ", worker_id,
                         ": the worker stopped renewing its lease (frozen or "
                         "cut off?); will resume from its checkpoint")};
  }
  if (exit.exit_code() == kExitInterrupted && exit.signal() == 0 &&
      r.job.state() == v1::RUNNING) {
    // Stopped by someone else's SIGTERM after checkpointing: run it again.
    return {v1::QUEUED, absl::StrCat("interrupted on worker ", worker_id,
                                     "; will resume from its checkpoint")};
  }
  if (!exit.error().empty()) return {v1::FAILED, exit.error()};
  if (exit.signal() != 0) {
    return {v1::FAILED, absl::StrCat("killed by signal ", exit.signal())};
  }
  return {v1::FAILED, absl::StrCat("exited with code ", exit.exit_code())};
}

// Whether a failed rank only reports that another rank ended first. A
// rank killed by a signal died of its own.
bool EchoesAnotherRank(const v1::JobExited& exit) {
  if (exit.signal() != 0) return false;
  for (const char* echo : kEchoes) {
    if (absl::StrContains(exit.error(), echo)) return true;
  }
  return false;
}

// The part of a spread job on `worker_id` (not the job's own worker).
v1::GangPart* MutablePartOn(v1::Job& job, const std::string& worker_id) {
  for (v1::GangPart& part : *job.mutable_gang_parts()) {
    if (part.worker_id() == worker_id) return &part;
  }
  return nullptr;
}

// Whether some ranks of the spread job have not reported their exit yet.
bool RanksRunning(const v1::Job& job) {
  if (!job.own_ranks_exited()) return true;
  for (const v1::GangPart& part : job.gang_parts()) {
    if (!part.exited()) return true;
  }
  return false;
}

// Keeps `why` as the attempt's failure unless one is kept already: the
// first stays, but a rank's own failure takes the place of an echo.
void RecordFailure(v1::Job& job, const std::string& why, bool echo,
                   bool final) {
  if (!job.pending_failure().empty() &&
      (echo || !job.pending_failure_echoes())) {
    return;
  }
  job.set_pending_failure(why);
  job.set_pending_failure_echoes(echo);
  job.set_pending_failure_final(final);
  if (job.state() == v1::RUNNING) {
    job.set_state_reason(
        absl::StrCat("a rank failed, stopping the others: ", why));
  }
}

// The outcome once every rank of the attempt has reported its exit and
// none decided it alone: its failure (a pending cancel wins).
ExitDecision Settle(const JobRecord& r) {
  ExitDecision d;
  d.ends = true;
  if (r.cancel_requested()) {
    std::tie(d.to, d.why) = CancelledOutcome(r);
  } else if (!r.job.pending_failure().empty()) {
    d.to = v1::FAILED;
    d.why = r.job.pending_failure();
    d.final = r.job.pending_failure_final();
  } else {
    // Not reached: rank 0's own exit either decides or fails the attempt.
    // Nothing says the job is at fault, so it runs again.
    d.to = v1::QUEUED;
    d.why =
        "every rank exited without a verdict; will resume from its "
        "checkpoint";
  }
  return d;
}

}  // namespace

std::pair<v1::JobState, std::string> CancelledOutcome(const JobRecord& r) {
  if (r.job.has_halving_stop()) {
    return {v1::SUCCEEDED,
            absl::StrCat("finished: stopped early at rung ",
                         r.job.halving_stop().rung(), " (spec.halving)")};
  }
  return {v1::CANCELLED, r.cancel_reason};
}

ExitDecision DecideExit(const JobRecord& r, const v1::JobExited& exit,
                        const std::string& worker_id) {
  ExitDecision d;
  d.ends = true;
  std::tie(d.to, d.why) = ExitOutcome(r, exit, worker_id);
  d.refused = IsRefusal(exit);
  d.final = d.refused || (exit.signal() == 0 && exit.exit_code() == kExitUsage);
  return d;
}

ExitDecision DecideSpreadExit(JobRecord& r, const v1::JobExited& exit,
                              const std::string& worker_id) {
  const bool rank0 = worker_id == r.job.worker_id();
  const bool plain = exit.signal() == 0;
  // Killed, or ended on its own just before, after the server told its
  // worker to stop the ranks because another had failed.
  const bool stopped_as_asked = !r.job.pending_failure().empty() &&
                                exit.cancelled() && !r.cancel_requested();
  // Another part finishing or stopping after its checkpoint, or any part
  // ending while the job is preempted: rank 0's exit says how it went.
  const bool for_rank0_to_say =
      !rank0 && (r.job.state() == v1::PREEMPTING ||
                 (plain && (exit.exit_code() == 0 ||
                            exit.exit_code() == kExitInterrupted)));
  const bool alone =
      IsRefusal(exit) || (plain && exit.exit_code() == kExitLeaseLost);
  if (rank0) {
    r.job.set_own_ranks_exited(true);
  } else if (v1::GangPart* part = MutablePartOn(r.job, worker_id)) {
    part->set_exited(true);
  }
  ExitDecision d;
  if (!stopped_as_asked && (alone || !for_rank0_to_say)) {
    d = DecideExit(r, exit, worker_id);
    if (d.to != v1::FAILED || d.refused) return d;
    // A rank failed: the others are stopped, and the attempt ends once
    // they have reported (or their worker is lost).
    RecordFailure(r.job, absl::StrCat("worker ", worker_id, ": ", d.why),
                  EchoesAnotherRank(exit), d.final);
    d = ExitDecision{};
    d.stop_others = true;
  }
  if (RanksRunning(r.job)) return d;
  return Settle(r);
}

bool RanksExitedOn(const v1::Job& job, const std::string& worker_id) {
  if (worker_id == job.worker_id()) return job.own_ranks_exited();
  for (const v1::GangPart& part : job.gang_parts()) {
    if (part.worker_id() == worker_id) return part.exited();
  }
  return false;
}

absl::Duration RefusalWait(const v1::Job& job) {
  return kRefusalWait * (1 << RefusalsInARow(job));
}

}  // namespace trainyard::server
