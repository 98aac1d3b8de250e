#include "server/admin_service.h"

#include "common/field_errors.h"
#include "common/log.h"
#include "common/rpc_status.h"

namespace trainyard::server {

grpc::Status AdminServiceImpl::CreateToken(
    grpc::ServerContext* context, const v1::CreateTokenRequest* request,
    v1::CreateTokenResponse* response) {
  absl::StatusOr<Caller> caller = auth_->ForAdmin(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<CreatedToken> created = store_->CreateToken(
      request->tenant(), request->role(), request->description());
  if (!created.ok()) return ToGrpcStatus(created.status());
  YARD_LOG(INFO) << "token " << created->info.id() << " ("
                 << v1::TokenRole_Name(created->info.role()) << ") for tenant "
                 << created->info.tenant() << " created by token "
                 << caller->token_id;
  *response->mutable_info() = std::move(created->info);
  response->set_token(std::move(created->token));
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::ListTokens(grpc::ServerContext* context,
                                          const v1::ListTokensRequest* request,
                                          v1::ListTokensResponse* response) {
  absl::StatusOr<Caller> caller = auth_->ForAdmin(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  for (v1::TokenInfo& t :
       store_->ListTokens(request->tenant(), request->include_revoked())) {
    *response->add_tokens() = std::move(t);
  }
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::RevokeToken(
    grpc::ServerContext* context, const v1::RevokeTokenRequest* request,
    v1::TokenInfo* response) {
  absl::StatusOr<Caller> caller = auth_->ForAdmin(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (request->id().empty()) {
    return ToGrpcStatus(InvalidFieldError("id", "required"));
  }
  absl::StatusOr<v1::TokenInfo> info = store_->RevokeToken(request->id());
  if (!info.ok()) return ToGrpcStatus(info.status());
  YARD_LOG(INFO) << "token " << info->id() << " revoked by token "
                 << caller->token_id;
  *response = std::move(*info);
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::SetTenant(grpc::ServerContext* context,
                                         const v1::SetTenantRequest* request,
                                         v1::Tenant* response) {
  absl::StatusOr<Caller> caller = auth_->ForAdmin(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<v1::Tenant> t = store_->SetTenant(request->tenant());
  if (!t.ok()) return ToGrpcStatus(t.status());
  *response = std::move(*t);
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::ListTenants(grpc::ServerContext* context,
                                           const v1::ListTenantsRequest*,
                                           v1::ListTenantsResponse* response) {
  absl::StatusOr<Caller> caller = auth_->ForAdmin(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  for (v1::Tenant& t : store_->ListTenants()) {
    *response->add_tenants() = std::move(t);
  }
  return grpc::Status::OK;
}

}  // namespace trainyard::server
