// HealthEndpoint: a second gRPC port that serves only grpc.health.v1.Health,
// for Kubernetes' native gRPC liveness and readiness probes. It carries no
// job data and accepts no commands, so unlike the API port it may bind a
// non-loopback address (the kubelet probes the pod IP). It is bound before
// the store opens and answers NOT_SERVING until SetServing (once the API
// port serves), then SERVING until shutdown begins.
//
// Start/Shutdown/destruction are for one owner thread.
#ifndef TRAINYARD_SERVER_HEALTH_ENDPOINT_H_
#define TRAINYARD_SERVER_HEALTH_ENDPOINT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace trainyard::server {

// Marks each Trainyard service SERVING in `server`'s health service beside
// the server as a whole (""), so a client may ask for the service it calls
// (grpc_health_probe -service=trainyard.v1.JobService). They share the
// server's fate: shutting the health service down turns all NOT_SERVING.
void MarkServicesServing(grpc::Server& server);

// INVALID_ARGUMENT naming --health-listen unless `listen` is HOST:PORT.
absl::Status CheckHealthListen(const std::string& listen);

class HealthEndpoint {
 public:
  // `listen` is HOST:PORT (port 0 picks one); the bound address is written
  // to `address_file` when it is not empty. INVALID_ARGUMENT for a bad
  // address, UNAVAILABLE when it cannot bind. Answers NOT_SERVING.
  static absl::StatusOr<std::unique_ptr<HealthEndpoint>> Start(
      const std::string& listen, const std::string& address_file);
  ~HealthEndpoint();

  const std::string& address() const { return address_; }
  // Reports SERVING, for the server and each Trainyard service.
  void SetServing();
  // Reports NOT_SERVING from now on; the port stays open (a drain).
  void SetNotServing();
  // Reports NOT_SERVING, then stops the port. Idempotent.
  void Shutdown();

 private:
  HealthEndpoint() = default;

  std::string address_;
  std::string address_file_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_HEALTH_ENDPOINT_H_
