// ClusterServiceImpl: the gRPC face of ClusterService over a ClusterView
// and WorkerDrains. Workers' capacity and the cluster totals are for tenant
// and admin tokens; the jobs running on a worker are shown to a tenant only
// when they are its own. Draining and forgetting workers are for admin
// tokens. Thin and thread-safe.
#ifndef TRAINYARD_SERVER_CLUSTER_SERVICE_H_
#define TRAINYARD_SERVER_CLUSTER_SERVICE_H_

#include "server/authenticator.h"
#include "server/cluster_view.h"
#include "server/job_store.h"
#include "server/worker_drains.h"
#include "trainyard/v1/cluster.grpc.pb.h"

namespace trainyard::server {

class ClusterServiceImpl final : public v1::ClusterService::Service {
 public:
  ClusterServiceImpl(const ClusterView* view, const JobStore* store,
                     WorkerDrains* drains, const Authenticator* auth)
      : view_(view), store_(store), drains_(drains), auth_(auth) {}

  grpc::Status ListWorkers(grpc::ServerContext* context,
                           const v1::ListWorkersRequest* request,
                           v1::ListWorkersResponse* response) override;
  grpc::Status GetClusterStatus(grpc::ServerContext* context,
                                const v1::GetClusterStatusRequest* request,
                                v1::ClusterStatus* response) override;
  grpc::Status DrainWorker(grpc::ServerContext* context,
                           const v1::DrainWorkerRequest* request,
                           v1::Worker* response) override;
  grpc::Status UndrainWorker(grpc::ServerContext* context,
                             const v1::UndrainWorkerRequest* request,
                             v1::Worker* response) override;
  grpc::Status ForgetWorker(grpc::ServerContext* context,
                            const v1::ForgetWorkerRequest* request,
                            v1::ForgetWorkerResponse* response) override;

 private:
  // Answers with the worker as ListWorkers shows it, or, when it is not
  // back since the server started, with its id and `drain` (may be null).
  grpc::Status AnswerWithWorker(const std::string& worker_id,
                                const v1::WorkerDrain* drain,
                                v1::Worker* response) const;

  const ClusterView* const view_;
  const JobStore* const store_;
  WorkerDrains* const drains_;
  const Authenticator* const auth_;
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_CLUSTER_SERVICE_H_
