// ChildProcess: a real program started by an integration test, in its own
// process group, with stdout and stderr going to files, that can be
// signalled, waited for with a deadline and is always reaped: the destructor
// stops whatever is still running (SIGTERM to the group, SIGKILL after a
// grace period). Children also get PR_SET_PDEATHSIG=SIGKILL, so a test that
// crashes leaves no daemons behind.
//
// RunCommand runs a program to completion (with a deadline) and returns its
// exit status and output. Neither is safe for concurrent use of one object
// from several threads; distinct objects are independent.
#ifndef TRAINYARD_TESTS_PROCESS_H_
#define TRAINYARD_TESTS_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trainyard::itest {

struct ProcessOptions {
  // argv[0] is the program's path (no PATH lookup).
  std::vector<std::string> argv;
  // Working directory; empty inherits the test's.
  std::string cwd;
  // Added to (or replacing entries of) the test's environment.
  std::vector<std::pair<std::string, std::string>> env;
  // Where the output goes; both required. Files are truncated.
  std::string stdout_path;
  std::string stderr_path;
};

// How a process ended: exactly one of `code` (exited) or `signal` is set.
struct ExitStatus {
  std::optional<int> code;
  std::optional<int> signal;

  bool Exited(int c) const { return code.has_value() && *code == c; }
  bool Killed(int s) const { return signal.has_value() && *signal == s; }
  std::string ToString() const;  // "exit 3", "signal 9 (Killed)"
};

class ChildProcess {
 public:
  // Forks and execs. Fails when the program does not exist or is not
  // executable (checked before forking, so the message is precise).
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(
      ProcessOptions options);

  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  const ProcessOptions& options() const { return options_; }

  // Sends `sig` to the process alone / to its whole process group. False
  // once it has been reaped.
  bool Signal(int sig);
  bool SignalGroup(int sig);

  // Waits up to `timeout` for the process to end; nullopt if it is still
  // running then. Once it has ended, returns the same status every time.
  std::optional<ExitStatus> WaitForExit(absl::Duration timeout);

  // Non-blocking: true while the process has not ended.
  bool Running();

  // SIGTERM to the group, then SIGKILL to the group after `grace`; reaps.
  ExitStatus Stop(absl::Duration grace = absl::Seconds(10));

  // SIGKILL to the process alone (its own children are left to their own
  // fate, as after a real crash), then reaps it.
  ExitStatus Kill();

  std::string Stdout() const;
  std::string Stderr() const;
  // The last `max_lines` lines of stdout and stderr, labelled, for failure
  // messages.
  std::string OutputTail(int max_lines = 30) const;

 private:
  ChildProcess(ProcessOptions options, pid_t pid, int pidfd);

  ProcessOptions options_;
  pid_t pid_;
  int pidfd_;  // -1 when pidfd_open is unavailable (then we poll)
  std::optional<ExitStatus> exit_;
};

struct CommandResult {
  ExitStatus status;
  bool timed_out = false;
  std::string out;
  std::string err;

  // exit code, or -1 when killed by a signal or timed out.
  int exit_code() const { return status.code.value_or(-1); }
  std::string DebugString() const;  // command line, status, output
  std::string command_line;
};

// Runs argv to completion within `timeout` (killed and marked timed_out
// past it). Output goes through files named `log_prefix`.stdout/.stderr.
CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::string& log_prefix, absl::Duration timeout,
                         const std::string& cwd = "");

// Ids of the live (not zombie) processes whose parent is `parent`.
std::vector<pid_t> ChildPidsOf(pid_t parent);
// True if `pid` exists and is not a zombie.
bool ProcessAlive(pid_t pid);
// The program name (comm) of `pid`, empty if it is gone.
std::string ProcessName(pid_t pid);

// Reads a whole file; empty if it cannot be read.
std::string ReadFileOrEmpty(const std::string& path);
// The last `max_lines` lines of `text`.
std::string LastLines(const std::string& text, int max_lines);

}  // namespace trainyard::itest

#endif  // TRAINYARD_TESTS_PROCESS_H_
