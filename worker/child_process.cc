#include "worker/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace trainyard::worker {
namespace {

// What a child that failed before exec writes to the parent.
struct ExecFailure {
  int step;  // 0 chdir, 1 exec
  int error;
};

// dup2 that also works when `from` already is `to` (then it only clears
// close-on-exec, which dup2 would leave set). Async-signal-safe.
bool MoveFd(int from, int to) {
  if (from == to) return fcntl(to, F_SETFD, 0) == 0;
  return dup2(from, to) == to;
}

// Runs in the child between fork and exec: async-signal-safe calls only.
[[noreturn]] void ExecChild(pid_t parent, int stdin_fd, int stdout_fd,
                            int stderr_fd, int error_fd, const char* path,
                            const char* cwd, char* const* argv,
                            char* const* envp) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The parent may have died before prctl took effect.
  if (getppid() != parent) _exit(127);

  // Signal masks and ignored signals survive exec; the child must see
  // SIGTERM even though the worker blocks it for its own handling.
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);

  if (!MoveFd(stdin_fd, 0) || !MoveFd(stdout_fd, 1) || !MoveFd(stderr_fd, 2)) {
    _exit(127);
  }
  // Whatever the worker holds (sockets, the store lock) is not the job's.
  close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);

  ExecFailure failure{0, 0};
  if (cwd[0] != '\0' && chdir(cwd) != 0) {
    failure = {0, errno};
  } else {
    execve(path, argv, envp);
    failure = {1, errno};
  }
  ssize_t unused = write(error_fd, &failure, sizeof(failure));
  (void)unused;
  _exit(127);
}

absl::Status MakePipe(FileDescriptor& read_end, FileDescriptor& write_end) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", strerror(errno)));
  }
  read_end = FileDescriptor(fds[0]);
  write_end = FileDescriptor(fds[1]);
  return absl::OkStatus();
}

std::vector<char*> CStrings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const std::string& s : strings)
    out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

ExitStatus DecodeWaitStatus(int status) {
  ExitStatus out;
  if (WIFEXITED(status)) out.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) out.signal = WTERMSIG(status);
  return out;
}

}  // namespace

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    Reset();
    fd_ = other.Release();
  }
  return *this;
}

int FileDescriptor::Release() { return std::exchange(fd_, -1); }

void FileDescriptor::Reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

std::string DescribeExit(const ExitStatus& status) {
  if (status.signal != 0) {
    const char* what = sigdescr_np(status.signal);  // thread-safe strsignal
    return absl::StrCat("killed by signal ", status.signal, " (",
                        what != nullptr ? what : "unknown", ")");
  }
  return absl::StrCat("exited with code ", status.exit_code);
}

ChildProcess::ChildProcess(pid_t pid, FileDescriptor stdout_read,
                           FileDescriptor stderr_read, FileDescriptor pid_fd,
                           FileDescriptor stdin_write)
    : pid_(pid),
      stdout_(std::move(stdout_read)),
      stderr_(std::move(stderr_read)),
      pid_fd_(std::move(pid_fd)),
      stdin_(std::move(stdin_write)) {}

bool ChildProcess::WriteStdin(std::string_view text) {
  if (!stdin_.valid()) return false;
  // A socket, so that a child gone away is EPIPE and not SIGPIPE.
  ssize_t n;
  do {
    n = send(stdin_.get(), text.data(), text.size(),
             MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(text.size());
}

ChildProcess::~ChildProcess() = default;

void ChildProcess::SignalGroup(int sig) {
  if (reaped_.has_value()) return;  // the group id may belong to others now
  if (killpg(pid_, sig) != 0 && errno == ESRCH) kill(pid_, sig);
}

bool ChildProcess::HasExited() {
  if (reaped_.has_value()) return true;
  siginfo_t info;
  memset(&info, 0, sizeof(info));
  if (waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    return errno == ECHILD;
  }
  return info.si_pid != 0;
}

ExitStatus ChildProcess::Wait() {
  if (reaped_.has_value()) return *reaped_;
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid_, &status, 0);
  } while (r < 0 && errno == EINTR);
  reaped_ = r == pid_ ? DecodeWaitStatus(status) : ExitStatus{127, 0};
  pid_fd_.Reset();
  return *reaped_;
}

absl::StatusOr<std::unique_ptr<ChildProcess>> SpawnChild(
    const SpawnRequest& request) {
  if (request.path.empty() || request.argv.empty()) {
    return absl::InvalidArgumentError("spawn: empty program path or argv");
  }
  FileDescriptor out_r, out_w, err_r, err_w, fail_r, fail_w, in_r, in_w;
  if (absl::Status s = MakePipe(out_r, out_w); !s.ok()) return s;
  if (absl::Status s = MakePipe(err_r, err_w); !s.ok()) return s;
  if (absl::Status s = MakePipe(fail_r, fail_w); !s.ok()) return s;
  if (request.stdin_pipe) {
    // A stream socket pair rather than a pipe: the child reads it as any
    // stdin, and the worker's sends can refuse to block or to raise
    // SIGPIPE (WriteStdin).
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
      return absl::InternalError(absl::StrCat("socketpair: ", strerror(errno)));
    }
    in_r = FileDescriptor(fds[0]);
    in_w = FileDescriptor(fds[1]);
    shutdown(in_r.get(), SHUT_WR);  // the child only reads
  } else {
    in_r = FileDescriptor(open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!in_r.valid()) {
      return absl::InternalError(
          absl::StrCat("open /dev/null: ", strerror(errno)));
    }
  }
  // Everything the child touches is prepared before fork: after it, the
  // child may only make async-signal-safe calls.
  std::vector<char*> argv = CStrings(request.argv);
  std::vector<char*> envp = CStrings(request.env);
  const pid_t parent = getpid();

  const pid_t pid = fork();
  if (pid < 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("fork: ", strerror(errno)));
  }
  if (pid == 0) {
    ExecChild(parent, in_r.get(), out_w.get(), err_w.get(), fail_w.get(),
              request.path.c_str(), request.cwd.c_str(), argv.data(),
              envp.data());
  }
  // Also set the group here so signalling it right away cannot race.
  setpgid(pid, pid);
  out_w.Reset();
  err_w.Reset();
  fail_w.Reset();
  in_r.Reset();
  FileDescriptor pid_fd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));

  ExecFailure failure{0, 0};
  ssize_t n;
  do {
    n = read(fail_r.get(), &failure, sizeof(failure));
  } while (n < 0 && errno == EINTR);
  auto child =
      std::make_unique<ChildProcess>(pid, std::move(out_r), std::move(err_r),
                                     std::move(pid_fd), std::move(in_w));
  if (n == 0) return child;  // exec succeeded: the pipe closed on exec

  child->Wait();
  if (n != static_cast<ssize_t>(sizeof(failure))) {
    return absl::InternalError(absl::StrCat("cannot start ", request.path,
                                            ": child failed before exec"));
  }
  if (failure.step == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot enter directory ", request.cwd, ": ", strerror(failure.error)));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "cannot execute ", request.path, ": ", strerror(failure.error)));
}

std::vector<std::string> EnvironmentWith(
    const std::vector<std::string>& overrides) {
  auto key_of = [](const std::string& kv) {
    return kv.substr(0, kv.find('='));
  };
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv(*e);
    bool replaced = false;
    for (const std::string& o : overrides) {
      if (key_of(o) == key_of(kv)) replaced = true;
    }
    if (!replaced) env.push_back(std::move(kv));
  }
  env.insert(env.end(), overrides.begin(), overrides.end());
  return env;
}

}  // namespace trainyard::worker
