// WorkerServiceImpl: the gRPC face of WorkerService.Connect. Each stream
// gets a GrpcWorkerLink (an outbox drained by its own writer thread, so
// senders never block on the network) and a WorkerSession that does the
// protocol. Thread-safe: gRPC runs each stream on its own thread.
#ifndef TRAINYARD_SERVER_WORKER_SERVICE_H_
#define TRAINYARD_SERVER_WORKER_SERVICE_H_

#include <functional>

#include "server/authenticator.h"
#include "server/job_lifecycle.h"
#include "server/job_store.h"
#include "server/worker_registry.h"
#include "server/worker_session.h"
#include "trainyard/v1/worker.grpc.pb.h"

namespace trainyard::server {

class WorkerServiceImpl final : public v1::WorkerService::Service {
 public:
  WorkerServiceImpl(JobStore* store, WorkerRegistry* workers,
                    JobLifecycle* lifecycle, WorkerSessionOptions options,
                    std::function<void()> wake_scheduler)
      : store_(store),
        workers_(workers),
        lifecycle_(lifecycle),
        options_(options),
        wake_scheduler_(std::move(wake_scheduler)) {}

  // Every Connect must pass auth->ForWorker (a worker join token, and the
  // client certificate under mTLS). Set before serving.
  void set_authenticator(const Authenticator* auth) { auth_ = auth; }

  grpc::Status Connect(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::ServerMessage, v1::WorkerMessage>* stream)
      override;

 private:
  JobStore* const store_;
  WorkerRegistry* const workers_;
  JobLifecycle* const lifecycle_;
  const WorkerSessionOptions options_;
  const std::function<void()> wake_scheduler_;
  const Authenticator* auth_ = nullptr;
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_WORKER_SERVICE_H_
