#include "tests/test_certs.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "tests/process.h"

namespace trainyard::itest {
namespace {

// Makes CA NAME (NAME.pem/.key) and leaf certificates signed by a CA.
constexpr char kScript[] = R"sh(
set -eu
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() {
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 1 -subj "/CN=$1" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign
}
leaf() {  # leaf NAME CA EXTENSIONS
  key "$1.key"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$1"
  printf '%s\n' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial \
    -out "$1.pem" -days 1 -extfile "$1.ext" 2>/dev/null
}
ca test-ca
ca rogue-ca
leaf server test-ca "subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth"
leaf worker test-ca "extendedKeyUsage=clientAuth"
leaf rogue-worker rogue-ca "extendedKeyUsage=clientAuth"
)sh";

}  // namespace

absl::StatusOr<TestCertificates> MakeTestCertificates(const std::string& dir) {
  std::filesystem::create_directories(dir);
  CommandResult r = RunCommand({"/bin/bash", "-c", kScript},
                               absl::StrCat(dir, "/openssl"),
                               absl::Seconds(60), dir);
  if (r.exit_code() != 0) {
    return absl::InternalError(absl::StrCat(
        "making test certificates with openssl failed (", r.status.ToString(),
        "): ", r.err));
  }
  auto f = [&](const char* name) { return absl::StrCat(dir, "/", name); };
  return TestCertificates{f("test-ca.pem"),      f("server.pem"),
                          f("server.key"),       f("worker.pem"),
                          f("worker.key"),       f("rogue-ca.pem"),
                          f("rogue-worker.pem"), f("rogue-worker.key")};
}

}  // namespace trainyard::itest
