// JobProcess: one attempt of one job, from spawn to reaped exit. Run() starts
// the train binary, turns its stdout into TrainerEvents and log, its stderr
// into log and a failure reason, and reports JobStarted, the events, log
// chunks and finally exactly one JobExited through the report callback, in
// that order.
//
// A data-parallel job is a gang of rank processes, each in its own process
// group. Rank 0 reports the trainer events; the other ranks' output goes to
// the log prefixed "[rank N] ". The gang lives and dies together: when one
// rank fails (a non-zero exit other than the checkpoint-and-stop code, or a
// signal) the others are killed at once, and the exit reported is that first
// failure, naming its rank. Signals asked for (Terminate, Kill) go to every
// rank.
//
// The job's lease: ranks started with SpawnRequest::stdin_pipe (yard-train
// --lease-fd 0) are told on stdin, one line each time it changes, how
// long the worker's lease with the server still runs ("<ms>\n"; "-1\n": no
// lease). A worker that stops renewing it (frozen, swapping, hung) stops
// telling, and each rank stops itself when the time it was last told has
// passed, before the server declares the worker lost and starts the job
// elsewhere: a job never runs in two places.
//
// Run() blocks for the life of the child and must be called on a thread that
// lives at least that long (PR_SET_PDEATHSIG is tied to the spawning thread).
// Terminate() and Kill() are safe to call from any thread at any time, also
// before Run() starts or after it returns.
#ifndef TRAINYARD_WORKER_JOB_PROCESS_H_
#define TRAINYARD_WORKER_JOB_PROCESS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "trainyard/v1/worker.pb.h"
#include "worker/child_process.h"
#include "worker/job_output.h"

namespace trainyard::worker {

// Everything needed to run one attempt, already resolved to paths.
struct JobLaunch {
  std::string job_id;
  int32_t attempt = 0;
  std::string log_path;             // the job's local log, appended to
  std::vector<SpawnRequest> ranks;  // in rank order; one for a plain job
  // The rank of ranks[0]: 0 unless the job's ranks are spread over several
  // workers and this one runs later ones. Only rank 0 reports the trainer
  // events; the others' output goes to the log prefixed "[rank N] ".
  int first_rank = 0;
  // Whether other workers run some of the job's ranks: a failure then
  // names the rank even when only one runs here (it may be rank 0).
  bool spread = false;
  // When the worker's lease runs out, as known when the job starts
  // (InfiniteFuture: no lease); RenewLease moves it.
  absl::Time lease_deadline = absl::InfiniteFuture();
};

class JobProcess {
 public:
  using ReportFn = std::function<void(trainyard::v1::JobUpdate)>;

  // JobExited.exit_code when the binary could not be executed at all.
  static constexpr int kExecFailedExitCode = 127;

  JobProcess(JobLaunch launch, ReportFn report);
  JobProcess(const JobProcess&) = delete;
  JobProcess& operator=(const JobProcess&) = delete;

  const std::string& job_id() const { return launch_.job_id; }
  int32_t attempt() const { return launch_.attempt; }

  // The exit code with which yard-train says it checkpointed and stopped
  // when asked to; a rank ending so does not break the gang.
  static constexpr int kInterruptedExitCode = 3;

  // Runs the attempt to its end; see the file comment.
  void Run();

  // Who wants the job stopped, which the exit report says: kCancel marks
  // it cancelled (asked for by the server); kShutdown marks it
  // worker_shutdown when the stop is what ended it (the server re-queues
  // the job); kPreempt marks nothing (the server knows it preempted).
  enum class StopFor { kPreempt, kCancel, kShutdown };

  // SIGTERM to the job's process group, then SIGKILL if it still runs after
  // `grace`.
  void Terminate(absl::Duration grace, StopFor why);
  // SIGKILL to the process group now.
  void Kill(StopFor why);
  // SIGKILL now because the server can no longer hear this worker; the exit
  // is reported with lost_server (the server re-queues the job).
  void Abandon();
  // The worker's lease now runs out at `deadline`: the ranks are told.
  void RenewLease(absl::Time deadline);

  // The line that tells a rank its lease runs out at `deadline`, `now`.
  static std::string LeaseLine(absl::Time deadline, absl::Time now);

 private:
  struct Control {
    bool terminate = false;
    bool term_sent = false;
    bool kill = false;
    bool kill_sent = false;
    bool cancelled = false;
    bool shutdown = false;  // the worker itself is shutting down
    bool lost_server = false;
    absl::Time kill_at = absl::InfiniteFuture();
    absl::Time lease_deadline = absl::InfiniteFuture();
    bool lease_told = false;  // the ranks know lease_deadline
  };

  // One rank's process and what it has said so far.
  struct Rank {
    int index = 0;  // the job's rank number (JobLaunch::first_rank + i)
    std::unique_ptr<ChildProcess> child;
    LineSplitter stdout_lines;
    LineSplitter stderr_lines;
    TailBuffer stderr_tail;
    std::optional<ExitStatus> exit;
    // A stop (the server's cancel, preempt or StopAttempt, or the
    // worker's shutdown) was signalled to it while it still ran. A rank that
    // died of its own before is not reported cancelled, or the server would
    // take its crash for a rank stopped as asked and blame another.
    bool stop_reached_it = false;
    absl::Time exit_time;  // when `exit` was seen
  };

  // Spawns every rank; on failure kills those already started.
  absl::Status SpawnRanks();
  void Pump();
  // Records a rank that exited; the first failure kills the rest.
  void OnRankExit(Rank& rank);
  // The rank that speaks for the attempt's exit: the first that failed,
  // else the first that did not simply finish; null when all finished.
  const Rank* Speaker() const;
  // The exit of the attempt as a whole, and its error text.
  std::pair<ExitStatus, std::string> GangExit() const;
  // Sends the signals asked for; returns when it must look again (the
  // SIGKILL escalation deadline).
  absl::Time ApplyControl();
  // Signals every rank still running; `asked`: a stop the server asked
  // for (Rank::stop_reached_it).
  void SignalAll(int sig, bool asked = false);
  // Reads what is ready on `fd`; false at end of file.
  bool ReadFrom(Rank& rank, int fd, bool is_stdout);
  void OnStdoutLine(Rank& rank, std::string_view line);
  void OnStderrLine(Rank& rank, std::string_view line);
  void FlushLog();
  void Wake();
  void Report(trainyard::v1::JobUpdate update);
  // `exited`: when the attempt's last process ended (JobExited.exit_time).
  // `own_end`: the rank that speaks for the exit ended of its own before a
  // stop reached it, so the exit is neither cancelled nor worker_shutdown
  // (else each says whether such a stop was asked for).
  void ReportExit(const ExitStatus& status, const std::string& error,
                  absl::Time exited, bool own_end);

  const JobLaunch launch_;
  const ReportFn report_;
  FileDescriptor wake_fd_;  // eventfd: Terminate/Kill wake the poll loop

  absl::Mutex mu_;
  Control control_ ABSL_GUARDED_BY(mu_);

  // Owned by the thread in Run().
  FileDescriptor log_fd_;
  bool log_write_failed_ = false;
  std::vector<Rank> ranks_;
  int first_failure_ = -1;  // index into ranks_ of the first rank that failed
  std::string pending_log_;
};

}  // namespace trainyard::worker

#endif  // TRAINYARD_WORKER_JOB_PROCESS_H_
