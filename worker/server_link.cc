#include "worker/server_link.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/rpc_status.h"

namespace trainyard::worker {
namespace {

using trainyard::v1::RunningJobRef;
using trainyard::v1::ServerMessage;
using trainyard::v1::WorkerMessage;

constexpr absl::Duration kMinHeartbeat = absl::Milliseconds(10);
constexpr absl::Duration kMaxHeartbeat = absl::Seconds(60);

std::shared_ptr<grpc::Channel> MakeChannel(const ServerLinkOptions& options) {
  grpc::ChannelArguments args;
  // gRPC's own reconnect backoff grows to minutes; ours is the one that
  // counts, so keep the channel's short and private to this attempt.
  const int max_ms =
      static_cast<int>(absl::ToInt64Milliseconds(options.max_backoff));
  args.SetInt(
      GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
      static_cast<int>(absl::ToInt64Milliseconds(options.initial_backoff)));
  args.SetInt(
      GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
      static_cast<int>(absl::ToInt64Milliseconds(options.initial_backoff)));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, max_ms);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  ApplyTlsChannelArgs(options.tls, args);
  // The worker checked the TLS files at start (worker_main.cc); should one
  // have become unreadable since, the channel fails and we retry.
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeChannelCredentials(options.tls);
  if (!credentials.ok()) {
    YARD_LOG(ERROR) << "TLS credentials: " << credentials.status();
    return nullptr;
  }
  return grpc::CreateCustomChannel(options.server_address, *credentials, args);
}

bool SameRef(const RunningJobRef& a, const RunningJobRef& b) {
  return a.job_id() == b.job_id() && a.attempt() == b.attempt();
}

}  // namespace

ServerLink::ServerLink(ServerLinkOptions options, Delegate* delegate)
    : options_(std::move(options)),
      delegate_(delegate),
      queue_(options_.queue_limits),
      heartbeat_interval_(options_.default_heartbeat_interval) {}

ServerLink::~ServerLink() { Shutdown(absl::ZeroDuration()); }

void ServerLink::Start() {
  absl::MutexLock lock(&mu_);
  if (started_ || stopping_) return;
  started_ = true;
  thread_ = std::thread(&ServerLink::Loop, this);
  watchdog_ = std::thread(&ServerLink::Watch, this);
}

void ServerLink::Report(trainyard::v1::JobUpdate update) {
  absl::MutexLock lock(&mu_);
  queue_.Push(std::move(update));
}

bool ServerLink::connected() const {
  absl::MutexLock lock(&mu_);
  return acked_ && !broken_;
}

size_t ServerLink::queued() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

void ServerLink::Shutdown(absl::Duration flush_timeout) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      stopping_ = true;
      flush_deadline_ = absl::Now() + flush_timeout;
    }
    // Give the writer until the deadline, then cut a stream that hangs.
    auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return loop_done_ || !started_;
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&done), flush_deadline_) &&
        context_ != nullptr) {
      context_->TryCancel();
    }
  }
  if (!thread_.joinable()) return;  // never started, or already shut down
  thread_.join();
  watchdog_.join();
  absl::MutexLock lock(&mu_);
  if (!queue_.empty()) {
    YARD_LOG(WARNING) << queue_.size()
                      << " job report(s) may not have reached the server";
  }
}

