#include "server/worker_service.h"

#include <deque>
#include <memory>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_handoffs.h"
#include "common/log.h"
#include "common/rpc_status.h"
#include "common/status_macros.h"

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
    handoffs_.Handing(GrpcHandoffs::kFinish);
    Finish(ToGrpcStatus(status));
  }
  void OnDone() override {
    handoffs_.Done();
    delete this;
  }

 private:
  GrpcHandoffs handoffs_;
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

  CallbackWorkerLink(Reactor* reactor, GrpcHandoffs* handoffs,
                     grpc::CallbackServerContext* context)
      : reactor_(reactor), handoffs_(handoffs), context_(context) {}

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
    handoffs_->Handing(GrpcHandoffs::kWrite);
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
    if (next != nullptr) {
      handoffs_->Handing(GrpcHandoffs::kWrite);
      return reactor_->StartWrite(next);
    }
    if (finish.has_value()) Finish(*finish);
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
    if (finish.has_value()) Finish(*finish);
  }

  // Closed (Close, or a write failed): what the worker sent since is not
  // handled.
  bool closed() const {
    absl::MutexLock lock(&mu_);
    return closed_;
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
    handoffs_->Handing(GrpcHandoffs::kCancel);
    context_->TryCancel();
    absl::MutexLock lock(&mu_);
    cancelling_ = false;
  }
  void Finish(const absl::Status& status) {
    handoffs_->Handing(GrpcHandoffs::kFinish);
    reactor_->Finish(ToGrpcStatus(status));
  }
  absl::Status FinalStatusLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return status_.ok() ? close_status_ : status_;
  }

  Reactor* const reactor_;
  GrpcHandoffs* const handoffs_;  // the reactor's
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

// One Connect stream. It reads on as messages come (up to kMaxUnhandled
// not yet handled, or kMaxUnhandledBytes), renewing the worker's lease as each
// arrives, and hands them to the pool to be handled one at a time, in order.
// When the reads end (the worker closed its side, went away, or the link was
// closed) and what was read is handled, or a message is refused, it ends the
// session and the call.
class ConnectReactor final : public Reactor {
 public:
  using MakeSession = absl::FunctionRef<std::unique_ptr<WorkerSession>(
      std::shared_ptr<WorkerLink>)>;

  // Messages, and their bytes, read and not yet handled, at most; then
  // reading waits (a worker's log chunks can be large).
  static constexpr size_t kMaxUnhandled = 64;
  static constexpr size_t kMaxUnhandledBytes = size_t{4} << 20;
  static constexpr int kMessagesPerTurn = 16;

  ConnectReactor(grpc::CallbackServerContext* context,
                 const Authenticator* auth, TaskPool* pool,
                 MakeSession make_session)
      : context_(context),
        auth_(auth),
        pool_(pool),
        link_(std::make_shared<CallbackWorkerLink>(this, &handoffs_, context)),
        session_(make_session(link_)) {
    handoffs_.Handing(GrpcHandoffs::kReturn);
    handoffs_.Handing(GrpcHandoffs::kRead);
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    GrpcHandoffs::Reaction reaction(&handoffs_, GrpcHandoffs::kRead);
    // The lease is renewed as the message arrives, not when a pool thread
    // gets to it: that may be later while the pool is busy with other
    // workers' messages (a slow commit). (The session lives until OnDone.)
    if (ok) session_->Heard();
    bool read_on = false;
    bool start = false;
    {
      absl::MutexLock lock(&mu_);
      if (ended_) return;  // a read that was pending as the call ended
      if (ok) {
        unhandled_bytes_ += in_.Length();
        unhandled_.emplace_back().Swap(&in_);  // ByteBuffer has no move
        read_on = unhandled_.size() < kMaxUnhandled &&
                  unhandled_bytes_ < kMaxUnhandledBytes;
      } else {
        reads_ended_ = true;
      }
      reading_ = read_on;
      start = !handling_;
      handling_ = true;
    }
    if (read_on) {
      handoffs_.Handing(GrpcHandoffs::kRead);
      StartRead(&in_);
    }
    if (start) pool_->Post([this] { HandleAll(); });
  }
  void OnWriteDone(bool ok) override {
    GrpcHandoffs::Reaction reaction(&handoffs_, GrpcHandoffs::kWrite);
    link_->OnWriteDone(ok);
  }
  void OnDone() override {
    handoffs_.Done();
    link_->WaitForCancel();
    delete this;
  }

