// AdminServiceImpl: the gRPC face of AdminService (tokens and tenants) over
// the AuthStore. Every call needs an admin token. Thin and thread-safe.
#ifndef TRAINYARD_SERVER_ADMIN_SERVICE_H_
#define TRAINYARD_SERVER_ADMIN_SERVICE_H_

#include "server/auth_store.h"
#include "server/authenticator.h"
#include "trainyard/v1/admin.grpc.pb.h"

namespace trainyard::server {

class AdminServiceImpl final : public v1::AdminService::Service {
 public:
  AdminServiceImpl(AuthStore* store, const Authenticator* auth)
      : store_(store), auth_(auth) {}

  grpc::Status CreateToken(grpc::ServerContext* context,
                           const v1::CreateTokenRequest* request,
                           v1::CreateTokenResponse* response) override;
  grpc::Status ListTokens(grpc::ServerContext* context,
                          const v1::ListTokensRequest* request,
                          v1::ListTokensResponse* response) override;
  grpc::Status RevokeToken(grpc::ServerContext* context,
                           const v1::RevokeTokenRequest* request,
                           v1::TokenInfo* response) override;
  grpc::Status SetTenant(grpc::ServerContext* context,
                         const v1::SetTenantRequest* request,
                         v1::Tenant* response) override;
  grpc::Status ListTenants(grpc::ServerContext* context,
                           const v1::ListTenantsRequest* request,
                           v1::ListTenantsResponse* response) override;

 private:
  AuthStore* const store_;
  const Authenticator* const auth_;
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_ADMIN_SERVICE_H_
