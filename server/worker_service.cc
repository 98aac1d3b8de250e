#include "server/worker_service.h"

#include <deque>
#include <memory>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "common/log.h"
#include "common/rpc_status.h"

namespace trainyard::server {
namespace {

using Reactor = grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>;

// Connect is served raw (bytes, not messages), so that a message that does
// not parse can be told from the worker closing its side (gRPC's reactor
// reads both as "no message") and refused, naming what was wrong.
absl::StatusOr<v1::WorkerMessage> ParseWorkerMessage(grpc::ByteBuffer* bytes) {
  v1::WorkerMessage message;
  if (grpc::SerializationTraits<v1::WorkerMessage>::Deserialize(bytes, &message)
          .ok()) {
    return message;
  }
  return absl::InvalidArgumentError(
      "a message on /trainyard.v1.WorkerService/Connect could not be parsed: "
      "it is not a WorkerMessage in protobuf, or one of its string fields "
      "holds bytes that are not valid UTF-8");
}

// A Connect refused before any message: ends at once with `status`.
class RefusedConnect final : public Reactor {
 public:
  explicit RefusedConnect(const absl::Status& status) {
    Finish(ToGrpcStatus(status));
  }
  void OnDone() override { delete this; }
};

// A WorkerLink over one Connect stream's reactor. Send() queues and starts
// a write when none is in flight (gRPC allows one at a time); Close()
// cancels the call, which ends the stream's read and so the stream.
// FinishWhenSent() ends the call once what is queued is written. Its
// sessions and the registry may hold it after the call is gone: Send and
// Close then do nothing.
class CallbackWorkerLink final : public WorkerLink {
 public:
  // A worker that stops reading must not make the server hoard messages.
  static constexpr size_t kMaxQueued = 10'000;

  CallbackWorkerLink(Reactor* reactor, grpc::CallbackServerContext* context)
      : reactor_(reactor), context_(context) {}

  bool Send(const v1::ServerMessage& message) override {
    grpc::ByteBuffer bytes;
    bool own = false;
    if (!grpc::SerializationTraits<v1::ServerMessage>::Serialize(message,
                                                                 &bytes, &own)
             .ok()) {
      YARD_LOG(ERROR) << "a ServerMessage could not be serialized; not sent";
      return false;
    }
    const grpc::ByteBuffer* first = nullptr;
    bool cancel = false;
    {
      absl::MutexLock lock(&mu_);
      if (closed_ || finishing_) return false;
      if (queue_.size() >= kMaxQueued) {
        cancel =
            CloseLocked(absl::ResourceExhaustedError("worker is not reading"));
      } else {
        queue_.push_back(std::move(bytes));
        if (!writing_) {
          writing_ = true;
          first = &queue_.front();
        }
      }
    }
    if (cancel) CancelCall();
    if (first == nullptr) return !cancel;
    // The message stays put until OnWriteDone pops it; and no Finish
    // (after which the reactor may be gone) while a write is in flight.
    reactor_->StartWrite(first);
    return true;
  }

  void Close(const absl::Status& status) override {
    bool cancel = false;
    {
      absl::MutexLock lock(&mu_);
      cancel = CloseLocked(status);
    }
    if (cancel) CancelCall();
  }

  // The write in flight is done (`ok` false: the call is broken).
  void OnWriteDone(bool ok) {
    const grpc::ByteBuffer* next = nullptr;
    std::optional<absl::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      queue_.pop_front();
      if (!ok) closed_ = true;
      if (closed_) queue_.clear();  // what was queued is not written
      if (!queue_.empty()) {
        next = &queue_.front();
      } else {
        writing_ = false;
        if (finishing_) finish = FinalStatusLocked();
      }
    }
    if (next != nullptr) return reactor_->StartWrite(next);
    if (finish.has_value()) reactor_->Finish(ToGrpcStatus(*finish));
  }

  // The stream is done reading and handling: ends the call once what is
  // queued is written, with `status`, or if that is OK the status the link
  // was closed with. The reactor may be gone when it returns.
  void FinishWhenSent(absl::Status status) {
    std::optional<absl::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      finishing_ = true;
      status_ = std::move(status);
      if (!writing_) finish = FinalStatusLocked();
    }
    if (finish.has_value()) reactor_->Finish(ToGrpcStatus(*finish));
  }

