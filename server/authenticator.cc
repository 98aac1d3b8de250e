#include "server/authenticator.h"

#include <grpc/grpc_security_constants.h>
#include <grpcpp/security/auth_context.h>

#include <iterator>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace trainyard::server {
namespace {

constexpr std::string_view kBearer = "Bearer ";

// Whether the peer presented a client certificate that the server's TLS
// handshake verified (gRPC exposes its subject as the peer identity only
// then).
bool HasVerifiedClientCert(const grpc::ServerContextBase& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  return auth != nullptr && auth->IsPeerAuthenticated() &&
         !auth->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME).empty();
}

}  // namespace

absl::StatusOr<std::string_view> BearerToken(
    const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  auto [first, end] = metadata.equal_range("authorization");
  if (first == end) {
    return absl::UnauthenticatedError(
        "missing bearer token (metadata \"authorization: Bearer <token>\")");
  }
  if (std::next(first) != end) {
    return absl::UnauthenticatedError(
        "more than one authorization metadata entry; send one \"Bearer "
        "<token>\"");
  }
  std::string_view value(first->second.data(), first->second.size());
  // The scheme is case-insensitive (RFC 7235), the token is not.
  if (value.size() < kBearer.size() ||
      !absl::EqualsIgnoreCase(
          absl::string_view(value.data(), kBearer.size()),
          absl::string_view(kBearer.data(), kBearer.size()))) {
    return absl::UnauthenticatedError(
        "the authorization metadata is not \"Bearer <token>\"");
  }
  return value.substr(kBearer.size());
}

absl::StatusOr<Caller> Authenticator::Authenticate(
    const grpc::ServerContextBase& context) const {
  ASSIGN_OR_RETURN(std::string_view token, BearerToken(context));
  return store_->Authenticate(token);
}

absl::StatusOr<Caller> Authenticator::ForClient(
    const grpc::ServerContextBase& context) const {
  ASSIGN_OR_RETURN(Caller caller, Authenticate(context));
  if (caller.role != v1::TENANT && caller.role != v1::ADMIN) {
    return absl::PermissionDeniedError(absl::StrCat(
        "token ", caller.token_id,
        " is a worker token; jobs and cluster calls need a tenant or "
        "admin token"));
  }
  return caller;
}

std::function<absl::Status()> Authenticator::TokenStillValid(
    const grpc::ServerContextBase& context) const {
  absl::StatusOr<std::string_view> token = BearerToken(context);
  return [store = store_, token = std::string(token.ok() ? *token : "")] {
    if (!store->Authenticate(token).ok()) {
      return absl::UnauthenticatedError(
          "the token of this stream has been revoked");
    }
    return absl::OkStatus();
  };
}

absl::StatusOr<Caller> Authenticator::ForAdmin(
    const grpc::ServerContextBase& context) const {
  ASSIGN_OR_RETURN(Caller caller, Authenticate(context));
  if (!caller.is_admin()) {
    return absl::PermissionDeniedError(
        absl::StrCat("token ", caller.token_id, " of tenant ", caller.tenant,
                     " is not an admin token"));
  }
  return caller;
}

absl::StatusOr<Caller> Authenticator::ForWorker(
    const grpc::ServerContextBase& context) const {
  if (require_worker_cert_ && !HasVerifiedClientCert(context)) {
    return absl::UnauthenticatedError(
        "workers must present a client certificate signed by the server's "
        "--tls-client-ca (mTLS)");
  }
  ASSIGN_OR_RETURN(Caller caller, Authenticate(context));
  if (caller.role != v1::WORKER) {
    return absl::PermissionDeniedError(
        absl::StrCat("token ", caller.token_id, " is not a worker join token"));
  }
  return caller;
}

}  // namespace trainyard::server
