#include "tests/process.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace trainyard::itest {
namespace {

// The environment for a child: ours with `overrides` applied.
std::vector<std::string> ChildEnvironment(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view entry(*e);
    size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    env[std::string(entry.substr(0, eq))] = std::string(entry.substr(eq + 1));
  }
  for (const auto& [k, v] : overrides) env[k] = v;
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(absl::StrCat(k, "=", v));
  return out;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Runs in the forked child: only async-signal-safe calls until execve.
[[noreturn]] void ExecChild(const char* path, char* const* argv,
                            char* const* envp, const char* cwd,
                            const char* out_path, const char* err_path,
                            pid_t parent) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // the test died before prctl
  int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (out < 0 || err < 0 || in < 0) _exit(127);
  if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) _exit(127);
  syscall(SYS_close_range, 3U, ~0U, 0U);
  // Signals blocked or ignored by the test's threads must not leak into
  // the daemons (gRPC may block some).
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  signal(SIGPIPE, SIG_DFL);
  if (cwd[0] != '\0' && chdir(cwd) != 0) {
    static const char kMsg[] = "ChildProcess: chdir failed\n";
    (void)!write(2, kMsg, sizeof(kMsg) - 1);
    _exit(127);
  }
  execve(path, argv, envp);
  static const char kMsg[] = "ChildProcess: execve failed\n";
  (void)!write(2, kMsg, sizeof(kMsg) - 1);
  _exit(127);
}

ExitStatus FromWaitStatus(int wstatus) {
  ExitStatus s;
  if (WIFEXITED(wstatus)) s.code = WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) s.signal = WTERMSIG(wstatus);
  return s;
}

}  // namespace

std::string ExitStatus::ToString() const {
  if (code.has_value()) return absl::StrCat("exit ", *code);
  if (signal.has_value()) {
    return absl::StrCat("signal ", *signal, " (", strsignal(*signal), ")");
  }
  return "still running";
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(
    ProcessOptions options) {
  if (options.argv.empty()) {
    return absl::InvalidArgumentError("ChildProcess: empty argv");
  }
  const std::string& path = options.argv[0];
  if (access(path.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat(
        "program ", path, " is missing or not executable (", strerror(errno),
        "); build it first (cmake --build build)"));
  }
  std::vector<std::string> args = options.argv;
  std::vector<std::string> env = ChildEnvironment(options.env);
  std::vector<char*> argv = CStrings(args);
  std::vector<char*> envp = CStrings(env);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  }
  if (pid == 0) {
    ExecChild(path.c_str(), argv.data(), envp.data(), options.cwd.c_str(),
              options.stdout_path.c_str(), options.stderr_path.c_str(), parent);
  }
  // Also from the parent, so a signal to the group right after Start
  // cannot race the child's own setpgid.
  setpgid(pid, pid);
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  return std::unique_ptr<ChildProcess>(
      new ChildProcess(std::move(options), pid, pidfd));
}

ChildProcess::ChildProcess(ProcessOptions options, pid_t pid, int pidfd)
    : options_(std::move(options)), pid_(pid), pidfd_(pidfd) {}

ChildProcess::~ChildProcess() {
  if (!exit_.has_value()) Stop(absl::Seconds(5));
  if (pidfd_ >= 0) close(pidfd_);
}

bool ChildProcess::Signal(int sig) {
  if (exit_.has_value()) return false;
  return kill(pid_, sig) == 0;
}

bool ChildProcess::SignalGroup(int sig) {
  if (exit_.has_value()) return false;
  return kill(-pid_, sig) == 0;
}

std::optional<ExitStatus> ChildProcess::WaitForExit(absl::Duration timeout) {
  if (exit_.has_value()) return exit_;
  absl::Time deadline = absl::Now() + timeout;
  absl::Duration backoff = absl::Milliseconds(2);
  while (true) {
    int wstatus = 0;
    pid_t r = waitpid(pid_, &wstatus, WNOHANG);
    if (r == pid_) {
      exit_ = FromWaitStatus(wstatus);
      return exit_;
    }
    if (r < 0 && errno != EINTR) {
      // Not our child any more (cannot happen unless reaped elsewhere).
      exit_ = ExitStatus{};
      return exit_;
    }
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return std::nullopt;
    if (pidfd_ >= 0) {
      struct pollfd p = {pidfd_, POLLIN, 0};
      poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    } else {
      std::this_thread::sleep_for(
          absl::ToChronoNanoseconds(std::min(backoff, left)));
      backoff = std::min(backoff * 2, absl::Milliseconds(100));
    }
  }
}

