// ClusterServiceImpl: the gRPC face of ClusterService over a ClusterView,
// for tenant and admin tokens. Workers' capacity and the cluster totals are
// for everyone; the jobs running on a worker are shown to a tenant only when
// they are its own. Thin and thread-safe.
#ifndef TRAINYARD_SERVER_CLUSTER_SERVICE_H_
#define TRAINYARD_SERVER_CLUSTER_SERVICE_H_

#include "server/authenticator.h"
#include "server/cluster_view.h"
#include "server/job_store.h"
#include "trainyard/v1/cluster.grpc.pb.h"

namespace trainyard::server {

class ClusterServiceImpl final : public v1::ClusterService::Service {
 public:
  ClusterServiceImpl(const ClusterView* view, const JobStore* store,
                     const Authenticator* auth)
      : view_(view), store_(store), auth_(auth) {}

  grpc::Status ListWorkers(grpc::ServerContext* context,
                           const v1::ListWorkersRequest* request,
                           v1::ListWorkersResponse* response) override;
  grpc::Status GetClusterStatus(grpc::ServerContext* context,
                                const v1::GetClusterStatusRequest* request,
                                v1::ClusterStatus* response) override;

 private:
  const ClusterView* const view_;
  const JobStore* const store_;
  const Authenticator* const auth_;
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_CLUSTER_SERVICE_H_
