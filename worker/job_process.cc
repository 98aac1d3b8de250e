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
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/proto_time.h"

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
      wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  control_.lease_deadline = launch_.lease_deadline;
}

std::string JobProcess::LeaseLine(absl::Time deadline, absl::Time now) {
  if (deadline == absl::InfiniteFuture()) return "-1\n";
  return absl::StrCat(
      std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - now)), "\n");
}

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
  if (absl::Status spawned = SpawnRanks(); !spawned.ok()) {
    const std::string error(spawned.message());
    YARD_LOG(WARNING) << "job " << launch_.job_id << " attempt "
                      << launch_.attempt << " did not start: " << error;
    pending_log_ = error + "\n";
    FlushLog();
    ReportExit(ExitStatus{kExecFailedExitCode, 0}, error, absl::Now(),
               /*own_end=*/false);
    return;
  }
  std::vector<std::string> pids;
  for (const Rank& r : ranks_) pids.push_back(std::to_string(r.child->pid()));
  YARD_LOG(INFO) << "job " << launch_.job_id << " attempt " << launch_.attempt
                 << " started as pid " << absl::StrJoin(pids, ", ");
  trainyard::v1::JobUpdate started;
  started.mutable_started()->set_pid(ranks_[0].child->pid());
  Report(std::move(started));

  Pump();
  // The attempt ended with its last process, not when its pipes were
  // drained or its exit reached the server.
  absl::Time exited = absl::InfinitePast();
  for (Rank& r : ranks_) {
    if (!r.exit.has_value()) {
      r.exit = r.child->Wait();
      r.exit_time = absl::Now();
    }
    exited = std::max(exited, r.exit_time);
    r.stdout_lines.Flush([&](std::string_view l) { OnStdoutLine(r, l); });
    r.stderr_lines.Flush([&](std::string_view l) { OnStderrLine(r, l); });
  }
  FlushLog();
  auto [status, error] = GangExit();
  YARD_LOG(INFO) << "job " << launch_.job_id << " attempt " << launch_.attempt
                 << " " << DescribeExit(status);
  // A rank that died of its own before a stop reached it (it may be
  // noticed only after that stop came) was not stopped as asked.
  const Rank* speaker = Speaker();
  ReportExit(status, error, exited,
             /*own_end=*/speaker != nullptr && !speaker->stop_reached_it);
}

absl::Status JobProcess::SpawnRanks() {
  if (launch_.ranks.empty()) {
    return absl::InvalidArgumentError("the launch has no process to run");
  }
  ranks_.reserve(launch_.ranks.size());
  for (size_t i = 0; i < launch_.ranks.size(); ++i) {
    auto child = SpawnChild(launch_.ranks[i]);
    if (!child.ok()) {
      SignalAll(SIGKILL);
      for (Rank& r : ranks_) r.exit = r.child->Wait();
      ranks_.clear();
      return launch_.ranks.size() == 1
                 ? child.status()
                 : absl::Status(child.status().code(),
                                absl::StrCat("rank ", i, ": ",
                                             child.status().message()));
    }
    Rank& r = ranks_.emplace_back();
    r.index = launch_.first_rank + static_cast<int>(i);
    r.child = *std::move(child);
  }
  return absl::OkStatus();
}

void JobProcess::ReportExit(const ExitStatus& status, const std::string& error,
                            absl::Time exited_at, bool own_end) {
  trainyard::v1::JobUpdate update;
  trainyard::v1::JobExited* exited = update.mutable_exited();
  exited->set_exit_code(status.exit_code);
  exited->set_signal(status.signal);
  exited->set_error(error);
  *exited->mutable_exit_time() = ToProtoTime(exited_at);
  {
    absl::MutexLock lock(&mu_);
    exited->set_cancelled(!own_end && control_.cancelled);
    exited->set_worker_shutdown(!own_end && control_.shutdown);
    exited->set_lost_server(control_.lost_server);
  }
  Report(std::move(update));
}

