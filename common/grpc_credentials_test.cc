// TLS files checked where they are given: a certificate outside its
// validity period is refused at start, naming the flag, the file and the
// date, for the server's certificate and a worker's client certificate.
#include "common/grpc_credentials.h"

#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

struct Pem {
  std::string cert, key;
};

// A self-signed EC certificate valid from now + `from` to now + `to`.
Pem MakeCertificate(long from_seconds, long to_seconds) {
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      EVP_EC_gen("P-256"), EVP_PKEY_free);
  std::unique_ptr<X509, decltype(&X509_free)> cert(X509_new(), X509_free);
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), from_seconds);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), to_seconds);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("yard"),
                             -1, -1, 0);
  X509_set_issuer_name(cert.get(), name);
  X509_set_pubkey(cert.get(), key.get());
  X509_sign(cert.get(), key.get(), EVP_sha256());
  auto text = [](auto write) {
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()),
                                                  BIO_free);
    write(bio.get());
    char* data = nullptr;
    const long n = BIO_get_mem_data(bio.get(), &data);
    return std::string(data, static_cast<size_t>(n));
  };
  return Pem{text([&](BIO* b) { PEM_write_bio_X509(b, cert.get()); }),
             text([&](BIO* b) {
               PEM_write_bio_PrivateKey(b, key.get(), nullptr, nullptr, 0,
                                        nullptr, nullptr);
             })};
}

class GrpcCredentialsTest : public ::testing::Test {
 protected:
  GrpcCredentialsTest() {
    char pattern[] = "/tmp/grpc_credentials_test.XXXXXX";
    dir_ = mkdtemp(pattern);
  }
  ~GrpcCredentialsTest() override {
    std::system(("rm -rf '" + dir_ + "'").c_str());
  }

  // Writes the pair as NAME.pem and NAME.key; returns the files.
  ServerTlsFiles Write(const std::string& name, const Pem& pem) {
    ServerTlsFiles f;
    f.cert = dir_ + "/" + name + ".pem";
    f.key = dir_ + "/" + name + ".key";
    std::ofstream(f.cert) << pem.cert;
    std::ofstream(f.key) << pem.key;
    return f;
  }

  std::string dir_;
};

constexpr long kDay = 24 * 3600;

TEST_F(GrpcCredentialsTest, ACertificateValidNowIsTaken) {
  const ServerTlsFiles ok = Write("ok", MakeCertificate(-kDay, kDay));
  EXPECT_TRUE(MakeServerCredentials(ok).ok());
}

TEST_F(GrpcCredentialsTest, AnExpiredCertificateIsRefusedWithItsDate) {
  const ServerTlsFiles old = Write("old", MakeCertificate(-3 * kDay, -kDay));
  absl::Status s = MakeServerCredentials(old).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("--tls-cert " + old.cert +
                                     ": the certificate expired on "));
  EXPECT_THAT(s.message(), HasSubstr("GMT"));
  // A worker's client certificate too.
  ClientTlsFiles client;
  client.ca = old.cert;
  client.cert = old.cert;
  client.key = old.key;
  s = MakeChannelCredentials(client).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("expired"));
}

TEST_F(GrpcCredentialsTest, ACertificateNotValidYetIsRefused) {
  const ServerTlsFiles later = Write("later", MakeCertificate(kDay, 2 * kDay));
  absl::Status s = MakeServerCredentials(later).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("is not valid before"));
}

// The messages gRPC 1.51 (Debian 12) gave a worker in each case, verbatim.
TEST(TlsFailureHintTest, NamesTheFlagToFix) {
  constexpr char kHead[] =
      "failed to connect to all addresses; last error: UNKNOWN: "
      "ipv4:127.0.0.1:40167: ";
  EXPECT_EQ(TlsFailureHint(absl::StrCat(kHead,
                                        "Ssl handshake failed: SSL_ERROR_SSL: "
                                        "error:0A000086:SSL routines::"
                                        "certificate verify failed"),
                           true, true),
            "its TLS certificate does not verify with the CA of --tls-ca "
            "(signed by another CA, expired or not yet valid)");
  EXPECT_EQ(TlsFailureHint(absl::StrCat(kHead,
                                        "Peer name other.example is not in "
                                        "peer certificate"),
                           true, false),
            "its TLS certificate is not for that name; --tls-server-name names "
            "the one it holds");
  const std::string closed = absl::StrCat(kHead, "Socket closed");
  EXPECT_EQ(TlsFailureHint(closed, false, false),
            "it closed the connection (a TLS server? give --tls-ca)");
  EXPECT_EQ(TlsFailureHint(closed, true, true),
            "it closed the connection in the TLS handshake (does it trust "
            "the CA that signed --tls-cert? its --tls-client-ca)");
  EXPECT_EQ(TlsFailureHint(closed, true, false), "");
  EXPECT_EQ(TlsFailureHint("Ssl handshake failed: WRONG_VERSION_NUMBER "
                           "wrong version number",
                           true, false),
            "it does not speak TLS (leave out --tls-ca)");
  EXPECT_EQ(
      TlsFailureHint(absl::StrCat(kHead, "Connection refused"), true, true),
      "");
}

}  // namespace
}  // namespace trainyard