 private:
  // On the pool: handles what was read, oldest first, until nothing is
  // left (the next read starts it again) or the stream ends; after
  // kMessagesPerTurn it goes to the back of the pool's queue, so that a
  // worker that keeps talking does not keep a thread from the others.
  void HandleAll() {
    for (int turn = 0;; ++turn) {
      if (turn == kMessagesPerTurn) {
        return pool_->Post([this] { HandleAll(); });  // still handling_
      }
      grpc::ByteBuffer bytes;
      bool read_again = false;
      {
        absl::MutexLock lock(&mu_);
        // Closed, the stream ends as the worker's cut-off read would have:
        // nothing more of what it sent is handled.
        if (reads_ended_ && link_->closed()) {
          unhandled_.clear();
          unhandled_bytes_ = 0;
        }
        if (unhandled_.empty()) {
          if (reads_ended_) break;  // all read is handled: the end
          handling_ = false;
          return;
        }
        bytes.Swap(&unhandled_.front());  // ByteBuffer has no move
        unhandled_.pop_front();
        unhandled_bytes_ -= bytes.Length();
        if (!reading_ && !reads_ended_) read_again = reading_ = true;
      }
      if (read_again) {
        handoffs_.Handing(GrpcHandoffs::kRead);
        StartRead(&in_);
      }
      if (absl::Status s = HandleMessage(&bytes); !s.ok()) {
        return End(std::move(s));
      }
    }
    End(absl::OkStatus());
  }

  absl::Status HandleMessage(grpc::ByteBuffer* bytes) {
    ASSIGN_OR_RETURN(v1::WorkerMessage message, ParseWorkerMessage(bytes));
    // The join token is checked again at each heartbeat: a revoked one
    // ends the stream within a heartbeat interval, not at the worker's
    // next connect (which it is then refused). Cut off, the worker stops
    // its jobs before its lease runs out, and they are re-queued.
    if (auth_ != nullptr && message.has_heartbeat()) {
      if (absl::Status s = auth_->ForWorker(*context_).status(); !s.ok()) {
        YARD_LOG(WARNING) << "worker " << session_->worker_id()
                          << " disconnected: " << s;
        return s;
      }
    }
    return session_->Handle(message);
  }

  // The last thing a HandleAll does: the call may end, and this reactor
  // go, before it returns.
  void End(absl::Status status) {
    {
      absl::MutexLock lock(&mu_);
      ended_ = true;  // a read still pending is dropped when it completes
      unhandled_.clear();
      unhandled_bytes_ = 0;
    }
    // The worker closed its side after its last reports: acknowledge them,
    // so it need not keep them.
    if (status.ok()) session_->FlushAcks();
    if (!status.ok() && !session_->worker_id().empty()) {
      YARD_LOG(WARNING) << "worker " << session_->worker_id()
                        << " stream ended: " << status;
    }
    session_->Close();  // detaches from the registry
    // The copy keeps the link until FinishWhenSent returns, after which
    // this reactor and its link_ may be gone.
    const std::shared_ptr<CallbackWorkerLink> link = link_;
    link->FinishWhenSent(std::move(status));
  }

  grpc::CallbackServerContext* const context_;
  const Authenticator* const auth_;
  TaskPool* const pool_;
  GrpcHandoffs handoffs_;  // before link_, which holds it
  const std::shared_ptr<CallbackWorkerLink> link_;
  // Handled on the pool, one message at a time; Heard from gRPC's threads.
  const std::unique_ptr<WorkerSession> session_;
  grpc::ByteBuffer in_;  // the read in flight
  absl::Mutex mu_;
  std::deque<grpc::ByteBuffer> unhandled_ ABSL_GUARDED_BY(mu_);
  size_t unhandled_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool reading_ ABSL_GUARDED_BY(mu_) = true;  // a read is in flight
  bool reads_ended_ ABSL_GUARDED_BY(mu_) = false;
  bool handling_ ABSL_GUARDED_BY(mu_) = false;  // HandleAll runs or is posted
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
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
