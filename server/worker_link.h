// WorkerLink: the server's way to talk to one connected worker — the send
// side of its WorkerService.Connect stream. Send() only queues the message
// (it never blocks on the network, so the scheduler loop cannot be stalled
// by a slow worker); Close() ends the stream, after which the worker
// reconnects. The gRPC implementation lives in worker_service.cc; tests use
// a fake that records what was sent. Implementations are thread-safe.
#ifndef TRAINYARD_SERVER_WORKER_LINK_H_
#define TRAINYARD_SERVER_WORKER_LINK_H_

#include "absl/status/status.h"
#include "trainyard/v1/worker.pb.h"

namespace trainyard::server {

class WorkerLink {
 public:
  virtual ~WorkerLink() = default;
  // False when the link is closed (the message is dropped).
  virtual bool Send(const v1::ServerMessage& message) = 0;
  // Ends the stream with `status`; later sends return false.
  virtual void Close(const absl::Status& status) = 0;
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_WORKER_LINK_H_
