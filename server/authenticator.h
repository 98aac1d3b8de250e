// Authenticator: turns the bearer token of an incoming call into a Caller
// and checks that the caller's role may use the service. Every gRPC
// service of yard-server except health and reflection asks it first.
//
//   JobService, ClusterService  TENANT or ADMIN tokens
//   AdminService                ADMIN tokens
//   WorkerService               WORKER tokens, and with --tls-client-ca a
//                               client certificate that CA signed (mTLS)
//
// Errors: UNAUTHENTICATED when the token is missing, malformed, unknown or
// revoked (or a worker has no verified certificate); PERMISSION_DENIED when
// a valid token's role may not use the service. Thread-safe.
#ifndef TRAINYARD_SERVER_AUTHENTICATOR_H_
#define TRAINYARD_SERVER_AUTHENTICATOR_H_

#include <grpcpp/server_context.h>

#include <functional>
#include <string_view>

#include "absl/status/statusor.h"
#include "server/auth_store.h"

namespace trainyard::server {

class Authenticator {
 public:
  // `require_worker_cert`: workers must present a verified client
  // certificate (the server's TLS credentials check it against the CA).
  Authenticator(const AuthStore* store, bool require_worker_cert)
      : store_(store), require_worker_cert_(require_worker_cert) {}

  absl::StatusOr<Caller> ForClient(
      const grpc::ServerContextBase& context) const;
  absl::StatusOr<Caller> ForAdmin(const grpc::ServerContextBase& context) const;
  absl::StatusOr<Caller> ForWorker(
      const grpc::ServerContextBase& context) const;

  // What a stream opened with `context`'s token (which authenticated)
  // checks as it goes, after the call's context may be gone:
  // UNAUTHENTICATED once that token has been revoked.
  std::function<absl::Status()> TokenStillValid(
      const grpc::ServerContextBase& context) const;

 private:
  absl::StatusOr<Caller> Authenticate(
      const grpc::ServerContextBase& context) const;

  const AuthStore* const store_;
  const bool require_worker_cert_;
};

// The token in an "authorization: Bearer <token>" metadata value, or
// UNAUTHENTICATED naming what is missing.
absl::StatusOr<std::string_view> BearerToken(
    const grpc::ServerContextBase& context);

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_AUTHENTICATOR_H_
