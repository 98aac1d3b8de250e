#include "common/grpc_credentials.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/read_file.h"
#include "common/status_macros.h"

namespace trainyard {
namespace {

// Certificates and keys are a few KiB; anything far larger is a wrong path.
constexpr int64_t kMaxFileBytes = 1 << 20;

absl::StatusOr<std::string> ReadPem(const std::string& path,
                                    const std::string& what) {
  ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, what));
  if (!absl::StrContains(text, "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", path, ": not a PEM file"));
  }
  return text;
}

}  // namespace

absl::StatusOr<std::string> ReadSmallFile(const std::string& path,
                                          const std::string& what) {
  absl::StatusOr<std::string> text = ReadWholeFile(path, kMaxFileBytes);
  if (!text.ok()) {
    // The path is in the message already; say which file it was meant to be.
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", text.status().message()));
  }
  return text;
}

absl::Status CheckBearerToken(absl::string_view token, absl::string_view what) {
  if (token.empty()) {
    return absl::UnauthenticatedError(absl::StrCat(what, ": empty token"));
  }
  if (token.size() > kMaxBearerTokenBytes) {
    return absl::UnauthenticatedError(absl::StrCat(
        what, ": the token is ", token.size(),
        " bytes long; a bearer token is at most ", kMaxBearerTokenBytes));
  }
  for (size_t i = 0; i < token.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(token[i]);
    if (c <= 0x20 || c >= 0x7f) {
      return absl::UnauthenticatedError(absl::StrFormat(
          "%s: the token has byte 0x%02x at position %d; a bearer token is "
          "visible ASCII characters only (a stray space, tab or pasted "
          "character?)",
          what, c, i + 1));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path,
                                          const std::string& what) {
  ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, what));
  std::string line = text.substr(0, text.find('\n'));
  absl::StripAsciiWhitespace(&line);
  if (line.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, ": empty"));
  }
  RETURN_IF_ERROR(CheckBearerToken(line, absl::StrCat(what, " ", path)));
  return line;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsFiles& files) {
  if (!files.enabled()) {
    if (!files.key.empty() || !files.client_ca.empty()) {
      return absl::InvalidArgumentError(
          "--tls-key and --tls-client-ca need --tls-cert");
    }
    return grpc::InsecureServerCredentials();
  }
  if (files.key.empty()) {
    return absl::InvalidArgumentError("--tls-cert needs --tls-key");
  }
  grpc::SslServerCredentialsOptions options;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(pair.cert_chain, ReadPem(files.cert, "--tls-cert"));
  ASSIGN_OR_RETURN(pair.private_key, ReadPem(files.key, "--tls-key"));
  options.pem_key_cert_pairs.push_back(std::move(pair));
  if (!files.client_ca.empty()) {
    ASSIGN_OR_RETURN(options.pem_root_certs,
                     ReadPem(files.client_ca, "--tls-client-ca"));
    // Clients (the CLI) may come without a certificate; one that comes
    // must verify. Workers are required to have one (Authenticator).
    options.client_certificate_request =
        GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const ClientTlsFiles& files) {
  if (!files.enabled()) {
    if (!files.cert.empty() || !files.key.empty()) {
      return absl::InvalidArgumentError(
          "--tls-cert and --tls-key need --tls-ca (the server's CA)");
    }
    return grpc::InsecureChannelCredentials();
  }
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  grpc::SslCredentialsOptions options;
  ASSIGN_OR_RETURN(options.pem_root_certs, ReadPem(files.ca, "--tls-ca"));
  if (!files.cert.empty()) {
    ASSIGN_OR_RETURN(options.pem_cert_chain, ReadPem(files.cert, "--tls-cert"));
    ASSIGN_OR_RETURN(options.pem_private_key, ReadPem(files.key, "--tls-key"));
  }
  return grpc::SslCredentials(options);
}

void ApplyTlsChannelArgs(const ClientTlsFiles& files,
                         grpc::ChannelArguments& args) {
  if (files.enabled() && !files.server_name.empty()) {
    args.SetSslTargetNameOverride(files.server_name);
  }
}

void AddBearerToken(grpc::ClientContext& context, const std::string& token) {
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
}

}  // namespace trainyard
