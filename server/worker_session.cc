#include "server/worker_session.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/field_errors.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "server/job_state.h"

namespace trainyard::server {
namespace {

bool IsIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}

bool Lists(const google::protobuf::RepeatedPtrField<v1::RunningJobRef>& refs,
           const std::string& job_id, int32_t attempt) {
  return std::any_of(refs.begin(), refs.end(), [&](const auto& r) {
    return r.job_id() == job_id && r.attempt() == attempt;
  });
}

}  // namespace

absl::Status CheckWorkerId(absl::string_view field, std::string_view id) {
  if (id.empty()) return InvalidFieldError(field, "required");
  if (static_cast<int32_t>(id.size()) > kMaxWorkerIdLength) {
    return InvalidFieldError(
        field, absl::StrCat("at most ", kMaxWorkerIdLength, " characters, got ",
                            id.size()));
  }
  if (!std::all_of(id.begin(), id.end(), IsIdChar)) {
    return InvalidFieldError(
        field,
        absl::StrCat("only characters of [A-Za-z0-9._-], got \"",
                     absl::CEscape(absl::string_view(id.data(), id.size())),
                     "\""));
  }
  return absl::OkStatus();
}

absl::Status ValidateHello(const v1::WorkerHello& hello,
                           const WorkerSessionOptions& options) {
  RETURN_IF_ERROR(CheckWorkerId("hello.worker_id", hello.worker_id()));
  if (hello.cpu_slots() < 0 || hello.cpu_slots() > options.max_cpu_slots) {
    return absl::InvalidArgumentError(
        absl::StrCat("hello.cpu_slots: must be in [0, ", options.max_cpu_slots,
                     "], got ", hello.cpu_slots()));
  }
  if (hello.devices_size() > options.max_devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("hello.devices: at most ", options.max_devices));
  }
  std::set<int32_t> indices;
  for (const v1::Device& d : hello.devices()) {
    if (d.index() < 0 || !indices.insert(d.index()).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hello.devices: index ", d.index(), " is negative or repeated"));
    }
    if (d.memory_bytes() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("hello.devices: device ", d.index(),
                       " has negative memory_bytes ", d.memory_bytes()));
    }
  }
  for (const v1::RunningJobRef& r : hello.running()) {
    if (r.job_id().empty() || r.attempt() < 1) {
      return absl::InvalidArgumentError(
          "hello.running: each entry needs a job_id and an attempt >= 1");
    }
  }
  return absl::OkStatus();
}

WorkerSession::WorkerSession(JobStore* store, WorkerRegistry* workers,
                             JobLifecycle* lifecycle,
                             std::shared_ptr<WorkerLink> link,
                             WorkerSessionOptions options,
                             std::function<void()> wake_scheduler)
    : store_(store),
      workers_(workers),
      lifecycle_(lifecycle),
      link_(std::move(link)),
      options_(options),
      wake_scheduler_(std::move(wake_scheduler)) {}

WorkerSession::~WorkerSession() { Close(); }

void WorkerSession::Close() {
  if (closed_) return;
  closed_ = true;
  {
    absl::MutexLock lock(&heard_mu_);
    heard_ = {};  // a message heard from now on renews nothing
  }
  if (session_ == 0) return;
  const bool current = workers_->Detach(worker_id_, session_);
  YARD_LOG(INFO) << "worker " << worker_id_ << " disconnected";
  // It said it was shutting down: it left on purpose, and a server restart
  // must not take it for lost. Not when a newer session has it already.
  if (said_draining_ && current) ForgetLeftWorker();
  if (wake_scheduler_) wake_scheduler_();
}

void WorkerSession::ForgetLeftWorker() {
  if (absl::Status s = store_->DeleteKnownWorker(worker_id_); !s.ok()) {
    YARD_LOG(WARNING) << "worker " << worker_id_ << " left but stays in the "
                      << "store (after a server restart it is listed lost "
                      << "until it comes back or is forgotten): " << s;
    return;
  }
  // Connected again meanwhile (its hello stored before the delete): keep
  // it known after all.
  std::optional<WorkerStatus> now = workers_->Find(worker_id_);
  if (now && now->connected) (void)store_->PutKnownWorker(now->hello);
}

void WorkerSession::Heard() {
  absl::MutexLock lock(&heard_mu_);
  if (heard_.second != 0) workers_->Renew(heard_.first, heard_.second);
}

absl::Status WorkerSession::Handle(const v1::WorkerMessage& message) {
  if (session_ == 0 && !message.has_hello()) {
    return absl::InvalidArgumentError(
        "the first message on WorkerService.Connect must be a WorkerHello");
  }
  switch (message.msg_case()) {
    case v1::WorkerMessage::kHello:
      if (session_ != 0) {
        return absl::InvalidArgumentError(
            "WorkerHello sent twice on one stream");
      }
      return OnHello(message.hello());
    case v1::WorkerMessage::kHeartbeat:
      return OnHeartbeat(message.heartbeat());
    case v1::WorkerMessage::kUpdate:
      return OnUpdate(message.update());
    case v1::WorkerMessage::MSG_NOT_SET:
      return RenewLease();  // from a newer worker: nothing we understand
  }
  return absl::OkStatus();
}

