#include "server/cluster_service.h"

#include "common/log.h"
#include "common/rpc_status.h"
#include "server/worker_session.h"

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

grpc::Status ClusterServiceImpl::ListWorkers(
    grpc::ServerContext* context, const v1::ListWorkersRequest*,
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
  // A tenant counts its own jobs; the capacity is everyone's.
  absl::StatusOr<v1::ClusterStatus> status =
      view_->Status(caller->is_admin() ? "" : caller->tenant);
  if (!status.ok()) return ToGrpcStatus(status.status());
  *response = std::move(*status);
  return grpc::Status::OK;
}

grpc::Status ClusterServiceImpl::AnswerWithWorker(const std::string& worker_id,
                                                  const v1::WorkerDrain* drain,
                                                  v1::Worker* response) const {
  absl::StatusOr<std::vector<v1::Worker>> workers = view_->ListWorkers();
  if (!workers.ok()) return ToGrpcStatus(workers.status());
  for (v1::Worker& w : *workers) {
    if (w.id() != worker_id) continue;
    *response = std::move(w);
    return grpc::Status::OK;
  }
  // Not back since the server started: all there is to show is the drain
  // (and with none, its state is not known yet).
  response->set_id(worker_id);
  if (drain != nullptr) {
    response->set_state(v1::WORKER_DRAINING);
    *response->mutable_drain() = *drain;
  }
  return grpc::Status::OK;
}

grpc::Status ClusterServiceImpl::DrainWorker(
    grpc::ServerContext* context, const v1::DrainWorkerRequest* request,
    v1::Worker* response) {
  absl::StatusOr<Caller> caller = auth_->ForAdmin(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (absl::Status id = CheckWorkerId("worker_id", request->worker_id());
      !id.ok()) {
    return ToGrpcStatus(id);
  }
  absl::StatusOr<v1::WorkerDrain> drain = drains_->Drain(
      request->worker_id(), request->reason(), request->keep_jobs());
  if (!drain.ok()) return ToGrpcStatus(drain.status());
  YARD_LOG(INFO) << "drain of worker " << request->worker_id()
                 << " asked by token " << caller->token_id;
  return AnswerWithWorker(request->worker_id(), &*drain, response);
}

grpc::Status ClusterServiceImpl::UndrainWorker(
    grpc::ServerContext* context, const v1::UndrainWorkerRequest* request,
    v1::Worker* response) {
  absl::StatusOr<Caller> caller = auth_->ForAdmin(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (absl::Status id = CheckWorkerId("worker_id", request->worker_id());
      !id.ok()) {
    return ToGrpcStatus(id);
  }
  absl::Status undrained = drains_->Undrain(request->worker_id());
  if (!undrained.ok()) return ToGrpcStatus(undrained);
  YARD_LOG(INFO) << "undrain of worker " << request->worker_id()
                 << " asked by token " << caller->token_id;
  return AnswerWithWorker(request->worker_id(), nullptr, response);
}

grpc::Status ClusterServiceImpl::ForgetWorker(
    grpc::ServerContext* context, const v1::ForgetWorkerRequest* request,
    v1::ForgetWorkerResponse*) {
  absl::StatusOr<Caller> caller = auth_->ForAdmin(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (absl::Status id = CheckWorkerId("worker_id", request->worker_id());
      !id.ok()) {
    return ToGrpcStatus(id);
  }
  absl::Status forgotten = drains_->Forget(request->worker_id());
  if (!forgotten.ok()) return ToGrpcStatus(forgotten);
  YARD_LOG(INFO) << "worker " << request->worker_id()
                 << " forgotten at the request of token " << caller->token_id;
  return grpc::Status::OK;
}

}  // namespace trainyard::server
