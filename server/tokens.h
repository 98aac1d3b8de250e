// Bearer tokens: how they are made, what they look like, and what the
// server keeps of them. A token is "ytk_<id>_<secret>": <id> is 12 hex
// digits, public (it names the token in listings and revocations), and
// <secret> is 256 random bits from the OS CSPRNG in base64url. The server
// stores only the SHA-256 of the whole token: a stolen auth.db grants
// nothing, and since the secret has 256 bits of entropy a slow password
// hash would add no protection. Pure functions; thread-safe.
#ifndef TRAINYARD_SERVER_TOKENS_H_
#define TRAINYARD_SERVER_TOKENS_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainyard::server {

struct NewToken {
  std::string id;      // "t-" + 12 hex digits
  std::string token;   // the secret string handed to the user once
  std::string digest;  // hex SHA-256 of `token`, what the store keeps
};

// A fresh token from the OS random source; INTERNAL if it fails.
absl::StatusOr<NewToken> GenerateToken();

// The id a well-formed token names ("t-..."), or UNAUTHENTICATED when
// `token` does not have the token's shape (nothing about it is echoed).
absl::StatusOr<std::string> TokenId(std::string_view token);

// Hex SHA-256 of `token`.
std::string TokenDigest(std::string_view token);

// Compares two digests in time independent of where they differ.
bool DigestsEqual(std::string_view a, std::string_view b);

// INVALID_ARGUMENT unless `name` is a tenant name: 1-63 characters of
// [a-z0-9-], starting with a letter or digit. `field` names the input in
// the message.
absl::Status CheckTenantName(std::string_view name, std::string_view field);

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_TOKENS_H_
