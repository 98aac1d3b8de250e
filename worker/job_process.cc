#include "worker/job_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace trainyard::worker {
namespace {

// Without a pidfd, how often the loop looks whether the child exited.
constexpr absl::Duration kExitPollPeriod = absl::Milliseconds(100);
// After the child exits, how long leftovers may keep its pipes open.
constexpr absl::Duration kDrainTimeout = absl::Seconds(2);
constexpr size_t kReadSize = 64 * 1024;

int PollTimeoutMs(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return -1;
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(
      absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))),
      60'000));
}

}  // namespace

JobProcess::JobProcess(JobLaunch launch, ReportFn report)
    : launch_(std::move(launch)),
      report_(std::move(report)),
      wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

void JobProcess::Report(trainyard::v1::JobUpdate update) {
  update.set_job_id(launch_.job_id);
  update.set_attempt(launch_.attempt);
  report_(std::move(update));
}

void JobProcess::Run() {
  log_fd_ =
      FileDescriptor(open(launch_.log_path.c_str(),
                          O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (!log_fd_.valid()) {
    YARD_LOG(WARNING) << "job " << launch_.job_id << ": cannot open log "
                      << launch_.log_path << ": " << strerror(errno);
  }
  auto child = SpawnChild(launch_.spawn);
  if (!child.ok()) {
    const std::string error(child.status().message());
    YARD_LOG(WARNING) << "job " << launch_.job_id << " attempt "
                      << launch_.attempt << " did not start: " << error;
    pending_log_ = error + "\n";
    FlushLog();
    ReportExit(ExitStatus{kExecFailedExitCode, 0}, error);
    return;
  }
  YARD_LOG(INFO) << "job " << launch_.job_id << " attempt " << launch_.attempt
                 << " started as pid " << (*child)->pid();
  trainyard::v1::JobUpdate started;
  started.mutable_started()->set_pid((*child)->pid());
  Report(std::move(started));

  Pump(**child);
  const ExitStatus status = (*child)->Wait();
  stdout_lines_.Flush([this](std::string_view l) { OnStdoutLine(l); });
  stderr_lines_.Flush([this](std::string_view l) { OnStderrLine(l); });
  FlushLog();
  YARD_LOG(INFO) << "job " << launch_.job_id << " attempt " << launch_.attempt
                 << " " << DescribeExit(status);
  std::string error;
  if (!status.ok()) {
    error = DescribeExit(status);
    if (!stderr_tail_.empty()) {
      absl::StrAppend(&error, "; stderr tail:\n", stderr_tail_.Text());
    }
  }
  ReportExit(status, error);
}

void JobProcess::ReportExit(const ExitStatus& status,
                            const std::string& error) {
  trainyard::v1::JobUpdate update;
  trainyard::v1::JobExited* exited = update.mutable_exited();
  exited->set_exit_code(status.exit_code);
  exited->set_signal(status.signal);
  exited->set_error(error);
  {
    absl::MutexLock lock(&mu_);
    exited->set_cancelled(control_.cancelled);
    exited->set_lost_server(control_.lost_server);
  }
  Report(std::move(update));
}

void JobProcess::Pump(ChildProcess& child) {
  bool exited = false;
  absl::Time drain_until = absl::InfiniteFuture();
  while (true) {
    absl::Time next = std::min(ApplyControl(child), drain_until);
    // Without a pidfd or an eventfd the loop must look on a timer instead.
    if ((child.pid_fd() < 0 && !exited) || !wake_fd_.valid()) {
      next = std::min(next, absl::Now() + kExitPollPeriod);
    }
    pollfd fds[4];
    nfds_t n = 0;
    const int out_fd = child.stdout_fd(), err_fd = child.stderr_fd();
    if (out_fd >= 0) fds[n++] = {out_fd, POLLIN, 0};
    if (err_fd >= 0) fds[n++] = {err_fd, POLLIN, 0};
    if (wake_fd_.valid()) fds[n++] = {wake_fd_.get(), POLLIN, 0};
    if (child.pid_fd() >= 0 && !exited) fds[n++] = {child.pid_fd(), POLLIN, 0};
    if (poll(fds, n, PollTimeoutMs(next)) < 0 && errno != EINTR) {
      YARD_LOG(ERROR) << "job " << launch_.job_id
                      << ": poll: " << strerror(errno);
      child.SignalGroup(SIGKILL);
      return;
    }
    for (nfds_t i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      if (fds[i].fd == out_fd && !ReadFrom(out_fd, true)) child.CloseStdout();
      if (fds[i].fd == err_fd && !ReadFrom(err_fd, false)) child.CloseStderr();
      if (fds[i].fd == wake_fd_.get()) {
        uint64_t count;
        ssize_t unused = read(wake_fd_.get(), &count, sizeof(count));
        (void)unused;
      }
    }
    if (!exited && child.HasExited()) {
      exited = true;
      // The job is over: whatever it left in its group goes with it.
      child.SignalGroup(SIGKILL);
      drain_until = absl::Now() + kDrainTimeout;
    }
    if (exited && child.stdout_fd() < 0 && child.stderr_fd() < 0) return;
    if (exited && absl::Now() >= drain_until) return;
  }
}

absl::Time JobProcess::ApplyControl(ChildProcess& child) {
  absl::MutexLock lock(&mu_);
  Control& c = control_;
  if (c.kill && !c.kill_sent) {
    child.SignalGroup(SIGKILL);
    c.kill_sent = true;
  }
  if (c.terminate && !c.term_sent && !c.kill_sent) {
    child.SignalGroup(SIGTERM);
    c.term_sent = true;
  }
  if (!c.kill_sent && absl::Now() >= c.kill_at) {
    YARD_LOG(INFO) << "job " << launch_.job_id << " attempt " << launch_.attempt
                   << " still running after its grace period: SIGKILL";
    child.SignalGroup(SIGKILL);
    c.kill_sent = true;
  }
  return c.kill_sent ? absl::InfiniteFuture() : c.kill_at;
}

bool JobProcess::ReadFrom(int fd, bool is_stdout) {
  char buf[kReadSize];
  ssize_t n;
  do {
    n = read(fd, buf, sizeof(buf));
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return n < 0 && errno == EAGAIN;
  const std::string_view data(buf, static_cast<size_t>(n));
  if (is_stdout) {
    stdout_lines_.Feed(data, [this](std::string_view l) { OnStdoutLine(l); });
  } else {
    stderr_lines_.Feed(data, [this](std::string_view l) { OnStderrLine(l); });
  }
  FlushLog();
  return true;
}

void JobProcess::OnStdoutLine(std::string_view line) {
  if (auto event = ParseTrainerEventLine(line)) {
    trainyard::v1::JobUpdate update;
    *update.mutable_trainer() = *std::move(event);
    Report(std::move(update));
    return;
  }
  pending_log_.append(line).append("\n");
}

void JobProcess::OnStderrLine(std::string_view line) {
  stderr_tail_.AddLine(line);
  pending_log_.append(line).append("\n");
}

void JobProcess::FlushLog() {
  if (pending_log_.empty()) return;
  if (log_fd_.valid() && !log_write_failed_) {
    std::string_view rest = pending_log_;
    while (!rest.empty()) {
      const ssize_t n = write(log_fd_.get(), rest.data(), rest.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        YARD_LOG(WARNING) << "job " << launch_.job_id << ": writing "
                          << launch_.log_path << ": " << strerror(errno);
        log_write_failed_ = true;
        break;
      }
      rest.remove_prefix(static_cast<size_t>(n));
    }
  }
  trainyard::v1::JobUpdate update;
  update.set_log(std::move(pending_log_));
  pending_log_.clear();
  Report(std::move(update));
}

void JobProcess::Terminate(absl::Duration grace, bool cancelled) {
  {
    absl::MutexLock lock(&mu_);
    control_.terminate = true;
    control_.cancelled = control_.cancelled || cancelled;
    control_.kill_at = std::min(control_.kill_at, absl::Now() + grace);
  }
  Wake();
}

void JobProcess::Kill(bool cancelled) {
  {
    absl::MutexLock lock(&mu_);
    control_.kill = true;
    control_.cancelled = control_.cancelled || cancelled;
  }
  Wake();
}

void JobProcess::Abandon() {
  {
    absl::MutexLock lock(&mu_);
    control_.kill = true;
    control_.lost_server = true;
  }
  Wake();
}

void JobProcess::Wake() {
  const uint64_t one = 1;
  ssize_t unused = write(wake_fd_.get(), &one, sizeof(one));
  (void)unused;
}

}  // namespace trainyard::worker
