#include "server/auth_store.h"

#include <cmath>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/field_errors.h"
#include "common/proto_time.h"
#include "common/status_macros.h"
#include "server/tokens.h"
#include "spec/limits.h"

namespace trainyard::server {
namespace {

// "TYA1" in the SQLite header's application_id: marks the file as ours.
constexpr int64_t kAuthApplicationId = 0x54594131;

constexpr char kAuthSchema[] = R"sql(
CREATE TABLE tokens (
  id TEXT PRIMARY KEY,
  tenant TEXT NOT NULL,
  role INTEGER NOT NULL,
  description TEXT NOT NULL,
  digest TEXT NOT NULL,
  create_ms INTEGER NOT NULL,
  revoke_ms INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE tenants (
  name TEXT PRIMARY KEY,
  weight_milli INTEGER NOT NULL,
  max_gpus INTEGER NOT NULL,
  max_queued_jobs INTEGER NOT NULL,
  max_cpu_slots INTEGER NOT NULL,
  has_max_priority INTEGER NOT NULL DEFAULT 0,
  max_priority INTEGER NOT NULL DEFAULT 0
);
)sql";

// Columns added since the first schema, for stores made before them.
constexpr char kAddMaxPriority[] = R"sql(
ALTER TABLE tenants ADD COLUMN has_max_priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tenants ADD COLUMN max_priority INTEGER NOT NULL DEFAULT 0;
)sql";

// The same message for every rejected token: which check failed is none
// of the caller's business.
absl::Status BadToken() {
  return absl::UnauthenticatedError("invalid or revoked bearer token");
}

v1::Tenant DefaultTenant(const std::string& name) {
  v1::Tenant t;
  t.set_name(name);
  t.set_weight(1);
  return t;
}

// Whether `db` is an auth store (false: a new file, with no tables yet);
// FAILED_PRECONDITION for anything else. Reads only.
absl::StatusOr<bool> IsAuthStore(SqliteDb& db) {
  absl::StatusOr<int64_t> app_id = db.QueryInt64("PRAGMA application_id");
  ASSIGN_OR_RETURN(int64_t tables,
                   db.QueryInt64("SELECT count(*) FROM sqlite_master"));
  if (!app_id.ok() || (*app_id != kAuthApplicationId &&
                       !(*app_id == 0 && tables == 0))) {
    return absl::FailedPreconditionError(absl::StrCat(
        db.path(), " is not a Trainyard auth store; refusing to use it"));
  }
  return *app_id == kAuthApplicationId;
}

absl::Status InitAuthSchema(SqliteDb& db) {
  ASSIGN_OR_RETURN(bool ours, IsAuthStore(db));
  if (ours) {
    ASSIGN_OR_RETURN(int64_t has_column,
                     db.QueryInt64("SELECT count(*) FROM pragma_table_info("
                                   "'tenants') WHERE name = 'max_priority'"));
    if (has_column > 0) return absl::OkStatus();
    return db.Exec(absl::StrCat("BEGIN; ", kAddMaxPriority, "COMMIT;"));
  }
  RETURN_IF_ERROR(db.Exec("PRAGMA journal_mode=WAL"));
  return db.Exec(absl::StrCat("BEGIN; ", kAuthSchema,
                              "PRAGMA application_id=", kAuthApplicationId,
                              "; COMMIT;"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<AuthStore>> AuthStore::Open(
    const std::string& path, Clock* clock) {
  ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> db, SqliteDb::Open(path));
  RETURN_IF_ERROR(InitAuthSchema(*db));
  RETURN_IF_ERROR(db->Exec("PRAGMA synchronous=FULL"));
  std::unique_ptr<AuthStore> store(new AuthStore(std::move(db), clock));
  RETURN_IF_ERROR(store->Load());
  return store;
}

absl::StatusOr<int64_t> AuthStore::CountTokens(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !ec) return 0;
  ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> db, SqliteDb::Open(path));
  ASSIGN_OR_RETURN(bool ours, IsAuthStore(*db));
  if (!ours) return 0;
  return db->QueryInt64("SELECT count(*) FROM tokens");
}

absl::Status AuthStore::Load() {
  absl::MutexLock w(&write_mu_);
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(SqliteStatement q,
                   db_->Prepare("SELECT id, tenant, role, description, digest,"
                                " create_ms, revoke_ms FROM tokens"));
  while (true) {
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    Entry e;
    e.info.set_id(q.ColumnText(0));
    e.info.set_tenant(q.ColumnText(1));
    e.info.set_role(static_cast<v1::TokenRole>(q.ColumnInt64(2)));
    e.info.set_description(q.ColumnText(3));
    e.digest = q.ColumnText(4);
    *e.info.mutable_create_time() =
        ToProtoTime(absl::FromUnixMillis(q.ColumnInt64(5)));
    if (int64_t revoked = q.ColumnInt64(6); revoked != 0) {
      e.info.set_revoked(true);
      *e.info.mutable_revoke_time() =
          ToProtoTime(absl::FromUnixMillis(revoked));
    }
    tokens_[e.info.id()] = std::move(e);
  }
  ASSIGN_OR_RETURN(SqliteStatement t,
                   db_->Prepare("SELECT name, weight_milli, max_gpus, "
                                "max_queued_jobs, max_cpu_slots, "
                                "has_max_priority, max_priority FROM tenants"));
  while (true) {
    ASSIGN_OR_RETURN(bool row, t.Step());
    if (!row) return absl::OkStatus();
    v1::Tenant tenant;
    tenant.set_name(t.ColumnText(0));
    tenant.set_weight(static_cast<double>(t.ColumnInt64(1)) / 1000);
    tenant.set_max_gpus(static_cast<int32_t>(t.ColumnInt64(2)));
    tenant.set_max_queued_jobs(static_cast<int32_t>(t.ColumnInt64(3)));
    tenant.set_max_cpu_slots(static_cast<int32_t>(t.ColumnInt64(4)));
    if (t.ColumnInt64(5) != 0) {
      tenant.set_max_priority(static_cast<int32_t>(t.ColumnInt64(6)));
    }
    tenants_[tenant.name()] = tenant;
  }
}

absl::StatusOr<Caller> AuthStore::Authenticate(std::string_view token) const {
  absl::StatusOr<std::string> id = TokenId(token);
  if (!id.ok()) return id.status();
  const std::string digest = TokenDigest(token);
  absl::ReaderMutexLock lock(&mu_);
  auto it = tokens_.find(*id);
  if (it == tokens_.end() || it->second.info.revoked() ||
      !DigestsEqual(it->second.digest, digest)) {
    return BadToken();
  }
  return Caller{it->second.info.id(), it->second.info.tenant(),
                it->second.info.role()};
}

absl::StatusOr<CreatedToken> AuthStore::CreateToken(
    const std::string& tenant, v1::TokenRole role,
    const std::string& description) {
  RETURN_IF_ERROR(CheckTenantName(tenant, "tenant"));
  if (role == v1::TOKEN_ROLE_UNSPECIFIED) role = v1::TENANT;
  if (!v1::TokenRole_IsValid(role)) {
    return InvalidFieldError(
        "role", absl::StrCat(static_cast<int>(role), " is not a role"));
  }
  // The first start's tenants are their roles' own: the admin's jobs
  // belong to tenant "admin", so a tenant token there would see them.
  for (const auto& [reserved, its_role] :
       {std::pair<const char*, v1::TokenRole>{"admin", v1::ADMIN},
        std::pair<const char*, v1::TokenRole>{"workers", v1::WORKER}}) {
    if (tenant == reserved && role != its_role) {
      return InvalidFieldError(
          "tenant", absl::StrCat("\"", reserved, "\" is reserved for ",
                                 v1::TokenRole_Name(its_role),
                                 " tokens; pick another tenant name"));
    }
  }
  RETURN_IF_ERROR(
      CheckFreeText("description", description, kMaxTokenDescription));
  ASSIGN_OR_RETURN(NewToken fresh, GenerateToken());
  const absl::Time now = clock_->Now();
  absl::MutexLock w(&write_mu_);
  ASSIGN_OR_RETURN(SqliteStatement ins,
                   db_->Prepare("INSERT INTO tokens (id, tenant, role, "
                                "description, digest, create_ms) "
                                "VALUES (?, ?, ?, ?, ?, ?)"));
  ins.BindText(1, fresh.id)
      .BindText(2, tenant)
      .Bind(3, role)
      .BindText(4, description)
      .BindText(5, fresh.digest)
      .Bind(6, absl::ToUnixMillis(now));
  RETURN_IF_ERROR(ins.Run());
  Entry e;
  e.info.set_id(fresh.id);
  e.info.set_tenant(tenant);
  e.info.set_role(role);
  e.info.set_description(description);
  *e.info.mutable_create_time() = ToProtoTime(now);
  e.digest = fresh.digest;
  CreatedToken out{e.info, std::move(fresh.token)};
  absl::MutexLock lock(&mu_);
  tokens_[e.info.id()] = std::move(e);
  return out;
}

std::vector<v1::TokenInfo> AuthStore::ListTokens(const std::string& tenant,
                                                 bool include_revoked) const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<v1::TokenInfo> out;
  for (const auto& [id, e] : tokens_) {
    if (!tenant.empty() && e.info.tenant() != tenant) continue;
    if (e.info.revoked() && !include_revoked) continue;
    out.push_back(e.info);
  }
  return out;
}