void JobProcess::Pump() {
  absl::Time drain_until = absl::InfiniteFuture();
  std::vector<pollfd> fds;
  std::vector<Rank*> owners;  // the rank of each fd; null for the wake fd
  while (true) {
    absl::Time next = std::min(ApplyControl(), drain_until);
    fds.clear();
    owners.clear();
    // Without a pidfd or an eventfd the loop must look on a timer instead.
    bool timer = !wake_fd_.valid();
    for (Rank& r : ranks_) {
      for (int fd : {r.child->stdout_fd(), r.child->stderr_fd()}) {
        if (fd < 0) continue;
        fds.push_back({fd, POLLIN, 0});
        owners.push_back(&r);
      }
      if (r.exit.has_value()) continue;
      if (r.child->pid_fd() < 0) {
        timer = true;
        continue;
      }
      fds.push_back({r.child->pid_fd(), POLLIN, 0});
      owners.push_back(&r);
    }
    if (wake_fd_.valid()) {
      fds.push_back({wake_fd_.get(), POLLIN, 0});
      owners.push_back(nullptr);
    }
    if (timer) next = std::min(next, absl::Now() + kExitPollPeriod);
    if (poll(fds.data(), fds.size(), PollTimeoutMs(next)) < 0 &&
        errno != EINTR) {
      YARD_LOG(ERROR) << "job " << launch_.job_id
                      << ": poll: " << strerror(errno);
      SignalAll(SIGKILL);
      return;
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Rank* r = owners[i];
      if (r == nullptr) {
        uint64_t count;
        ssize_t unused = read(wake_fd_.get(), &count, sizeof(count));
        (void)unused;
      } else if (fds[i].fd == r->child->stdout_fd()) {
        if (!ReadFrom(*r, fds[i].fd, true)) r->child->CloseStdout();
      } else if (fds[i].fd == r->child->stderr_fd()) {
        if (!ReadFrom(*r, fds[i].fd, false)) r->child->CloseStderr();
      }
    }
    bool all_exited = true, all_closed = true;
    for (Rank& r : ranks_) {
      if (!r.exit.has_value() && r.child->HasExited()) OnRankExit(r);
      all_exited = all_exited && r.exit.has_value();
      all_closed =
          all_closed && r.child->stdout_fd() < 0 && r.child->stderr_fd() < 0;
    }
    if (!all_exited) continue;
    if (all_closed) return;
    // After the last exit, leftovers may keep the pipes open a while.
    if (drain_until == absl::InfiniteFuture()) {
      drain_until = absl::Now() + kDrainTimeout;
    }
    if (absl::Now() >= drain_until) return;
  }
}

void JobProcess::OnRankExit(Rank& rank) {
  // The rank is over: whatever it left in its group goes with it. Signal
  // before reaping, while the group id cannot have been reused.
  rank.child->SignalGroup(SIGKILL);
  rank.exit = rank.child->Wait();
  rank.exit_time = absl::Now();
  const bool stopped_as_asked =
      rank.exit->signal == 0 && rank.exit->exit_code == kInterruptedExitCode;
  if (rank.exit->ok() || stopped_as_asked || first_failure_ >= 0) return;
  first_failure_ = static_cast<int>(&rank - ranks_.data());
  if (ranks_.size() == 1) return;
  YARD_LOG(WARNING) << "job " << launch_.job_id << " attempt "
                    << launch_.attempt << ": rank " << rank.index << " "
                    << DescribeExit(*rank.exit) << "; stopping the other ranks";
  absl::StrAppend(&pending_log_, "[worker] rank ", rank.index, " ",
                  DescribeExit(*rank.exit), "; stopping the other ranks\n");
  SignalAll(SIGKILL);
}

const JobProcess::Rank* JobProcess::Speaker() const {
  if (first_failure_ >= 0) return &ranks_[first_failure_];
  for (const Rank& r : ranks_) {
    if (!r.exit->ok()) return &r;
  }
  return nullptr;
}

std::pair<ExitStatus, std::string> JobProcess::GangExit() const {
  // The first failure speaks for the gang; else the first rank that did
  // not simply finish (all stopped as asked); else all finished.
  const Rank* speaker = Speaker();
  if (speaker == nullptr) return {ExitStatus{}, ""};
  std::string error = DescribeExit(*speaker->exit);
  if (ranks_.size() > 1 || launch_.first_rank > 0 || launch_.spread) {
    error = absl::StrCat("rank ", speaker->index, " ", error);
  }
  if (!speaker->stderr_tail.empty()) {
    absl::StrAppend(&error, "; stderr tail:\n", speaker->stderr_tail.Text());
  }
  return {*speaker->exit, error};
}

