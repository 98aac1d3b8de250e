// AdminClient: tokens and tenants of a yard-server (AdminService), over the
// channel, token and deadlines of a JobClient. Calls need an admin token.
// Thread-safe like JobClient.
#ifndef TRAINYARD_CLIENT_ADMIN_CLIENT_H_
#define TRAINYARD_CLIENT_ADMIN_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client/job_client.h"
#include "trainyard/v1/admin.grpc.pb.h"

namespace trainyard::client {

class AdminClient {
 public:
  explicit AdminClient(const JobClient& client)
      : client_(client),
        admin_(trainyard::v1::AdminService::NewStub(client.channel())) {}

  absl::StatusOr<trainyard::v1::CreateTokenResponse> CreateToken(
      const trainyard::v1::CreateTokenRequest& request);
  absl::StatusOr<trainyard::v1::ListTokensResponse> ListTokens(
      const trainyard::v1::ListTokensRequest& request);
  absl::StatusOr<trainyard::v1::TokenInfo> RevokeToken(const std::string& id);
  absl::StatusOr<trainyard::v1::Tenant> SetTenant(
      const trainyard::v1::Tenant& tenant);
  absl::StatusOr<trainyard::v1::ListTenantsResponse> ListTenants();

 private:
  const JobClient& client_;
  std::unique_ptr<trainyard::v1::AdminService::Stub> admin_;
};

}  // namespace trainyard::client

#endif  // TRAINYARD_CLIENT_ADMIN_CLIENT_H_
