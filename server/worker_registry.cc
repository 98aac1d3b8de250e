#include "server/worker_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/proto_time.h"
#include "common/status_macros.h"

namespace trainyard::server {

WorkerRegistry::WorkerRegistry(Clock* clock, absl::Duration lease)
    : clock_(clock), lease_(lease) {}

void WorkerRegistry::Settle(Entry& e) {
  auto drain = drains_.find(e.status.id);
  if (drain == drains_.end()) {
    e.status.drain.reset();
  } else {
    e.status.drain = drain->second;
  }
  if (e.status.state == v1::WORKER_LOST) {
    e.status.schedulable = false;
    return;
  }
  const bool draining = e.shutting_down || e.status.drain.has_value();
  e.status.state = draining ? v1::WORKER_DRAINING : v1::WORKER_READY;
  e.status.schedulable = e.status.connected && e.reattached && !draining;
}

void WorkerRegistry::AddRecovered(const std::string& worker_id,
                                  v1::WorkerHello hello, bool lost,
                                  absl::Time last_heard) {
  absl::MutexLock lock(&mu_);
  if (workers_.contains(worker_id)) return;
  Entry& e = workers_[worker_id];
  e.status.id = worker_id;
  e.status.hello = std::move(hello);
  e.last_heard = last_heard;
  if (lost) {
    e.status.state = v1::WORKER_LOST;
    return;
  }
  e.status.state = v1::WORKER_READY;
  e.status.lease_deadline = clock_->Now() + lease_;
  Settle(e);
}

absl::StatusOr<int64_t> WorkerRegistry::Attach(
    const v1::WorkerHello& hello, std::shared_ptr<WorkerLink> link) {
  std::shared_ptr<WorkerLink> old;
  int64_t session;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    if (auto it = workers_.find(hello.worker_id()); it != workers_.end()) {
      const WorkerStatus& current = it->second.status;
      const std::string& instance = current.hello.instance_id();
      if (current.connected && !instance.empty() &&
          instance != hello.instance_id()) {
        return absl::AlreadyExistsError(absl::StrCat(
            "worker id ", hello.worker_id(),
            " is in use by another worker process (on ",
            current.hello.hostname(), ", connected since ",
            absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", current.connect_time,
                             absl::UTCTimeZone()),
            "); give each worker its own --name and --work-dir"));
      }
    }
    Entry& e = workers_[hello.worker_id()];
    old = std::move(e.link);
    e.link = std::move(link);
    e.session = session = next_session_++;
    e.status.id = hello.worker_id();
    e.status.hello = hello;
    e.status.device_figures.clear();  // from the old session's devices
    e.status.state = v1::WORKER_READY;
    e.status.connected = true;
    e.reattached = false;
    e.shutting_down = false;
    e.status.connect_time = now;
    e.status.last_heartbeat = now;
    e.status.lease_deadline = now + lease_;
    e.last_heard = now;
    e.ended.clear();
    for (const v1::RunningJobRef& ref : hello.running()) {
      if (ref.has_exit_time()) {
        e.ended[{ref.job_id(), ref.attempt()}] = FromProtoTime(ref.exit_time());
      }
    }
    Settle(e);
  }
  if (old) {
    old->Close(absl::AbortedError("replaced by a newer connection"));
  }
  return session;
}

void WorkerRegistry::MarkReady(const std::string& worker_id, int64_t session) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || it->second.session != session) return;
  it->second.reattached = true;
  Settle(it->second);
}

void WorkerRegistry::MarkDraining(const std::string& worker_id,
                                  int64_t session) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || it->second.session != session ||
      it->second.status.state == v1::WORKER_LOST) {
    return;
  }
  it->second.shutting_down = true;
  Settle(it->second);
}

void WorkerRegistry::SetDrain(const std::string& worker_id,
                              std::optional<v1::WorkerDrain> drain) {
  absl::MutexLock lock(&mu_);
  if (drain) {
    drains_[worker_id] = *std::move(drain);
  } else {
    drains_.erase(worker_id);
  }
  auto it = workers_.find(worker_id);
  if (it != workers_.end()) Settle(it->second);
}

bool WorkerRegistry::Renew(const std::string& worker_id, int64_t session) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || it->second.session != session ||
      it->second.status.state == v1::WORKER_LOST) {
    return false;
  }
  const absl::Time now = clock_->Now();
  it->second.status.last_heartbeat = now;
  it->second.status.lease_deadline = now + lease_;
  it->second.last_heard = now;
  return true;
}

absl::Time WorkerRegistry::HeldUntil(const std::string& worker_id,
                                     const std::string& job_id,
                                     int32_t attempt) const {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return now;
  const Entry& e = it->second;
  absl::Time until = e.last_heard == absl::InfinitePast()
                         ? now
                         : std::min(now, e.last_heard + lease_);
  if (auto ended = e.ended.find({job_id, attempt}); ended != e.ended.end()) {
    until = std::min(until, ended->second);
  }
  return until;
}