  // The call is gone (OnDone): waits for a cancel in progress, which uses
  // its context. (A cancel starts only before FinishWhenSent, so none
  // starts after this.)
  void WaitForCancel() {
    absl::MutexLock lock(&mu_);
    auto idle = [this]()
                    ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !cancelling_; };
    mu_.Await(absl::Condition(&idle));
  }

 private:
  // Marks the link closed; true when the caller must cancel the call
  // (CancelCall, outside the lock: gRPC may run reactions as it cancels).
  bool CloseLocked(const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (closed_) return false;
    closed_ = true;
    close_status_ = status;
    // Once finishing, the read side is done and the call about to end.
    if (finishing_) return false;
    cancelling_ = true;
    return true;
  }
  void CancelCall() {
    context_->TryCancel();
    absl::MutexLock lock(&mu_);
    cancelling_ = false;
  }
  absl::Status FinalStatusLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return status_.ok() ? close_status_ : status_;
  }

  Reactor* const reactor_;
  grpc::CallbackServerContext* const context_;
  mutable absl::Mutex mu_;
  std::deque<grpc::ByteBuffer> queue_ ABSL_GUARDED_BY(mu_);  // front: writing
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelling_ ABSL_GUARDED_BY(mu_) = false;  // CancelCall running
  absl::Status close_status_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

// One Connect stream: reads a message, handles it on the pool, reads the
// next; when the reads end (the worker closed its side, went away, or the
// link was closed) or a message is refused, ends the session and the call.
class ConnectReactor final : public Reactor {
 public:
  using MakeSession = absl::FunctionRef<std::unique_ptr<WorkerSession>(
      std::shared_ptr<WorkerLink>)>;

  ConnectReactor(grpc::CallbackServerContext* context,
                 const Authenticator* auth, TaskPool* pool,
                 MakeSession make_session)
      : context_(context),
        auth_(auth),
        pool_(pool),
        link_(std::make_shared<CallbackWorkerLink>(this, context)),
        session_(make_session(link_)) {
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    // The lease is renewed as the message arrives, not when a pool thread
    // gets to it: that may be later while the pool is busy with other
    // workers' messages (a slow commit).
    if (ok) session_->Heard();
    pool_->Post([this, ok] { ok ? HandleMessage() : End(absl::OkStatus()); });
  }
  void OnWriteDone(bool ok) override { link_->OnWriteDone(ok); }
  void OnDone() override {
    link_->WaitForCancel();
    delete this;
  }

 private:
  void HandleMessage() {
    absl::StatusOr<v1::WorkerMessage> message = ParseWorkerMessage(&in_);
    if (!message.ok()) return End(message.status());
    // The join token is checked again at each heartbeat: a revoked one
    // ends the stream within a heartbeat interval, not at the worker's
    // next connect (which it is then refused). Cut off, the worker stops
    // its jobs before its lease runs out, and they are re-queued.
    if (auth_ != nullptr && message->has_heartbeat()) {
      if (absl::Status s = auth_->ForWorker(*context_).status(); !s.ok()) {
        YARD_LOG(WARNING) << "worker " << session_->worker_id()
                          << " disconnected: " << s;
        return End(std::move(s));
      }
    }
    if (absl::Status s = session_->Handle(*message); !s.ok()) return End(s);
    StartRead(&in_);
  }

  void End(absl::Status status) {
    // The worker closed its side after its last reports: acknowledge them,
    // so it need not keep them.
    if (status.ok()) session_->FlushAcks();
    if (!status.ok() && !session_->worker_id().empty()) {
      YARD_LOG(WARNING) << "worker " << session_->worker_id()
                        << " stream ended: " << status;
    }
    session_.reset();  // detaches from the registry
    // Last: the call may end, and this reactor and its link_ go, before it
    // returns (the copy keeps the link until then).
    const std::shared_ptr<CallbackWorkerLink> link = link_;
    link->FinishWhenSent(std::move(status));
  }

  grpc::CallbackServerContext* const context_;
  const Authenticator* const auth_;
  TaskPool* const pool_;
  const std::shared_ptr<CallbackWorkerLink> link_;
  std::unique_ptr<WorkerSession> session_;
  grpc::ByteBuffer in_;
};

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
WorkerServiceImpl::Connect(grpc::CallbackServerContext* context) {
  if (auth_ != nullptr) {
    if (absl::Status s = auth_->ForWorker(*context).status(); !s.ok()) {
      YARD_LOG(WARNING) << "refused a worker connection from "
                        << context->peer() << ": " << s;
      return new RefusedConnect(s);
    }
  }
  return new ConnectReactor(
      context, auth_, &pool_, [this](std::shared_ptr<WorkerLink> link) {
        return std::make_unique<WorkerSession>(store_, workers_, lifecycle_,
                                               std::move(link), options_,
                                               wake_scheduler_);
      });
}

}  // namespace trainyard::server
