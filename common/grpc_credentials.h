// Transport credentials and bearer tokens for Trainyard's gRPC ends, in one
// place so that the server, the workers and the CLI agree on them.
//
// TLS is on when certificate files are given: the server presents
// cert+key and, given a client CA, asks every peer for a certificate and
// verifies any it gets against that CA (workers must present one; the
// WorkerService checks). Clients verify the server against `ca` and, for
// mTLS, present cert+key. With no files both sides speak plaintext, which
// the server allows only on loopback unless told otherwise.
//
// Pure functions apart from reading the named files; thread-safe.
#ifndef TRAINYARD_COMMON_GRPC_CREDENTIALS_H_
#define TRAINYARD_COMMON_GRPC_CREDENTIALS_H_

#include <grpcpp/client_context.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainyard {

struct ServerTlsFiles {
  std::string cert;       // PEM certificate chain; empty: no TLS
  std::string key;        // PEM private key
  std::string client_ca;  // PEM CA for client certificates; empty: no mTLS
  bool enabled() const { return !cert.empty(); }
};

struct ClientTlsFiles {
  std::string ca;    // PEM CA that signed the server; empty: plaintext
  std::string cert;  // PEM client certificate (mTLS); optional
  std::string key;   // its key; needed with cert
  // Overrides the name checked against the server certificate (tests,
  // servers reached through an IP not in their certificate).
  std::string server_name;
  bool enabled() const { return !ca.empty(); }
};

// INVALID_ARGUMENT naming the flag when a file is missing, unreadable or
// not PEM, holds no certificate (CA, cert) or private key (key), when the
// key is not the certificate's, or when only one of cert/key is given.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsFiles& files);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const ClientTlsFiles& files);

// Sets the channel arguments `files` asks for (the server name override).
void ApplyTlsChannelArgs(const ClientTlsFiles& files,
                         grpc::ChannelArguments& args);

// Why a client's connection failed, in words that name the flag to fix,
// from the error gRPC gave (a status message such as "failed to connect to
// all addresses; last error: ...: Ssl handshake failed: ... certificate
// verify failed"), so that a TLS handshake that failed is told apart from a
// server that is not there. `tls`: the client speaks TLS; `client_cert`:
// it presents a certificate (mTLS). Empty when the error is none of the
// TLS failures it knows.
std::string TlsFailureHint(absl::string_view error, bool tls, bool client_cert);

// The whole of a small text file (PEM, token); `what` names it in errors.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path,
                                          const std::string& what);

// Longest bearer token a client sends: the server's are 65 characters, and
// gRPC refuses a call whose metadata passes 8 KiB with a message that names
// no token.
inline constexpr size_t kMaxBearerTokenBytes = 1024;

// OK when `token` can go in an authorization header: 1 to
// kMaxBearerTokenBytes visible ASCII characters (gRPC aborts the process on
// a header value with a control or non-ASCII byte). Else UNAUTHENTICATED
// naming `what` (where the token came from), the byte and its position;
// the token itself is not quoted.
absl::Status CheckBearerToken(absl::string_view token, absl::string_view what);

// A bearer token file: its first line, whitespace trimmed, checked by
// CheckBearerToken. INVALID_ARGUMENT naming `what` when the file is
// unreadable or empty.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path,
                                          const std::string& what);

// Adds "authorization: Bearer <token>" to `context` (nothing for "").
void AddBearerToken(grpc::ClientContext& context, const std::string& token);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_GRPC_CREDENTIALS_H_
