// ClusterServiceImpl: the gRPC face of ClusterService over a ClusterView.
// Thin and thread-safe.
#ifndef TRAINYARD_SERVER_CLUSTER_SERVICE_H_
#define TRAINYARD_SERVER_CLUSTER_SERVICE_H_

#include "server/cluster_view.h"
#include "trainyard/v1/cluster.grpc.pb.h"

namespace trainyard::server {

class ClusterServiceImpl final : public v1::ClusterService::Service {
 public:
  explicit ClusterServiceImpl(const ClusterView* view) : view_(view) {}

  grpc::Status ListWorkers(grpc::ServerContext* context,
                           const v1::ListWorkersRequest* request,
                           v1::ListWorkersResponse* response) override;
  grpc::Status GetClusterStatus(grpc::ServerContext* context,
                                const v1::GetClusterStatusRequest* request,
                                v1::ClusterStatus* response) override;

 private:
  const ClusterView* const view_;
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_CLUSTER_SERVICE_H_