absl::StatusOr<v1::TokenInfo> AuthStore::RevokeToken(const std::string& id) {
  absl::MutexLock w(&write_mu_);
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = tokens_.find(id);
    if (it == tokens_.end()) {
      return absl::NotFoundError(absl::StrCat("token ", id.substr(0, 64),
                                              " not found"));
    }
    if (it->second.info.revoked()) return it->second.info;
  }
  const absl::Time now = clock_->Now();
  ASSIGN_OR_RETURN(SqliteStatement upd,
                   db_->Prepare("UPDATE tokens SET revoke_ms = ? WHERE id = ?"));
  upd.Bind(1, std::max<int64_t>(absl::ToUnixMillis(now), 1)).BindText(2, id);
  RETURN_IF_ERROR(upd.Run());
  absl::MutexLock lock(&mu_);
  v1::TokenInfo& info = tokens_[id].info;
  info.set_revoked(true);
  *info.mutable_revoke_time() = ToProtoTime(now);
  return info;
}

bool AuthStore::Empty() const {
  absl::ReaderMutexLock lock(&mu_);
  return tokens_.empty();
}

absl::StatusOr<v1::Tenant> AuthStore::SetTenant(const v1::Tenant& in) {
  RETURN_IF_ERROR(CheckTenantName(in.name(), "tenant.name"));
  v1::Tenant t = in;
  if (t.weight() == 0) t.set_weight(1);
  if (!(t.weight() > 0 && t.weight() <= kMaxTenantWeight)) {
    return InvalidFieldError(
        "tenant.weight",
        absl::StrCat(t.weight(), " is outside (0, ", kMaxTenantWeight, "]"));
  }
  for (const auto& [field, value] :
       {std::pair<const char*, int64_t>{"tenant.max_gpus", t.max_gpus()},
        {"tenant.max_queued_jobs", t.max_queued_jobs()},
        {"tenant.max_cpu_slots", t.max_cpu_slots()}}) {
    if (value < 0) {
      return InvalidFieldError(
          field, absl::StrCat("must be >= 0 (0 = unlimited), got ", value));
    }
  }
  if (t.has_max_priority()) {
    RETURN_IF_ERROR(CheckFieldRange("tenant.max_priority", t.max_priority(),
                                    -spec::kMaxPriority, spec::kMaxPriority));
  }
  const int64_t weight_milli = std::llround(t.weight() * 1000);
  t.set_weight(static_cast<double>(std::max<int64_t>(weight_milli, 1)) / 1000);
  absl::MutexLock w(&write_mu_);
  ASSIGN_OR_RETURN(
      SqliteStatement up,
      db_->Prepare("INSERT OR REPLACE INTO tenants (name, weight_milli, "
                   "max_gpus, max_queued_jobs, max_cpu_slots, "
                   "has_max_priority, max_priority) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?)"));
  up.BindText(1, t.name())
      .Bind(2, std::max<int64_t>(weight_milli, 1))
      .Bind(3, t.max_gpus())
      .Bind(4, t.max_queued_jobs())
      .Bind(5, t.max_cpu_slots())
      .Bind(6, t.has_max_priority() ? 1 : 0)
      .Bind(7, t.max_priority());
  RETURN_IF_ERROR(up.Run());
  absl::MutexLock lock(&mu_);
  tenants_[t.name()] = t;
  return t;
}

std::vector<v1::Tenant> AuthStore::ListTenants() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<v1::Tenant> out;
  for (const auto& [name, t] : tenants_) out.push_back(t);
  return out;
}

v1::Tenant AuthStore::GetTenant(const std::string& name) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = tenants_.find(name);
  return it == tenants_.end() ? DefaultTenant(name) : it->second;
}

}  // namespace trainyard::server