void WorkerRegistry::RecordDeviceFigures(
    const std::string& worker_id, int64_t session,
    const google::protobuf::RepeatedPtrField<v1::Device>& figures) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || it->second.session != session) return;
  WorkerStatus& status = it->second.status;
  status.device_figures.clear();
  for (const v1::Device& f : figures) {
    for (const v1::Device& d : status.hello.devices()) {
      if (d.index() == f.index()) status.device_figures[f.index()] = f;
    }
  }
}

bool WorkerRegistry::Detach(const std::string& worker_id, int64_t session) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || it->second.session != session) return false;
  it->second.link.reset();
  it->second.status.connected = false;
  Settle(it->second);
  return true;
}

std::vector<std::string> WorkerRegistry::ExpireLeases() {
  std::vector<std::string> lost, left;
  std::vector<std::shared_ptr<WorkerLink>> to_close;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    for (auto& [id, e] : workers_) {
      if (e.status.state == v1::WORKER_LOST || now < e.status.lease_deadline) {
        continue;
      }
      // A worker that said it was shutting down and then closed its stream
      // left on purpose: it is forgotten, not lost (a job it still held is
      // given back all the same: its worker is unknown). Only once its
      // lease has run out, so no job of it can still be running.
      if (e.shutting_down && !e.status.connected) {
        left.push_back(id);
        continue;
      }
      e.status.state = v1::WORKER_LOST;
      e.status.connected = false;
      e.status.schedulable = false;
      if (e.link) to_close.push_back(std::move(e.link));
      e.link.reset();
      lost.push_back(id);
    }
    for (const std::string& id : left) workers_.erase(id);
  }
  for (auto& link : to_close) {
    link->Close(absl::UnavailableError(
        "the worker's lease expired; it was declared lost"));
  }
  for (const std::string& id : left) {
    YARD_LOG(INFO) << "worker " << id << " left: it shut down";
  }
  for (const std::string& id : lost) {
    YARD_LOG(WARNING) << "worker " << id << " lost: no heartbeat within "
                      << absl::FormatDuration(lease_);
  }
  return lost;
}

absl::Status UnknownWorkerError(const std::string& worker_id) {
  return absl::NotFoundError(
      absl::StrCat("no worker '", worker_id,
                   "' is known to this server (`yard workers` lists them)"));
}

absl::Status WorkerRegistry::Forgettable(const std::string& worker_id) const {
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) {
    return drains_.contains(worker_id) ? absl::OkStatus()
                                       : UnknownWorkerError(worker_id);
  }
  const WorkerStatus& w = it->second.status;
  if (w.state == v1::WORKER_LOST) return absl::OkStatus();
  const absl::Duration left = w.lease_deadline - clock_->Now();
  return absl::FailedPreconditionError(absl::StrCat(
      "worker '", worker_id, "' is not lost (",
      w.connected ? "connected"
      : left > absl::ZeroDuration()
          ? absl::StrCat(
                "declared lost if not back within ",
                absl::FormatDuration(absl::Ceil(left, absl::Seconds(1))))
          : "its lease ran out: it is declared lost at the next scheduling "
            "pass",
      "): only a lost worker can be forgotten; a worker that shuts down "
      "leaves by itself"));
}

absl::Status WorkerRegistry::CheckForgettable(
    const std::string& worker_id) const {
  absl::MutexLock lock(&mu_);
  return Forgettable(worker_id);
}

absl::Status WorkerRegistry::Forget(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(Forgettable(worker_id));
  workers_.erase(worker_id);
  drains_.erase(worker_id);
  return absl::OkStatus();
}

bool WorkerRegistry::Send(const std::string& worker_id,
                          const v1::ServerMessage& message,
                          bool require_ready) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || !it->second.link) return false;
  if (require_ready && !it->second.status.schedulable) return false;
  return it->second.link->Send(message);
}

std::vector<WorkerStatus> WorkerRegistry::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerStatus> out;
  out.reserve(workers_.size());
  for (const auto& [id, e] : workers_) out.push_back(e.status);
  return out;
}

std::optional<WorkerStatus> WorkerRegistry::Find(
    const std::string& worker_id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return std::nullopt;
  return it->second.status;
}

bool WorkerRegistry::Knows(const std::string& worker_id) const {
  absl::MutexLock lock(&mu_);
  return workers_.contains(worker_id) || drains_.contains(worker_id);
}

std::optional<absl::Time> WorkerRegistry::NextLeaseDeadline() const {
  absl::MutexLock lock(&mu_);
  std::optional<absl::Time> next;
  for (const auto& [id, e] : workers_) {
    if (e.status.state == v1::WORKER_LOST) continue;
    if (!next || e.status.lease_deadline < *next) {
      next = e.status.lease_deadline;
    }
  }
  return next;
}

void WorkerRegistry::CloseAll(const absl::Status& status) {
  std::vector<std::shared_ptr<WorkerLink>> links;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, e] : workers_) {
      if (e.link) links.push_back(e.link);
    }
  }
  for (auto& link : links) link->Close(status);
}

}  // namespace trainyard::server