void ServerLink::Loop() {
  absl::Duration backoff = options_.initial_backoff;
  bool reported_failure = false;
  bool reported_refusal = false;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
    }
    bool acked = false;
    const absl::Time connected_at = absl::Now();
    const absl::Status status = RunConnection(acked);
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
    }
    if (acked) {
      // Only a connection that held starts the backoff over: one the server
      // accepts and then ends at once (e.g. it cannot write this worker's
      // reports: its disk is full) must not be retried ten times a second.
      if (absl::Now() - connected_at >= options_.stable_connection) {
        backoff = options_.initial_backoff;
      }
      reported_failure = reported_refusal = false;
      YARD_LOG(WARNING) << "lost the connection to " << options_.server_address
                        << ": " << status << "; reconnecting";
    } else {
      delegate_->OnConnectFailed(status);
      const bool taken = absl::IsAlreadyExists(status);
      if (!reported_refusal && (absl::IsUnauthenticated(status) ||
                                absl::IsPermissionDenied(status) || taken)) {
        // Said once, even after an earlier "cannot reach": a refusal is what
        // the operator must act on. A worker id in use is tried again: the
        // other process may be gone by then.
        reported_refusal = reported_failure = true;
        YARD_LOG(ERROR) << "the server at " << options_.server_address
                        << " refused this worker: " << status
                        << (taken ? "; retrying until it is free"
                                  : "; check --token-file and the TLS "
                                    "certificate");
      } else if (!reported_failure) {
        reported_failure = true;
        const std::string hint =
            TlsFailureHint(status.message(), options_.tls.enabled(),
                           !options_.tls.cert.empty());
        YARD_LOG(WARNING) << "cannot reach the server at "
                          << options_.server_address << ": " << status
                          << (hint.empty() ? "" : "; ") << hint << "; retrying";
      }
    }
    WaitBackoff(backoff);
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
  absl::MutexLock lock(&mu_);
  loop_done_ = true;
}

void ServerLink::WaitBackoff(absl::Duration backoff) {
  absl::MutexLock lock(&mu_);
  auto stopping = [this]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
  mu_.AwaitWithTimeout(absl::Condition(&stopping), backoff);
}

void ServerLink::Watch() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const absl::Time hello_deadline = hello_deadline_;
    const absl::Time lease_deadline = contact_.Deadline();
    auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || hello_deadline_ != hello_deadline ||
             contact_.Deadline() != lease_deadline;
    };
    if (mu_.AwaitWithDeadline(absl::Condition(&changed),
                              std::min(hello_deadline, lease_deadline))) {
      continue;
    }
    const absl::Time now = absl::Now();
    if (now >= hello_deadline) {
      hello_deadline_ = absl::InfiniteFuture();
      YARD_LOG(WARNING) << "no answer to the hello from "
                        << options_.server_address << "; connecting again";
      if (context_ != nullptr) context_->TryCancel();
    }
    if (now >= lease_deadline) {
      contact_.Expire();
      YARD_LOG(WARNING) << "the server at " << options_.server_address
                        << " answered no heartbeat for its lease (" << lease_
                        << "): it declares this worker lost; stopping the "
                           "jobs and connecting again";
      if (context_ != nullptr) context_->TryCancel();
      mu_.Unlock();
      delegate_->OnLeaseExpired();
      mu_.Lock();
    }
  }
}

std::vector<RunningJobRef> ServerLink::Running() {
  // The delegate first: an attempt leaves it only after its exit was queued,
  // and an exit leaves the queue only once acknowledged (or sent, to a
  // server that does not acknowledge).
  std::vector<RunningJobRef> running = delegate_->RunningJobs();
  absl::MutexLock lock(&mu_);
  for (RunningJobRef& ref : queue_.PendingExits()) {
    auto known =
        std::find_if(running.begin(), running.end(),
                     [&](const RunningJobRef& r) { return SameRef(r, ref); });
    if (known == running.end()) {
      running.push_back(std::move(ref));
    } else if (ref.has_exit_time()) {
      // Still leaving the runner, but its processes have ended.
      *known->mutable_exit_time() = ref.exit_time();
    }
  }
  return running;
}

