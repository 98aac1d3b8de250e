#include "server/health_endpoint.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/replace_file.h"
#include "common/status_macros.h"
#include "trainyard/v1/admin.grpc.pb.h"
#include "trainyard/v1/cluster.grpc.pb.h"
#include "trainyard/v1/jobs.grpc.pb.h"
#include "trainyard/v1/worker.grpc.pb.h"

namespace trainyard::server {

absl::Status CheckHealthListen(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--health-listen ", listen, ": expected HOST:PORT, e.g. 0.0.0.0:7071"));
  }
  return absl::OkStatus();
}

void MarkServicesServing(grpc::Server& server) {
  grpc::HealthCheckServiceInterface* health = server.GetHealthCheckService();
  if (health == nullptr) return;
  for (const char* service : {v1::JobService::service_full_name(),
                              v1::ClusterService::service_full_name(),
                              v1::WorkerService::service_full_name(),
                              v1::AdminService::service_full_name()}) {
    health->SetServingStatus(service, true);
  }
}

absl::StatusOr<std::unique_ptr<HealthEndpoint>> HealthEndpoint::Start(
    const std::string& listen, const std::string& address_file) {
  if (absl::Status s = CheckHealthListen(listen); !s.ok()) return s;
  const size_t colon = listen.rfind(':');
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &bound);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // one owner
  std::unique_ptr<HealthEndpoint> endpoint(new HealthEndpoint());
  endpoint->server_ = builder.BuildAndStart();
  if (endpoint->server_ == nullptr || bound == 0) {
    return absl::UnavailableError(absl::StrCat(
        "--health-listen ", listen, ": cannot listen (address in use?)"));
  }
  if (grpc::HealthCheckServiceInterface* health =
          endpoint->server_->GetHealthCheckService()) {
    health->SetServingStatus(false);  // until the API port serves
  }
  endpoint->address_ = absl::StrCat(listen.substr(0, colon), ":", bound);
  if (!address_file.empty()) {
    RETURN_IF_ERROR(
        ReplaceFileDurably(address_file, endpoint->address_ + "\n"));
    endpoint->address_file_ = address_file;
  }
  return endpoint;
}

HealthEndpoint::~HealthEndpoint() { Shutdown(); }

void HealthEndpoint::SetServing() {
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus(true);
  MarkServicesServing(*server_);
}

void HealthEndpoint::SetNotServing() {
  if (server_ != nullptr && server_->GetHealthCheckService() != nullptr) {
    server_->GetHealthCheckService()->Shutdown();
  }
}

void HealthEndpoint::Shutdown() {
  if (server_ == nullptr) return;
  if (server_->GetHealthCheckService() != nullptr) {
    server_->GetHealthCheckService()->Shutdown();
  }
  server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  server_->Wait();
  server_.reset();
  if (!address_file_.empty()) {
    std::error_code ec;
    std::filesystem::remove(address_file_, ec);
  }
}

}  // namespace trainyard::server