absl::Time JobProcess::ApplyControl() {
  absl::MutexLock lock(&mu_);
  Control& c = control_;
  if (c.kill && !c.kill_sent) {
    SignalAll(SIGKILL, /*asked=*/true);
    c.kill_sent = true;
  }
  if (c.terminate && !c.term_sent && !c.kill_sent) {
    SignalAll(SIGTERM, /*asked=*/true);
    c.term_sent = true;
  }
  if (!c.lease_told && !c.kill_sent) {
    const std::string line = LeaseLine(c.lease_deadline, absl::Now());
    for (Rank& r : ranks_) {
      if (!r.exit.has_value()) r.child->WriteStdin(line);
    }
    c.lease_told = true;
  }
  if (!c.kill_sent && absl::Now() >= c.kill_at) {
    YARD_LOG(INFO) << "job " << launch_.job_id << " attempt " << launch_.attempt
                   << " still running after its grace period: SIGKILL";
    SignalAll(SIGKILL, /*asked=*/true);
    c.kill_sent = true;
  }
  return c.kill_sent ? absl::InfiniteFuture() : c.kill_at;
}

void JobProcess::SignalAll(int sig, bool asked) {
  for (Rank& r : ranks_) {
    if (r.exit.has_value()) continue;
    // Dead but not yet reaped (its end not noticed yet): not stopped by us.
    if (asked && !r.child->HasExited()) r.stop_reached_it = true;
    r.child->SignalGroup(sig);
  }
}

bool JobProcess::ReadFrom(Rank& rank, int fd, bool is_stdout) {
  char buf[kReadSize];
  ssize_t n;
  do {
    n = read(fd, buf, sizeof(buf));
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return n < 0 && errno == EAGAIN;
  const std::string_view data(buf, static_cast<size_t>(n));
  if (is_stdout) {
    rank.stdout_lines.Feed(data,
                           [&](std::string_view l) { OnStdoutLine(rank, l); });
  } else {
    rank.stderr_lines.Feed(data,
                           [&](std::string_view l) { OnStderrLine(rank, l); });
  }
  FlushLog();
  return true;
}

void JobProcess::OnStdoutLine(Rank& rank, std::string_view line) {
  if (rank.index == 0) {
    if (auto event = ParseTrainerEventLine(line)) {
      trainyard::v1::JobUpdate update;
      *update.mutable_trainer() = *std::move(event);
      Report(std::move(update));
      return;
    }
  } else {
    absl::StrAppend(&pending_log_, "[rank ", rank.index, "] ");
  }
  pending_log_.append(line).append("\n");
}

void JobProcess::OnStderrLine(Rank& rank, std::string_view line) {
  rank.stderr_tail.AddLine(line);
  if (rank.index > 0)
    absl::StrAppend(&pending_log_, "[rank ", rank.index, "] ");
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

void JobProcess::Terminate(absl::Duration grace, StopFor why) {
  {
    absl::MutexLock lock(&mu_);
    control_.terminate = true;
    control_.cancelled = control_.cancelled || why == StopFor::kCancel;
    control_.shutdown = control_.shutdown || why == StopFor::kShutdown;
    control_.kill_at = std::min(control_.kill_at, absl::Now() + grace);
  }
  Wake();
}

void JobProcess::Kill(StopFor why) {
  {
    absl::MutexLock lock(&mu_);
    control_.kill = true;
    control_.cancelled = control_.cancelled || why == StopFor::kCancel;
    control_.shutdown = control_.shutdown || why == StopFor::kShutdown;
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

void JobProcess::RenewLease(absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    control_.lease_deadline = deadline;
    control_.lease_told = false;
  }
  Wake();
}

void JobProcess::Wake() {
  const uint64_t one = 1;
  ssize_t unused = write(wake_fd_.get(), &one, sizeof(one));
  (void)unused;
}

}  // namespace trainyard::worker
