#include "common/grpc_credentials.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>
#include <memory>

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

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using UniqueX509 = std::unique_ptr<X509, X509Free>;

std::unique_ptr<BIO, BioFree> MemoryBio(const std::string& pem) {
  return std::unique_ptr<BIO, BioFree>(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// The first certificate of a PEM file (checked to be one, so that a key
// or a garbled file given for a certificate is named here rather than
// failing inside gRPC's handshake as "cannot listen" or "cannot reach").
absl::StatusOr<UniqueX509> FirstCertificate(const std::string& pem,
                                            const std::string& path,
                                            const std::string& what) {
  auto bio = MemoryBio(pem);
  UniqueX509 cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " ", path, ": holds no PEM certificate",
        absl::StrContains(pem, "PRIVATE KEY") ? " (it is a private key)" : ""));
  }
  return cert;
}

std::string TimeText(const ASN1_TIME* t) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  ASN1_TIME_print(bio.get(), t);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(std::max(n, 0L)));
}

// A certificate outside its validity is refused where it is given, not
// left to fail every handshake with a reason that cannot say which end is
// wrong.
absl::Status CheckValidNow(X509* cert, const std::string& path,
                           const std::string& what) {
  if (X509_cmp_current_time(X509_get0_notAfter(cert)) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", path, ": the certificate expired on ",
                     TimeText(X509_get0_notAfter(cert)), "; renew it"));
  }
  if (X509_cmp_current_time(X509_get0_notBefore(cert)) > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " ", path, ": the certificate is not valid before ",
        TimeText(X509_get0_notBefore(cert)), " (is this clock right?)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadCertificates(const std::string& path,
                                             const std::string& what) {
  ASSIGN_OR_RETURN(std::string pem, ReadPem(path, what));
  RETURN_IF_ERROR(FirstCertificate(pem, path, what).status());
  return pem;
}

// A certificate (chain) and its private key, checked to belong together.
struct KeyPair {
  std::string cert, key;
};

absl::StatusOr<KeyPair> ReadKeyPair(const std::string& cert_path,
                                    const std::string& key_path) {
  KeyPair pair;
  ASSIGN_OR_RETURN(pair.cert, ReadPem(cert_path, "--tls-cert"));
  ASSIGN_OR_RETURN(UniqueX509 cert,
                   FirstCertificate(pair.cert, cert_path, "--tls-cert"));
  RETURN_IF_ERROR(CheckValidNow(cert.get(), cert_path, "--tls-cert"));
  ASSIGN_OR_RETURN(pair.key, ReadPem(key_path, "--tls-key"));
  if (absl::StrContains(pair.key, "ENCRYPTED")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-key ", key_path,
                     ": an encrypted private key (give it unencrypted)"));
  }
  auto bio = MemoryBio(pair.key);
  // No pass phrase: OpenSSL's default callback would prompt on a terminal.
  pem_password_cb* no_pass_phrase = [](char*, int, int, void*) { return 0; };
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, no_pass_phrase, nullptr));
  ERR_clear_error();
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls-key ", key_path, ": holds no PEM private key",
        absl::StrContains(pair.key, "CERTIFICATE") ? " (it is a certificate)"
                                                   : ""));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls-key ", key_path,
        " is not the key of the certificate in --tls-cert ", cert_path));
  }
  return pair;
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
  ASSIGN_OR_RETURN(KeyPair read, ReadKeyPair(files.cert, files.key));
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  pair.cert_chain = std::move(read.cert);
  pair.private_key = std::move(read.key);
  options.pem_key_cert_pairs.push_back(std::move(pair));
  if (!files.client_ca.empty()) {
    ASSIGN_OR_RETURN(options.pem_root_certs,
                     ReadCertificates(files.client_ca, "--tls-client-ca"));
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
  ASSIGN_OR_RETURN(options.pem_root_certs,
                   ReadCertificates(files.ca, "--tls-ca"));
  if (!files.cert.empty()) {
    ASSIGN_OR_RETURN(KeyPair pair, ReadKeyPair(files.cert, files.key));
    options.pem_cert_chain = std::move(pair.cert);
    options.pem_private_key = std::move(pair.key);
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

std::string TlsFailureHint(absl::string_view error, bool tls,
                           bool client_cert) {
  const std::string lower = absl::AsciiStrToLower(error);
  if (absl::StrContains(lower, "certificate verify failed") ||
      absl::StrContains(lower, "certificate_verify_failed")) {
    return "its TLS certificate does not verify with the CA of --tls-ca "
           "(signed by another CA, expired or not yet valid)";
  }
  if (absl::StrContains(lower, "peer name")) {
    return "its TLS certificate is not for that name; --tls-server-name "
           "names the one it holds";
  }
  if (tls && absl::StrContains(lower, "wrong version number")) {
    return "it does not speak TLS (leave out --tls-ca)";
  }
  if (absl::StrContains(lower, "socket closed")) {
    if (!tls) {
      return "it closed the connection (a TLS server? give --tls-ca)";
    }
    // The handshake verified the server, which then hung up: it did not
    // take the client's certificate.
    if (client_cert) {
      return "it closed the connection in the TLS handshake (does it "
             "trust the CA that signed --tls-cert? its --tls-client-ca)";
    }
  }
  return "";
}

}  // namespace trainyard
