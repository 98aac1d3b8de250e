// WorkerServiceImpl: the gRPC face of WorkerService.Connect, on gRPC's
// callback API: an open worker stream holds no thread of its own. Each
// stream is a reactor with a WorkerSession (the protocol) and a WorkerLink
// that queues what is sent and writes it one message at a time, so senders
// never block on the network. The session handles the stream's messages
// one at a time, in order, on a small pool of threads (a message may wait
// for a store commit, which gRPC's threads must not); the stream reads
// ahead of that, a bounded amount, and each message renews the worker's
// lease as it arrives.
//
// Thread-safe.
#ifndef TRAINYARD_SERVER_WORKER_SERVICE_H_
#define TRAINYARD_SERVER_WORKER_SERVICE_H_

#include <functional>

#include "server/authenticator.h"
#include "server/job_lifecycle.h"
#include "server/job_store.h"
#include "server/task_pool.h"
#include "server/worker_registry.h"
#include "server/worker_session.h"
#include "trainyard/v1/worker.grpc.pb.h"

namespace trainyard::server {

class WorkerServiceImpl final
    : public v1::WorkerService::WithRawCallbackMethod_Connect<
          v1::WorkerService::Service> {
 public:
  // The threads that handle the workers' messages. Up to this many may
  // wait for a store commit at once (one commit takes them all), so a burst
  // of hellos after a server restart shares few commits.
  static constexpr int kSessionThreads = 16;

  WorkerServiceImpl(JobStore* store, WorkerRegistry* workers,
                    JobLifecycle* lifecycle, WorkerSessionOptions options,
                    std::function<void()> wake_scheduler)
      : store_(store),
        workers_(workers),
        lifecycle_(lifecycle),
        options_(options),
        wake_scheduler_(std::move(wake_scheduler)),
        pool_(kSessionThreads) {}

  // Every Connect must pass auth->ForWorker (a worker join token, and the
  // client certificate under mTLS). Set before serving.
  void set_authenticator(const Authenticator* auth) { auth_ = auth; }

  // Served raw: the reactor parses each message itself (see the .cc).
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Connect(
      grpc::CallbackServerContext* context) override;

  // Finishes the messages being handled and stops the threads. After the
  // gRPC server's Wait(), before the store closes: no stream is left then.
  void Shutdown() { pool_.Shutdown(); }

 private:
  JobStore* const store_;
  WorkerRegistry* const workers_;
  JobLifecycle* const lifecycle_;
  const WorkerSessionOptions options_;
  const std::function<void()> wake_scheduler_;
  const Authenticator* auth_ = nullptr;
  TaskPool pool_;
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_WORKER_SERVICE_H_
