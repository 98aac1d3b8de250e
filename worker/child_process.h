// ChildProcess: one program started by the worker in its own process group,
// with stdin on /dev/null (or a stream the worker writes to) and
// stdout/stderr on pipes, killed by the kernel
// (PR_SET_PDEATHSIG=SIGKILL) if the thread that spawned it dies. This is the
// mechanism only; what the output means is JobProcess's business.
//
// PR_SET_PDEATHSIG fires when the spawning *thread* exits, not the process,
// so SpawnChild must be called on a thread that outlives the child (the job
// thread in JobRunner). A ChildProcess is used by one thread at a time.
#ifndef TRAINYARD_WORKER_CHILD_PROCESS_H_
#define TRAINYARD_WORKER_CHILD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace trainyard::worker {

// Owns a file descriptor; closes it on destruction.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.Release()) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release();
  void Reset();

 private:
  int fd_ = -1;
};

struct SpawnRequest {
  std::string path;               // the executable, absolute or relative
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> env;   // the complete environment, "KEY=VALUE"
  std::string cwd;                // working directory; empty keeps ours
  // stdin a stream the worker writes with WriteStdin (else /dev/null).
  bool stdin_pipe = false;
};

// How a child ended: exactly one of exit_code / signal is meaningful.
struct ExitStatus {
  int exit_code = 0;
  int signal = 0;  // non-zero when killed by a signal
  bool ok() const { return exit_code == 0 && signal == 0; }
};

// "exited with code 3" / "killed by signal 11 (Segmentation fault)".
std::string DescribeExit(const ExitStatus& status);

class ChildProcess {
 public:
  ChildProcess(pid_t pid, FileDescriptor stdout_read,
               FileDescriptor stderr_read, FileDescriptor pid_fd,
               FileDescriptor stdin_write = FileDescriptor());
  // Closes the pipes. Does not kill or reap: call Wait() first.
  ~ChildProcess();

  pid_t pid() const { return pid_; }  // also the process group id
  int stdout_fd() const { return stdout_.get(); }
  int stderr_fd() const { return stderr_.get(); }
  // Readable once the child has exited; -1 where pidfd_open is missing
  // (then poll HasExited() on a timer).
  int pid_fd() const { return pid_fd_.get(); }

  // Writes `text` to the child's stdin stream without blocking: false when
  // there is none, the child does not read (its buffer is full) or it has
  // closed its end. Never raises SIGPIPE.
  bool WriteStdin(std::string_view text);

  // Closes a pipe once it reached end of file.
  void CloseStdout() { stdout_.Reset(); }
  void CloseStderr() { stderr_.Reset(); }

  // Sends `sig` to the child's whole process group. Safe until Wait()
  // returns: an exited but unreaped child keeps its pid and group id.
  void SignalGroup(int sig);

  // True once the child has exited (it stays a zombie until Wait()).
  bool HasExited();

  // Blocks until the child exits, reaps it and returns how it ended.
  ExitStatus Wait();

 private:
  pid_t pid_;
  FileDescriptor stdout_;
  FileDescriptor stderr_;
  FileDescriptor pid_fd_;
  FileDescriptor stdin_;
  std::optional<ExitStatus> reaped_;
};

// Starts the child described by `request`. An executable that cannot be
// started (missing, not executable, bad cwd) is an error naming it; the
// short-lived child is reaped before returning.
absl::StatusOr<std::unique_ptr<ChildProcess>> SpawnChild(
    const SpawnRequest& request);

// Our environment with `overrides` ("KEY=VALUE") replacing or adding keys.
std::vector<std::string> EnvironmentWith(
    const std::vector<std::string>& overrides);

}  // namespace trainyard::worker

#endif  // TRAINYARD_WORKER_CHILD_PROCESS_H_
