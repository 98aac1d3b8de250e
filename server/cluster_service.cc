#include "server/cluster_service.h"

#include "common/rpc_status.h"

namespace trainyard::server {
namespace {

// Drops the refs to jobs of other tenants from `worker`.
void KeepOwnJobs(const JobStore& store, const std::string& tenant,
                 v1::Worker& worker) {
  auto* jobs = worker.mutable_jobs();
  for (int i = jobs->size() - 1; i >= 0; --i) {
    absl::StatusOr<JobRecord> r = store.GetJob(jobs->Get(i).job_id());
    if (!r.ok() || r->job.tenant() != tenant) jobs->DeleteSubrange(i, 1);
  }
}

}  // namespace

grpc::Status ClusterServiceImpl::ListWorkers(grpc::ServerContext* context,
                                             const v1::ListWorkersRequest*,
                                             v1::ListWorkersResponse* response) {
  absl::StatusOr<Caller> caller = auth_->ForClient(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<std::vector<v1::Worker>> workers = view_->ListWorkers();
  if (!workers.ok()) return ToGrpcStatus(workers.status());
  for (v1::Worker& w : *workers) {
    if (!caller->is_admin()) KeepOwnJobs(*store_, caller->tenant, w);
    *response->add_workers() = std::move(w);
  }
  return grpc::Status::OK;
}

grpc::Status ClusterServiceImpl::GetClusterStatus(
    grpc::ServerContext* context, const v1::GetClusterStatusRequest*,
    v1::ClusterStatus* response) {
  absl::StatusOr<Caller> caller = auth_->ForClient(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<v1::ClusterStatus> status = view_->Status();
  if (!status.ok()) return ToGrpcStatus(status.status());
  *response = std::move(*status);
  return grpc::Status::OK;
}

}  // namespace trainyard::server
