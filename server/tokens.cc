#include "server/tokens.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/field_errors.h"

namespace trainyard::server {
namespace {

constexpr std::string_view kPrefix = "ytk_";
constexpr size_t kIdHexDigits = 12;
constexpr size_t kSecretBytes = 32;
// base64url of 32 bytes without padding.
constexpr size_t kSecretChars = 43;

absl::string_view Absl(std::string_view s) { return {s.data(), s.size()}; }

bool IsLowerHex(char c) {
  return absl::ascii_isdigit(c) || (c >= 'a' && c <= 'f');
}

bool IsBase64Url(char c) {
  return absl::ascii_isalnum(c) || c == '-' || c == '_';
}

}  // namespace

absl::StatusOr<NewToken> GenerateToken() {
  unsigned char id_bytes[kIdHexDigits / 2];
  unsigned char secret[kSecretBytes];
  if (RAND_bytes(id_bytes, sizeof(id_bytes)) != 1 ||
      RAND_bytes(secret, sizeof(secret)) != 1) {
    return absl::InternalError("cannot read the OS random source for a token");
  }
  NewToken t;
  const std::string id_hex = absl::BytesToHexString(absl::string_view(
      reinterpret_cast<const char*>(id_bytes), sizeof(id_bytes)));
  std::string secret_text;
  absl::WebSafeBase64Escape(
      absl::string_view(reinterpret_cast<const char*>(secret), sizeof(secret)),
      &secret_text);
  OPENSSL_cleanse(secret, sizeof(secret));
  t.id = absl::StrCat("t-", id_hex);
  t.token = absl::StrCat(Absl(kPrefix), id_hex, "_", secret_text);
  t.digest = TokenDigest(t.token);
  return t;
}

absl::StatusOr<std::string> TokenId(std::string_view token) {
  const size_t want = kPrefix.size() + kIdHexDigits + 1 + kSecretChars;
  bool ok = token.size() == want && token.substr(0, kPrefix.size()) == kPrefix &&
            token[kPrefix.size() + kIdHexDigits] == '_';
  for (size_t i = 0; ok && i < kIdHexDigits; ++i) {
    ok = IsLowerHex(token[kPrefix.size() + i]);
  }
  for (size_t i = kPrefix.size() + kIdHexDigits + 1; ok && i < token.size();
       ++i) {
    ok = IsBase64Url(token[i]);
  }
  if (!ok) {
    return absl::UnauthenticatedError(
        "malformed bearer token (expected ytk_<id>_<secret>)");
  }
  return absl::StrCat("t-", Absl(token.substr(kPrefix.size(), kIdHexDigits)));
}

std::string TokenDigest(std::string_view token) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(),
         digest);
  return absl::BytesToHexString(absl::string_view(
      reinterpret_cast<const char*>(digest), sizeof(digest)));
}

bool DigestsEqual(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

absl::Status CheckTenantName(std::string_view name, std::string_view field) {
  bool ok = !name.empty() && name.size() <= 63 &&
            absl::ascii_isalnum(name[0]);
  for (char c : name) {
    ok = ok && (absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-');
  }
  if (!ok) {
    return InvalidFieldError(
        Absl(field),
        absl::StrCat("\"", absl::CHexEscape(Absl(name.substr(0, 64))),
                     "\" is not a tenant name (1-63 characters of a-z, 0-9 "
                     "and '-', starting with a letter or digit)"));
  }
  return absl::OkStatus();
}

}  // namespace trainyard::server