bool ChildProcess::Running() {
  return !WaitForExit(absl::ZeroDuration()).has_value();
}

ExitStatus ChildProcess::Stop(absl::Duration grace) {
  if (exit_.has_value()) return *exit_;
  SignalGroup(SIGTERM);
  if (auto s = WaitForExit(grace); s.has_value()) {
    SignalGroup(SIGKILL);  // stragglers left in the group
    return *s;
  }
  SignalGroup(SIGKILL);
  auto s = WaitForExit(absl::Seconds(30));
  return s.value_or(ExitStatus{});
}

ExitStatus ChildProcess::Kill() {
  if (exit_.has_value()) return *exit_;
  Signal(SIGKILL);
  auto s = WaitForExit(absl::Seconds(30));
  return s.value_or(ExitStatus{});
}

std::string ChildProcess::Stdout() const {
  return ReadFileOrEmpty(options_.stdout_path);
}

std::string ChildProcess::Stderr() const {
  return ReadFileOrEmpty(options_.stderr_path);
}

std::string ChildProcess::OutputTail(int max_lines) const {
  return absl::StrCat("---- ", options_.stdout_path, " (tail)\n",
                      LastLines(Stdout(), max_lines), "---- ",
                      options_.stderr_path, " (tail)\n",
                      LastLines(Stderr(), max_lines));
}

std::string CommandResult::DebugString() const {
  return absl::StrCat(
      "command: ", command_line, "\nstatus: ", timed_out ? "TIMED OUT, " : "",
      status.ToString(), "\nstdout:\n", out, "\nstderr:\n", err);
}

CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::string& log_prefix, absl::Duration timeout,
                         const std::string& cwd) {
  CommandResult result;
  result.command_line = absl::StrJoin(argv, " ");
  ProcessOptions options;
  options.argv = argv;
  options.cwd = cwd;
  options.stdout_path = log_prefix + ".stdout";
  options.stderr_path = log_prefix + ".stderr";
  auto child = ChildProcess::Start(options);
  if (!child.ok()) {
    result.err = std::string(child.status().message());
    return result;
  }
  std::optional<ExitStatus> status = (*child)->WaitForExit(timeout);
  if (!status.has_value()) {
    result.timed_out = true;
    status = (*child)->Stop(absl::Seconds(2));
  }
  result.status = *status;
  result.out = (*child)->Stdout();
  result.err = (*child)->Stderr();
  return result;
}

std::vector<pid_t> ChildPidsOf(pid_t parent) {
  std::vector<pid_t> out;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return out;
  while (struct dirent* e = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    std::string stat = ReadFileOrEmpty(absl::StrCat("/proc/", pid, "/stat"));
    // "pid (comm) state ppid ...": comm may hold spaces, so parse after ')'.
    size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::vector<std::string> fields =
        absl::StrSplit(stat.substr(close + 2), ' ');
    int ppid = 0;
    if (fields.size() < 2 || !absl::SimpleAtoi(fields[1], &ppid)) continue;
    if (ppid == parent && fields[0] != "Z") out.push_back(pid);
  }
  closedir(proc);
  return out;
}

bool ProcessAlive(pid_t pid) {
  std::string stat = ReadFileOrEmpty(absl::StrCat("/proc/", pid, "/stat"));
  size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return false;
  return stat[close + 2] != 'Z' && stat[close + 2] != 'X';
}

std::string ProcessName(pid_t pid) {
  std::string comm = ReadFileOrEmpty(absl::StrCat("/proc/", pid, "/comm"));
  while (!comm.empty() && comm.back() == '\n') comm.pop_back();
  return comm;
}

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string LastLines(const std::string& text, int max_lines) {
  if (text.empty()) return "";
  size_t pos = text.size();
  if (text.back() == '\n') --pos;
  for (int n = 0; n < max_lines && pos > 0; ++n) {
    size_t nl = text.rfind('\n', pos - 1);
    if (nl == std::string::npos)
      return text.back() == '\n' ? text : text + "\n";
    pos = nl;
  }
  std::string tail = text.substr(pos == 0 ? 0 : pos + 1);
  if (tail.back() != '\n') tail += '\n';
  return tail;
}

}  // namespace trainyard::itest
