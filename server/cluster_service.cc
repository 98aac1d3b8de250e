#include "server/cluster_service.h"

#include "common/rpc_status.h"

namespace trainyard::server {

grpc::Status ClusterServiceImpl::ListWorkers(grpc::ServerContext*,
                                             const v1::ListWorkersRequest*,
                                             v1::ListWorkersResponse* response) {
  absl::StatusOr<std::vector<v1::Worker>> workers = view_->ListWorkers();
  if (!workers.ok()) return ToGrpcStatus(workers.status());
  for (v1::Worker& w : *workers) *response->add_workers() = std::move(w);
  return grpc::Status::OK;
}

grpc::Status ClusterServiceImpl::GetClusterStatus(
    grpc::ServerContext*, const v1::GetClusterStatusRequest*,
    v1::ClusterStatus* response) {
  absl::StatusOr<v1::ClusterStatus> status = view_->Status();
  if (!status.ok()) return ToGrpcStatus(status.status());
  *response = std::move(*status);
  return grpc::Status::OK;
}

}  // namespace trainyard::server
