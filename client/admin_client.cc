#include "client/admin_client.h"

namespace trainyard::client {
namespace {

namespace v1 = ::trainyard::v1;

// One unary AdminService call with the client's token and deadline.
template <typename Request, typename Response, typename Method>
absl::StatusOr<Response> Call(const JobClient& client, Method method,
                              const Request& request) {
  grpc::ClientContext context;
  client.Prepare(&context);
  Response response;
  grpc::Status s = method(&context, request, &response);
  if (!s.ok()) return client.Annotate(s);
  return response;
}

}  // namespace

absl::StatusOr<v1::CreateTokenResponse> AdminClient::CreateToken(
    const v1::CreateTokenRequest& request) {
  return Call<v1::CreateTokenRequest, v1::CreateTokenResponse>(
      client_,
      [this](auto* c, const auto& q, auto* r) {
        return admin_->CreateToken(c, q, r);
      },
      request);
}

absl::StatusOr<v1::ListTokensResponse> AdminClient::ListTokens(
    const v1::ListTokensRequest& request) {
  return Call<v1::ListTokensRequest, v1::ListTokensResponse>(
      client_,
      [this](auto* c, const auto& q, auto* r) {
        return admin_->ListTokens(c, q, r);
      },
      request);
}

absl::StatusOr<v1::TokenInfo> AdminClient::RevokeToken(const std::string& id) {
  v1::RevokeTokenRequest request;
  request.set_id(id);
  return Call<v1::RevokeTokenRequest, v1::TokenInfo>(
      client_,
      [this](auto* c, const auto& q, auto* r) {
        return admin_->RevokeToken(c, q, r);
      },
      request);
}

absl::StatusOr<v1::Tenant> AdminClient::SetTenant(const v1::Tenant& tenant) {
  v1::SetTenantRequest request;
  *request.mutable_tenant() = tenant;
  return Call<v1::SetTenantRequest, v1::Tenant>(
      client_,
      [this](auto* c, const auto& q, auto* r) {
        return admin_->SetTenant(c, q, r);
      },
      request);
}

absl::StatusOr<v1::ListTenantsResponse> AdminClient::ListTenants() {
  return Call<v1::ListTenantsRequest, v1::ListTenantsResponse>(
      client_,
      [this](auto* c, const auto& q, auto* r) {
        return admin_->ListTenants(c, q, r);
      },
      v1::ListTenantsRequest());
}

}  // namespace trainyard::client