absl::Status WorkerSession::OnHello(const v1::WorkerHello& hello) {
  RETURN_IF_ERROR(ValidateHello(hello, options_));
  // Read before the hello renews it: jobs the worker no longer has were
  // lost with its previous session (or process) at this time.
  unconfirmed_until_ = workers_->HeldUntil(hello.worker_id());
  ASSIGN_OR_RETURN(session_, workers_->Attach(hello, link_));
  worker_id_ = hello.worker_id();
  {
    absl::MutexLock lock(&heard_mu_);
    heard_ = {worker_id_, session_};
  }
  // Remembered so that a server restart knows it even when it runs
  // nothing; not being able to write that does not stop it working.
  if (absl::Status s = store_->PutKnownWorker(hello); !s.ok()) {
    YARD_LOG(WARNING) << "worker " << worker_id_ << " is not remembered in "
                      << "the store (after a server restart it is unknown "
                      << "until it connects): " << s;
  }
  v1::ServerMessage ack;
  ack.mutable_hello_ack()->set_heartbeat_interval_ms(static_cast<int32_t>(
      absl::ToInt64Milliseconds(options_.heartbeat_interval)));
  ack.mutable_hello_ack()->set_lease_ms(
      static_cast<int32_t>(absl::ToInt64Milliseconds(workers_->lease())));
  ack.mutable_hello_ack()->set_acks_heartbeats(true);
  link_->Send(ack);
  RETURN_IF_ERROR(Reattach(hello));
  workers_->MarkReady(worker_id_, session_);
  YARD_LOG(INFO) << "worker " << worker_id_ << " connected ("
                 << (hello.hostname().empty() ? "?" : hello.hostname()) << ", "
                 << hello.cpu_slots() << " CPU slots, " << hello.devices_size()
                 << " GPUs, " << hello.running_size() << " jobs running)";
  if (wake_scheduler_) wake_scheduler_();
  return absl::OkStatus();
}

absl::Status WorkerSession::Reattach(const v1::WorkerHello& hello) {
  for (const v1::RunningJobRef& ref : hello.running()) {
    ASSIGN_OR_RETURN(
        ReportOutcome outcome,
        lifecycle_->Reattach(worker_id_, ref.attempt(), ref.job_id()));
    if (outcome == ReportOutcome::kStale) {
      Stop(ref.job_id(), ref.attempt());
      continue;
    }
    YARD_LOG(INFO) << "job " << ref.job_id() << " attempt " << ref.attempt()
                   << " re-attached on worker " << worker_id_;
    absl::StatusOr<JobRecord> r = store_->GetJob(ref.job_id());
    if (r.ok() && r->cancel_requested()) {
      link_->Send(lifecycle_->CancelFor(*r));
    } else if (r.ok() && !r->job.pending_failure().empty()) {
      // A rank failed elsewhere: the StopAttempt sent for it may have been
      // lost with the old stream (or the server restarted before sending).
      v1::ServerMessage stop;
      stop.mutable_stop_attempt()->set_job_id(ref.job_id());
      stop.mutable_stop_attempt()->set_attempt(ref.attempt());
      link_->Send(stop);
    } else if (r.ok() && r->job.state() == v1::PREEMPTING) {
      // The Preempt may have been lost with the old stream: send it again.
      link_->Send(lifecycle_->PreemptFor(*r));
    }
  }
  ASSIGN_OR_RETURN(
      std::vector<JobRecord> held,
      store_->JobsInStates({v1::SCHEDULED, v1::RUNNING, v1::PREEMPTING}));
  unconfirmed_.clear();
  for (const JobRecord& r : held) {
    const v1::GangPart* part = PartOn(r, worker_id_);
    const bool here =
        (r.job.worker_id() == worker_id_ && !r.job.own_ranks_exited()) ||
        (part != nullptr && !part->exited());
    if (!here || Lists(hello.running(), r.job.id(), r.job.attempt())) {
      continue;
    }
    v1::RunningJobRef& ref = unconfirmed_.emplace_back();
    ref.set_job_id(r.job.id());
    ref.set_attempt(r.job.attempt());
  }
  return absl::OkStatus();
}

absl::Status WorkerSession::RenewLease() {
  if (workers_->Renew(worker_id_, session_)) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat(
      "this stream of worker ", worker_id_,
      " is no longer current (replaced by a newer connection, or its lease "
      "expired); reconnect"));
}

