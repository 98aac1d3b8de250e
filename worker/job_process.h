// JobProcess: one attempt of one job, from spawn to reaped exit. Run() starts
// the train binary, turns its stdout into TrainerEvents and log, its stderr
// into log and a failure reason, and reports JobStarted, the events, log
// chunks and finally exactly one JobExited through the report callback, in
// that order.
//
// Run() blocks for the life of the child and must be called on a thread that
// lives at least that long (PR_SET_PDEATHSIG is tied to the spawning thread).
// Terminate() and Kill() are safe to call from any thread at any time, also
// before Run() starts or after it returns.
#ifndef TRAINYARD_WORKER_JOB_PROCESS_H_
#define TRAINYARD_WORKER_JOB_PROCESS_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
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
  std::string log_path;  // the job's local log, appended to
  SpawnRequest spawn;
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

  // Runs the attempt to its end; see the file comment.
  void Run();

  // SIGTERM to the job's process group, then SIGKILL if it still runs after
  // `grace`. `cancelled` marks the exit as asked for by the server.
  void Terminate(absl::Duration grace, bool cancelled);
  // SIGKILL to the process group now.
  void Kill(bool cancelled);
  // SIGKILL now because the server can no longer hear this worker; the exit
  // is reported with lost_server (the server re-queues the job).
  void Abandon();

 private:
  struct Control {
    bool terminate = false;
    bool term_sent = false;
    bool kill = false;
    bool kill_sent = false;
    bool cancelled = false;
    bool lost_server = false;
    absl::Time kill_at = absl::InfiniteFuture();
  };

  void Pump(ChildProcess& child);
  // Sends the signals asked for; returns when it must look again (the
  // SIGKILL escalation deadline).
  absl::Time ApplyControl(ChildProcess& child);
  // Reads what is ready on `fd`; false at end of file.
  bool ReadFrom(int fd, bool is_stdout);
  void OnStdoutLine(std::string_view line);
  void OnStderrLine(std::string_view line);
  void FlushLog();
  void Wake();
  void Report(trainyard::v1::JobUpdate update);
  void ReportExit(const ExitStatus& status, const std::string& error);

  const JobLaunch launch_;
  const ReportFn report_;
  FileDescriptor wake_fd_;  // eventfd: Terminate/Kill wake the poll loop

  absl::Mutex mu_;
  Control control_ ABSL_GUARDED_BY(mu_);

  // Owned by the thread in Run().
  FileDescriptor log_fd_;
  bool log_write_failed_ = false;
  LineSplitter stdout_lines_;
  LineSplitter stderr_lines_;
  TailBuffer stderr_tail_;
  std::string pending_log_;
};

}  // namespace trainyard::worker

#endif  // TRAINYARD_WORKER_JOB_PROCESS_H_