absl::Status ServerLink::RunConnection(bool& acked) {
  std::shared_ptr<grpc::Channel> channel = MakeChannel(options_);
  if (channel == nullptr) {
    return absl::FailedPreconditionError("cannot build the TLS credentials");
  }
  auto stub = trainyard::v1::WorkerService::NewStub(channel);
  grpc::ClientContext context;
  AddBearerToken(context, options_.token);
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::CancelledError("shutting down");
    context_ = &context;
    acked_ = broken_ = reader_done_ = false;
    draining_sent_ = false;  // a new stream must hear it again
    heartbeat_interval_ = options_.default_heartbeat_interval;
    server_acks_ = false;
    heartbeats_sent_ = 0;
    contact_.NewStream();
    hello_sent_ = absl::Now();
    hello_deadline_ =
        hello_sent_ +
        (lease_ > absl::ZeroDuration() ? lease_ : options_.hello_timeout);
  }
  std::unique_ptr<Stream> stream = stub->Connect(&context);
  WorkerMessage hello;
  *hello.mutable_hello() = delegate_->Hello();
  for (RunningJobRef& ref : Running()) {
    *hello.mutable_hello()->add_running() = std::move(ref);
  }
  std::thread reader;
  bool clean = false;
  if (stream->Write(hello)) {
    reader = std::thread(&ServerLink::ReadLoop, this, std::ref(*stream));
    clean = WriteLoop(*stream);
    if (clean) stream->WritesDone();
  }
  {
    absl::MutexLock lock(&mu_);
    // A clean close waits, until the flush deadline, for the server to end
    // the stream (it acknowledges the last reports first); anything else
    // ends it now.
    auto reader_done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return reader_done_;
    };
    // A stream the server already ended keeps the server's status (e.g.
    // UNAUTHENTICATED for a bad join token), so it is not cancelled. That
    // includes a hello that could not be written: a failed write means the
    // call is over, and cancelling it now would race the server's status.
    if (reader.joinable() && !reader_done_ &&
        (!clean || !mu_.AwaitWithDeadline(absl::Condition(&reader_done),
                                          flush_deadline_))) {
      context.TryCancel();
    }
  }
  if (reader.joinable()) reader.join();
  const grpc::Status status = stream->Finish();
  absl::MutexLock lock(&mu_);
  queue_.Rewind();  // what was not acknowledged goes again on the next one
  acked = acked_;
  acked_ = false;
  context_ = nullptr;
  hello_deadline_ = absl::InfiniteFuture();
  return FromGrpcStatus(status);
}

void ServerLink::SetDraining(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  draining_ = true;
  draining_sent_ = false;
  auto sent = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return draining_sent_ || broken_ || stopping_ || !acked_;
  };
  mu_.AwaitWithTimeout(absl::Condition(&sent), timeout);
}

bool ServerLink::AwaitHelloAck() {
  absl::MutexLock lock(&mu_);
  auto answered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return acked_ || broken_;
  };
  auto answered_or_stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return acked_ || broken_ || stopping_;
  };
  mu_.Await(absl::Condition(&answered_or_stopping));
  // Shutting down: the queued reports may still go if the answer comes
  // before the flush deadline.
  if (stopping_)
    mu_.AwaitWithDeadline(absl::Condition(&answered), flush_deadline_);
  return acked_ && !broken_;
}

bool ServerLink::WriteLoop(Stream& stream) {
  if (!AwaitHelloAck()) {
    absl::MutexLock lock(&mu_);
    return !broken_;  // shutting down before the server answered
  }
  absl::Time last_heartbeat = absl::Now();  // the hello counts as one
  while (true) {
    std::optional<trainyard::v1::JobUpdate> update;
    bool keep = false;
    bool heartbeat_due = false;
    {
      absl::MutexLock lock(&mu_);
      // The HelloAck may change the interval while we wait: look again then.
      const absl::Duration interval = heartbeat_interval_;
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || broken_ || queue_.has_unsent() ||
               heartbeat_interval_ != interval ||
               (draining_ && !draining_sent_);
      };
      mu_.AwaitWithDeadline(absl::Condition(&ready), last_heartbeat + interval);
      if (broken_) return false;
      if (stopping_ &&
          (!queue_.has_unsent() || absl::Now() >= flush_deadline_)) {
        return true;
      }
      keep = server_acks_;
      update = queue_.Next(keep);
      heartbeat_due =
          (!stopping_ && absl::Now() >= last_heartbeat + heartbeat_interval_) ||
          (draining_ && !draining_sent_);
    }
    if (update.has_value()) {
      WorkerMessage message;
      *message.mutable_update() = *update;
      if (!stream.Write(message)) {
        absl::MutexLock lock(&mu_);
        if (!ReportQueue::Kept(*update, keep)) {
          queue_.Unsend(*std::move(update));
        }
        return false;
      }
    }
    if (heartbeat_due) {
      if (!WriteHeartbeat(stream)) return false;
      last_heartbeat = absl::Now();
    }
  }
}

