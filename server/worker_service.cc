#include "server/worker_service.h"

#include <deque>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/log.h"
#include "common/rpc_status.h"

namespace trainyard::server {
namespace {

using Stream = grpc::ServerReaderWriter<v1::ServerMessage, v1::WorkerMessage>;

// A WorkerLink over one Connect stream. Send() queues; a writer thread
// writes (one writer at a time, as gRPC requires). Close() cancels the RPC,
// which also unblocks the stream's reader.
class GrpcWorkerLink : public WorkerLink {
 public:
  // A worker that stops reading must not make the server hoard messages.
  static constexpr size_t kMaxQueued = 10'000;

  GrpcWorkerLink(grpc::ServerContext* context, Stream* stream)
      : context_(context), stream_(stream), writer_([this] { WriteLoop(); }) {}

  ~GrpcWorkerLink() override { Finish(); }

  bool Send(const v1::ServerMessage& message) override {
    absl::MutexLock lock(&mu_);
    if (closed_ || finishing_) return false;
    if (queue_.size() >= kMaxQueued) {
      CloseLocked(absl::ResourceExhaustedError("worker is not reading"));
      return false;
    }
    queue_.push_back(message);
    return true;
  }

  void Close(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    CloseLocked(status);
  }

  // Writes what is queued, then stops the writer. Must run before the RPC
  // handler returns: nothing may write to the stream after that.
  void Finish() {
    {
      absl::MutexLock lock(&mu_);
      finishing_ = true;
    }
    if (writer_.joinable()) writer_.join();
  }

  absl::Status close_status() const {
    absl::MutexLock lock(&mu_);
    return close_status_;
  }

 private:
  void CloseLocked(const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (closed_) return;
    closed_ = true;
    close_status_ = status;
    // Once finishing, the reader is done and the context may be gone.
    if (!finishing_) context_->TryCancel();
  }

  void WriteLoop() {
    while (true) {
      v1::ServerMessage message;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
          return !queue_.empty() || closed_ || finishing_;
        };
        mu_.Await(absl::Condition(&ready));
        if (closed_ || queue_.empty()) return;
        message = std::move(queue_.front());
        queue_.pop_front();
      }
      if (!stream_->Write(message)) {
        absl::MutexLock lock(&mu_);
        closed_ = true;
        return;
      }
    }
  }

  grpc::ServerContext* const context_;
  Stream* const stream_;
  mutable absl::Mutex mu_;
  std::deque<v1::ServerMessage> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status close_status_ ABSL_GUARDED_BY(mu_);
  std::thread writer_;  // last: starts after the members it uses
};

}  // namespace

grpc::Status WorkerServiceImpl::Connect(grpc::ServerContext* context,
                                        Stream* stream) {
  if (auth_ != nullptr) {
    if (absl::Status s = auth_->ForWorker(*context).status(); !s.ok()) {
      YARD_LOG(WARNING) << "refused a worker connection from "
                        << context->peer() << ": " << s;
      return ToGrpcStatus(s);
    }
  }
  auto link = std::make_shared<GrpcWorkerLink>(context, stream);
  absl::Status status;
  {
    WorkerSession session(store_, workers_, lifecycle_, link, options_,
                          wake_scheduler_);
    v1::WorkerMessage message;
    while (status.ok() && stream->Read(&message)) {
      // The join token is checked again at each heartbeat: a revoked one
      // ends the stream within a heartbeat interval, not at the worker's
      // next connect (which it is then refused). Cut off, the worker stops
      // its jobs before its lease runs out, and they are re-queued.
      if (auth_ != nullptr && message.has_heartbeat()) {
        status = auth_->ForWorker(*context).status();
        if (!status.ok()) {
          YARD_LOG(WARNING) << "worker " << session.worker_id()
                            << " disconnected: " << status;
          break;
        }
      }
      status = session.Handle(message);
    }
    // The worker closed its side after its last reports: acknowledge them,
    // so it need not keep them.
    if (status.ok()) session.FlushAcks();
    if (!status.ok() && !session.worker_id().empty()) {
      YARD_LOG(WARNING) << "worker " << session.worker_id()
                        << " stream ended: " << status;
    }
  }  // the session detaches from the registry here
  link->Finish();
  if (status.ok()) status = link->close_status();
  return ToGrpcStatus(status);
}

}  // namespace trainyard::server
