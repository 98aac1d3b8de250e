#include "worker/worker.h"

#include <random>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/log.h"

namespace trainyard::worker {

namespace {

// 16 random hex digits.
std::string NewInstanceId() {
  std::random_device random;
  return absl::StrFormat("%08x%08x", random(), random());
}

}  // namespace

Worker::Worker(WorkerConfig config)
    : config_(std::move(config)),
      instance_id_(config_.instance_id.empty() ? NewInstanceId()
                                               : config_.instance_id),
      link_(std::make_unique<ServerLink>(config_.link, this)),
      runner_(std::make_unique<JobRunner>(
          config_.runner,
          [this, link = link_.get()](trainyard::v1::JobUpdate u) {
            if (config_.observe_report) config_.observe_report(u);
            link->Report(std::move(u));
          })) {}

Worker::~Worker() {
  runner_->StopAccepting();
  // The link's threads call back into the runner: stop them first.
  link_->Shutdown(absl::ZeroDuration());
  runner_.reset();
}

void Worker::Start() { link_->Start(); }

void Worker::Shutdown(absl::Duration grace, absl::Duration flush_timeout) {
  runner_->StopAccepting();
  // Tell the server first, so that the jobs handed back below are not
  // offered to this worker again.
  link_->SetDraining(absl::Seconds(1));
  const std::vector<trainyard::v1::RunningJobRef> running = runner_->Running();
  YARD_LOG(INFO) << "shutting down: stopping " << running.size()
                 << " job(s), grace " << grace;
  runner_->TerminateAll(grace);
  // Each job SIGKILLs itself at the end of the grace period; the margin
  // covers reaping and the last output.
  if (!runner_->WaitIdle(absl::Now() + grace + absl::Seconds(5))) {
    runner_->KillAll();
    runner_->WaitIdle(absl::InfiniteFuture());
  }
  link_->Shutdown(flush_timeout);
}

void Worker::KillJobs() { runner_->KillAll(); }

trainyard::v1::WorkerHello Worker::Hello() {
  trainyard::v1::WorkerHello hello;
  hello.set_worker_id(config_.worker_id);
  hello.set_hostname(config_.hostname);
  hello.set_version(kWorkerVersion);
  hello.set_instance_id(instance_id_);
  for (const trainyard::v1::Device& d : config_.devices)
    *hello.add_devices() = d;
  hello.set_cpu_slots(config_.runner.cpu_slots);
  return hello;
}

std::vector<trainyard::v1::RunningJobRef> Worker::RunningJobs() {
  return runner_->Running();
}

std::vector<trainyard::v1::Device> Worker::DeviceFigures() {
  if (!config_.device_figures) return {};
  return config_.device_figures();
}

void Worker::OnConnectFailed(const absl::Status& status) {
  if ((absl::IsUnauthenticated(status) || absl::IsPermissionDenied(status)) &&
      config_.on_refused) {
    config_.on_refused(status);
  }
}

void Worker::OnLeaseExpired() {
  // The server re-queues these jobs when the lease runs out; another worker
  // may resume them from their checkpoints at once, so they stop now.
  const int stopped = runner_->AbandonAll();
  if (stopped > 0) {
    YARD_LOG(WARNING) << "stopped " << stopped
                      << " job(s): the server can no longer hear this worker";
  }
}

void Worker::OnLeaseRenewed(absl::Time deadline) {
  runner_->RenewLeases(deadline);
}

void Worker::OnServerMessage(const trainyard::v1::ServerMessage& message) {
  switch (message.msg_case()) {
    case trainyard::v1::ServerMessage::kAssignment:
      runner_->Start(message.assignment());
      return;
    case trainyard::v1::ServerMessage::kCancel: {
      const auto& c = message.cancel();
      if (!runner_->Cancel(c.job_id(), c.attempt(),
                           absl::Milliseconds(c.grace_ms()))) {
        YARD_LOG(INFO) << "ignoring cancel of job " << c.job_id() << " attempt "
                       << c.attempt() << ": not running here";
      }
      return;
    }
    case trainyard::v1::ServerMessage::kPreempt: {
      const auto& p = message.preempt();
      if (!runner_->Preempt(p.job_id(), p.attempt(),
                            absl::Milliseconds(p.grace_ms()))) {
        YARD_LOG(INFO) << "ignoring preemption of job " << p.job_id()
                       << " attempt " << p.attempt() << ": not running here";
      }
      return;
    }
    case trainyard::v1::ServerMessage::kStopAttempt: {
      const auto& s = message.stop_attempt();
      if (!runner_->Stop(s.job_id(), s.attempt())) {
        YARD_LOG(INFO) << "ignoring stop of job " << s.job_id() << " attempt "
                       << s.attempt() << ": not running here";
      }
      return;
    }
    default:
      YARD_LOG(WARNING) << "ignoring a server message of unknown kind "
                        << static_cast<int>(message.msg_case());
  }
}

}  // namespace trainyard::worker
