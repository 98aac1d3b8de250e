// Certificates for the TLS tests, made at test time with the openssl CLI
// (none are checked in): a test CA, a server certificate it signs for
// 127.0.0.1 and localhost, a client certificate it signs (a worker's, for
// mTLS), and a second, unrelated CA with its own client certificate (the
// "rogue" one every check must refuse). EC P-256 keys, valid for a day.
#ifndef TRAINYARD_TESTS_TEST_CERTS_H_
#define TRAINYARD_TESTS_TEST_CERTS_H_

#include <string>

#include "absl/status/statusor.h"

namespace trainyard::itest {

struct TestCertificates {
  std::string ca;  // PEM files, all under one directory
  std::string server_cert, server_key;
  std::string client_cert, client_key;
  std::string rogue_ca;
  std::string rogue_client_cert, rogue_client_key;
};

// Writes the files into `dir` (created); INTERNAL with openssl's output
// when it fails.
absl::StatusOr<TestCertificates> MakeTestCertificates(const std::string& dir);

}  // namespace trainyard::itest

#endif  // TRAINYARD_TESTS_TEST_CERTS_H_
