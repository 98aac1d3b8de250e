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
constexpr int kExitConfirmHeartbeats = 2;

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
  return grpc::CreateCustomChannel(options.server_address,
                                   grpc::InsecureChannelCredentials(), args);
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
  absl::MutexLock lock(&mu_);
  if (!queue_.empty()) {
    YARD_LOG(WARNING) << queue_.size()
                      << " job report(s) may not have reached the server";
  }
}

void ServerLink::Loop() {
  absl::Duration backoff = options_.initial_backoff;
  bool reported_failure = false;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
    }
    bool acked = false;
    const absl::Status status = RunConnection(acked);
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
    }
    if (acked) {
      backoff = options_.initial_backoff;
      reported_failure = false;
      YARD_LOG(WARNING) << "lost the connection to " << options_.server_address
                        << ": " << status << "; reconnecting";
    } else if (!reported_failure) {
      reported_failure = true;
      YARD_LOG(WARNING) << "cannot reach the server at "
                        << options_.server_address << ": " << status
                        << "; retrying";
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

std::vector<RunningJobRef> ServerLink::Running() {
  // The delegate first: an attempt leaves it only after its exit was queued,
  // and only this thread takes exits off the queue.
  std::vector<RunningJobRef> running = delegate_->RunningJobs();
  absl::MutexLock lock(&mu_);
  for (RunningJobRef& ref : queue_.PendingExits()) {
    const bool known =
        std::any_of(running.begin(), running.end(),
                    [&](const RunningJobRef& r) { return SameRef(r, ref); });
    if (!known) running.push_back(std::move(ref));
  }
  return running;
}

absl::Status ServerLink::RunConnection(bool& acked) {
  auto stub = trainyard::v1::WorkerService::NewStub(MakeChannel(options_));
  grpc::ClientContext context;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::CancelledError("shutting down");
    context_ = &context;
    acked_ = broken_ = reader_done_ = false;
    draining_sent_ = false;  // a new stream must hear it again
    heartbeat_interval_ = options_.default_heartbeat_interval;
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
    // A clean close waits for the server to end the stream, until the flush
    // deadline; anything else ends it now.
    auto reader_done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return reader_done_;
    };
    if (!reader.joinable() || !clean ||
        !mu_.AwaitWithDeadline(absl::Condition(&reader_done),
                               flush_deadline_)) {
      context.TryCancel();
    } else {
      // The server ended the stream after reading our half-close: it has
      // read everything we wrote.
      unconfirmed_exits_.clear();
    }
  }
  if (reader.joinable()) reader.join();
  const grpc::Status status = stream->Finish();
  absl::MutexLock lock(&mu_);
  for (auto it = unconfirmed_exits_.rbegin(); it != unconfirmed_exits_.rend();
       ++it) {
    queue_.PushFront(std::move(it->update));
  }
  unconfirmed_exits_.clear();
  acked = acked_;
  acked_ = false;
  context_ = nullptr;
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

bool ServerLink::WriteLoop(Stream& stream) {
  absl::Time last_heartbeat = absl::Now();  // the hello counts as one
  while (true) {
    std::optional<trainyard::v1::JobUpdate> update;
    bool heartbeat_due = false;
    {
      absl::MutexLock lock(&mu_);
      // The HelloAck may change the interval while we wait: look again then.
      const absl::Duration interval = heartbeat_interval_;
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || broken_ || !queue_.empty() ||
               heartbeat_interval_ != interval ||
               (draining_ && !draining_sent_);
      };
      mu_.AwaitWithDeadline(absl::Condition(&ready), last_heartbeat + interval);
      if (broken_) return false;
      if (stopping_ && (queue_.empty() || absl::Now() >= flush_deadline_)) {
        return true;
      }
      update = queue_.Pop();
      heartbeat_due =
          (!stopping_ && absl::Now() >= last_heartbeat + heartbeat_interval_) ||
          (draining_ && !draining_sent_);
    }
    if (update.has_value()) {
      WorkerMessage message;
      *message.mutable_update() = *update;
      const bool written = stream.Write(message);
      absl::MutexLock lock(&mu_);
      if (!written) {
        queue_.PushFront(*std::move(update));
        return false;
      }
      if (update->has_exited())
        unconfirmed_exits_.push_back({*std::move(update)});
    }
    if (heartbeat_due) {
      WorkerMessage message;
      trainyard::v1::Heartbeat* heartbeat = message.mutable_heartbeat();
      for (RunningJobRef& ref : Running())
        *heartbeat->add_running() = std::move(ref);
      bool draining;
      {
        absl::MutexLock lock(&mu_);
        draining = draining_;
      }
      heartbeat->set_draining(draining);
      if (!stream.Write(message)) return false;
      last_heartbeat = absl::Now();
      absl::MutexLock lock(&mu_);
      if (draining) draining_sent_ = true;
      for (SentExit& e : unconfirmed_exits_) ++e.heartbeats_after;
      std::erase_if(unconfirmed_exits_, [](const SentExit& e) {
        return e.heartbeats_after >= kExitConfirmHeartbeats;
      });
    }
  }
}

void ServerLink::ReadLoop(Stream& stream) {
  ServerMessage message;
  while (stream.Read(&message)) {
    if (message.has_hello_ack()) {
      const auto& ack = message.hello_ack();
      absl::Duration interval =
          ack.heartbeat_interval_ms() > 0
              ? absl::Milliseconds(ack.heartbeat_interval_ms())
              : options_.default_heartbeat_interval;
      interval = std::clamp(interval, kMinHeartbeat, kMaxHeartbeat);
      YARD_LOG(INFO) << "connected to " << options_.server_address
                     << " (heartbeat every " << interval << ")";
      absl::MutexLock lock(&mu_);
      acked_ = true;
      heartbeat_interval_ = interval;
      continue;
    }
    delegate_->OnServerMessage(message);
  }
  absl::MutexLock lock(&mu_);
  broken_ = true;
  reader_done_ = true;
}

}  // namespace trainyard::worker
