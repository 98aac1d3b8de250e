// AuthStore: the tokens and tenants of one yard-server, kept in their own
// SQLite file (STATE_DIR/auth.db, mode 0600) and mirrored in memory, so
// authenticating a call — done on every RPC — is a hash and a map lookup
// under a shared lock, never a disk read. Writes (create, revoke, set
// tenant) go to disk first and update the mirror only once committed.
//
// The store never holds a token's secret: only its SHA-256 (tokens.h).
// Safe for concurrent use.
#ifndef TRAINYARD_SERVER_AUTH_STORE_H_
#define TRAINYARD_SERVER_AUTH_STORE_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "server/sqlite_db.h"
#include "trainyard/v1/admin.pb.h"

namespace trainyard::server {

// Who is calling: what a valid token stands for.
struct Caller {
  std::string token_id;
  std::string tenant;
  v1::TokenRole role = v1::TOKEN_ROLE_UNSPECIFIED;

  bool is_admin() const { return role == v1::ADMIN; }
};

struct CreatedToken {
  v1::TokenInfo info;
  std::string token;  // the secret, for the caller to hand over once
};

inline constexpr size_t kMaxTokenDescription = 256;
inline constexpr double kMaxTenantWeight = 1000;

class AuthStore {
 public:
  // Opens or creates the file at `path` (0600). A file that is not ours is
  // refused with FAILED_PRECONDITION and left untouched.
  static absl::StatusOr<std::unique_ptr<AuthStore>> Open(
      const std::string& path, Clock* clock);
  // The number of tokens (revoked ones too) in the auth store at `path`,
  // read without writing anything: 0 for a missing file or a new one.
  // FAILED_PRECONDITION, as Open, for a file that is not ours.
  static absl::StatusOr<int64_t> CountTokens(const std::string& path);

  // UNAUTHENTICATED for a malformed, unknown or revoked token; the message
  // never says which, nor echoes the token.
  absl::StatusOr<Caller> Authenticate(std::string_view token) const;

  // INVALID_ARGUMENT for a bad tenant name, role or description.
  absl::StatusOr<CreatedToken> CreateToken(const std::string& tenant,
                                           v1::TokenRole role,
                                           const std::string& description);
  std::vector<v1::TokenInfo> ListTokens(const std::string& tenant,
                                        bool include_revoked) const;
  // NOT_FOUND for an unknown id; revoking a revoked token changes nothing.
  absl::StatusOr<v1::TokenInfo> RevokeToken(const std::string& id);
  // Whether any token exists at all (false on a brand-new server).
  bool Empty() const;

  // Creates or replaces a tenant's limits; INVALID_ARGUMENT for a bad name,
  // a negative limit or a weight outside (0, 1000].
  absl::StatusOr<v1::Tenant> SetTenant(const v1::Tenant& tenant);
  std::vector<v1::Tenant> ListTenants() const;
  // The tenant's limits; defaults (weight 1, no limits) when never set.
  v1::Tenant GetTenant(const std::string& name) const;

 private:
  struct Entry {
    v1::TokenInfo info;
    std::string digest;
  };
  AuthStore(std::unique_ptr<SqliteDb> db, Clock* clock)
      : db_(std::move(db)), clock_(clock) {}
  absl::Status Load();

  std::unique_ptr<SqliteDb> db_ ABSL_PT_GUARDED_BY(write_mu_);
  Clock* const clock_;
  absl::Mutex write_mu_;  // one writer at a time; taken before mu_
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> tokens_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, v1::Tenant> tenants_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_AUTH_STORE_H_