absl::Status WorkerSession::OnHeartbeat(const v1::Heartbeat& heartbeat) {
  RETURN_IF_ERROR(RenewLease());
  if (heartbeat.devices_size() > options_.max_devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("heartbeat.devices: at most ", options_.max_devices));
  }
  workers_->RecordDeviceFigures(worker_id_, session_, heartbeat.devices());
  if (heartbeat.draining()) {
    workers_->MarkDraining(worker_id_, session_);
    said_draining_ = true;
  }
  for (const v1::RunningJobRef& ref : unconfirmed_) {
    // Its exit came after the hello: nothing was lost.
    if (exited_.contains({ref.job_id(), ref.attempt()})) continue;
    if (Lists(heartbeat.running(), ref.job_id(), ref.attempt())) continue;
    RETURN_IF_ERROR(lifecycle_->ReturnToQueue(
        ref.job_id(), ref.attempt(), worker_id_,
        absl::StrCat("worker ", worker_id_,
                     " reconnected without it (assignment or process lost)"),
        unconfirmed_until_));
  }
  unconfirmed_.clear();
  for (const v1::RunningJobRef& ref : heartbeat.running()) {
    if (exited_.contains({ref.job_id(), ref.attempt()})) continue;
    absl::StatusOr<JobRecord> r = store_->GetJob(ref.job_id());
    if (absl::IsNotFound(r.status()) ||
        (r.ok() && !IsCurrentAttempt(*r, worker_id_, ref.attempt()))) {
      Stop(ref.job_id(), ref.attempt());
    } else if (!r.ok()) {
      return r.status();
    }
  }
  SendAcks(heartbeat.sequence());
  return absl::OkStatus();
}

void WorkerSession::SendAcks(int64_t heartbeat_sequence) {
  v1::ServerMessage message;
  v1::HeartbeatAck* ack = message.mutable_heartbeat_ack();
  ack->set_heartbeat_sequence(heartbeat_sequence);
  for (const auto& [key, sequence] : to_ack_) {
    v1::ReportAck* r = ack->add_reports();
    r->set_job_id(key.first);
    r->set_attempt(key.second);
    r->set_sequence(sequence);
  }
  to_ack_.clear();
  link_->Send(message);
}

void WorkerSession::FlushAcks() {
  if (session_ != 0 && !to_ack_.empty()) SendAcks(0);
}

absl::Status WorkerSession::OnUpdate(const v1::JobUpdate& update) {
  RETURN_IF_ERROR(RenewLease());
  const std::pair<std::string, int32_t> key(update.job_id(), update.attempt());
  if (update.has_exited() && update.exited().lost_server()) {
    RETURN_IF_ERROR(OnLostServerExit(update));
  } else {
    RETURN_IF_ERROR(ApplyUpdate(update));
  }
  // Processed, whatever the outcome: the worker need not send it again.
  if (update.has_exited()) exited_.insert(key);
  if (update.sequence() > 0) {
    int64_t& acked = to_ack_[key];
    acked = std::max(acked, update.sequence());
  }
  return absl::OkStatus();
}

absl::Status WorkerSession::OnLostServerExit(const v1::JobUpdate& update) {
  // The worker stopped the job because the server could not hear it; it
  // ran fine, so it goes back to the queue (a no-op when the lease already
  // ran out and the job was given back).
  absl::Status s = lifecycle_->ReturnToQueue(
      update.job_id(), update.attempt(), worker_id_,
      absl::StrCat("worker ", worker_id_,
                   " lost contact with the server and stopped it"),
      ExitTimeOf(update.exited(), lifecycle_->clock()->Now()));
  if (absl::IsNotFound(s)) return absl::OkStatus();
  return s;
}

absl::Status WorkerSession::ApplyUpdate(const v1::JobUpdate& update) {
  absl::StatusOr<ReportOutcome> outcome =
      lifecycle_->OnUpdate(worker_id_, update);
  if (!outcome.ok()) {
    YARD_LOG(ERROR) << "worker " << worker_id_ << ": update for job "
                    << update.job_id() << " failed: " << outcome.status();
    return outcome.status();
  }
  if (*outcome == ReportOutcome::kStale) {
    if (update.has_exited()) {
      YARD_LOG(INFO) << "ignored the exit of stale attempt " << update.attempt()
                     << " of job " << update.job_id() << " on " << worker_id_;
    } else {
      Stop(update.job_id(), update.attempt());
    }
  }
  return absl::OkStatus();
}

void WorkerSession::Stop(const std::string& job_id, int32_t attempt) {
  if (!stopped_.insert({job_id, attempt}).second) return;
  YARD_LOG(INFO) << "stopping stale attempt " << attempt << " of job " << job_id
                 << " on worker " << worker_id_;
  v1::ServerMessage stop;
  stop.mutable_stop_attempt()->set_job_id(job_id);
  stop.mutable_stop_attempt()->set_attempt(attempt);
  link_->Send(stop);
}

}  // namespace trainyard::server