bool ServerLink::WriteHeartbeat(Stream& stream) {
  WorkerMessage message;
  trainyard::v1::Heartbeat* heartbeat = message.mutable_heartbeat();
  for (RunningJobRef& ref : Running())
    *heartbeat->add_running() = std::move(ref);
  for (trainyard::v1::Device& d : delegate_->DeviceFigures()) {
    *heartbeat->add_devices() = std::move(d);
  }
  bool draining;
  {
    absl::MutexLock lock(&mu_);
    draining = draining_;
    heartbeat->set_sequence(++heartbeats_sent_);
    // Before the write: the server hears it no earlier than this.
    contact_.HeartbeatSent(heartbeat->sequence(), absl::Now());
  }
  heartbeat->set_draining(draining);
  if (!stream.Write(message)) return false;
  absl::MutexLock lock(&mu_);
  if (draining) draining_sent_ = true;
  return true;
}

void ServerLink::OnHelloAck(const trainyard::v1::HelloAck& ack) {
  absl::Duration interval =
      ack.heartbeat_interval_ms() > 0
          ? absl::Milliseconds(ack.heartbeat_interval_ms())
          : options_.default_heartbeat_interval;
  interval = std::clamp(interval, kMinHeartbeat, kMaxHeartbeat);
  YARD_LOG(INFO) << "connected to " << options_.server_address
                 << " (heartbeat every " << interval << ")";
  absl::Time deadline;
  {
    absl::MutexLock lock(&mu_);
    acked_ = true;
    heartbeat_interval_ = interval;
    hello_deadline_ = absl::InfiniteFuture();
    server_acks_ = ack.acks_heartbeats();
    lease_ = absl::Milliseconds(std::max(ack.lease_ms(), 0));
    // Only a server that answers heartbeats can tell the worker it is heard.
    if (server_acks_) contact_.HelloAnswered(hello_sent_, lease_, interval);
    deadline = contact_.Deadline();
  }
  delegate_->OnLeaseRenewed(deadline);
}

void ServerLink::OnHeartbeatAck(const trainyard::v1::HeartbeatAck& ack) {
  absl::Time before, after;
  {
    absl::MutexLock lock(&mu_);
    for (const trainyard::v1::ReportAck& r : ack.reports()) {
      queue_.Ack(r.job_id(), r.attempt(), r.sequence());
    }
    before = contact_.Deadline();
    if (ack.heartbeat_sequence() > 0) {
      contact_.HeartbeatAnswered(ack.heartbeat_sequence());
    }
    after = contact_.Deadline();
  }
  if (after != before) delegate_->OnLeaseRenewed(after);
}

void ServerLink::ReadLoop(Stream& stream) {
  ServerMessage message;
  while (stream.Read(&message)) {
    if (message.has_hello_ack()) {
      OnHelloAck(message.hello_ack());
    } else if (message.has_heartbeat_ack()) {
      OnHeartbeatAck(message.heartbeat_ack());
    } else {
      delegate_->OnServerMessage(message);
    }
  }
  absl::MutexLock lock(&mu_);
  broken_ = true;
  reader_done_ = true;
}

}  // namespace trainyard::worker
