#include "server/auth_store.h"

#include <sys/stat.h>

#include <fstream>
#include <iterator>

#include "common/test_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/sqlite_db.h"

namespace trainyard::server {
namespace {

using ::testing::HasSubstr;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class AuthStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<AuthStore> Open() {
    auto s = AuthStore::Open(dir_.File("auth.db"), &clock_);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }

  TestDir dir_;
  FakeClock clock_{absl::FromUnixSeconds(1'800'000'000)};
};

TEST_F(AuthStoreTest, CreatedTokensAuthenticateUntilRevoked) {
  auto store = Open();
  EXPECT_TRUE(store->Empty());
  auto created = store->CreateToken("team-a", v1::TENANT, "ci");
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_FALSE(store->Empty());
  auto caller = store->Authenticate(created->token);
  ASSERT_TRUE(caller.ok()) << caller.status();
  EXPECT_EQ(caller->tenant, "team-a");
  EXPECT_EQ(caller->role, v1::TENANT);
  EXPECT_EQ(caller->token_id, created->info.id());
  EXPECT_FALSE(caller->is_admin());

  // One changed character of the secret is a different token.
  std::string forged = created->token;
  forged.back() = forged.back() == 'A' ? 'B' : 'A';
  EXPECT_EQ(store->Authenticate(forged).status().code(),
            absl::StatusCode::kUnauthenticated);

  auto revoked = store->RevokeToken(created->info.id());
  ASSERT_TRUE(revoked.ok()) << revoked.status();
  EXPECT_TRUE(revoked->revoked());
  EXPECT_EQ(store->Authenticate(created->token).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(store->RevokeToken(created->info.id()).ok()) << "idempotent";
  EXPECT_EQ(store->RevokeToken("t-000000000000").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(store->ListTokens("", false).empty());
  EXPECT_EQ(store->ListTokens("", true).size(), 1u);
}

TEST_F(AuthStoreTest, SurvivesReopenAndKeepsOnlyDigests) {
  std::string admin, worker, revoked_id;
  {
    auto store = Open();
    admin = store->CreateToken("admin", v1::ADMIN, "")->token;
    worker = store->CreateToken("workers", v1::WORKER, "")->token;
    auto gone = store->CreateToken("team-a", v1::TENANT, "");
    revoked_id = gone->info.id();
    ASSERT_TRUE(store->RevokeToken(revoked_id).ok());
    v1::Tenant t;
    t.set_name("team-a");
    t.set_max_gpus(4);
    t.set_weight(2.5);
    t.set_max_priority(-5);
    ASSERT_TRUE(store->SetTenant(t).ok());
    t.set_name("team-b");
    t.clear_max_priority();
    ASSERT_TRUE(store->SetTenant(t).ok());
  }
  for (const char* f : {"auth.db", "auth.db-wal"}) {
    const std::string bytes = ReadAll(dir_.File(f));
    EXPECT_EQ(bytes.find(admin), std::string::npos) << f;
    EXPECT_EQ(bytes.find(worker), std::string::npos) << f;
  }
  struct stat st;
  ASSERT_EQ(stat(dir_.File("auth.db").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  auto store = Open();
  EXPECT_TRUE(store->Authenticate(admin)->is_admin());
  EXPECT_EQ(store->Authenticate(worker)->role, v1::WORKER);
  auto tokens = store->ListTokens("", true);
  ASSERT_EQ(tokens.size(), 3u);
  for (const auto& t : tokens) {
    EXPECT_EQ(t.revoked(), t.id() == revoked_id) << t.id();
  }
  const v1::Tenant t = store->GetTenant("team-a");
  EXPECT_EQ(t.max_gpus(), 4);
  EXPECT_DOUBLE_EQ(t.weight(), 2.5);
  ASSERT_TRUE(t.has_max_priority());
  EXPECT_EQ(t.max_priority(), -5);
  EXPECT_FALSE(store->GetTenant("team-b").has_max_priority());
  const v1::Tenant unset = store->GetTenant("team-z");
  EXPECT_EQ(unset.max_gpus(), 0);
  EXPECT_DOUBLE_EQ(unset.weight(), 1);
}

TEST_F(AuthStoreTest, BadInputsAreNamed) {
  auto store = Open();
  EXPECT_THAT(std::string(store->CreateToken("Bad!", v1::TENANT, "")
                              .status()
                              .message()),
              HasSubstr("tenant"));
  EXPECT_THAT(std::string(store->CreateToken("a", static_cast<v1::TokenRole>(9),
                                             "")
                              .status()
                              .message()),
              HasSubstr("role"));
  EXPECT_THAT(std::string(store->CreateToken("a", v1::TENANT,
                                             std::string(300, 'x'))
                              .status()
                              .message()),
              HasSubstr("description"));
  // The first start's tenants take only their own role's tokens.
  EXPECT_EQ(std::string(
                store->CreateToken("admin", v1::TENANT, "").status().message()),
            "tenant: \"admin\" is reserved for ADMIN tokens; pick another "
            "tenant name");
  EXPECT_THAT(
      std::string(
          store->CreateToken("workers", v1::ADMIN, "").status().message()),
      HasSubstr("reserved for WORKER tokens"));
  v1::Tenant t;
  t.set_name("a");
  t.set_weight(-1);
  EXPECT_THAT(std::string(store->SetTenant(t).status().message()),
              HasSubstr("weight"));
  t.set_weight(1);
  t.set_max_queued_jobs(-3);
  EXPECT_THAT(std::string(store->SetTenant(t).status().message()),
              HasSubstr("max_queued_jobs"));
  t.set_max_queued_jobs(0);
  t.set_max_priority(1001);
  EXPECT_EQ(std::string(store->SetTenant(t).status().message()),
            "tenant.max_priority: must be in [-1000, 1000], got 1001");
  EXPECT_TRUE(store->Empty()) << "nothing was stored";
  EXPECT_TRUE(store->ListTenants().empty());
}

// A store made before tenants had a priority cap opens, keeps its tenants
// (uncapped) and takes caps from then on.
TEST_F(AuthStoreTest, AStoreFromBeforePriorityCapsIsUpgraded) {
  {
    auto db = SqliteDb::Open(dir_.File("auth.db"));
    ASSERT_TRUE(db.ok()) << db.status();
    ASSERT_TRUE((*db)
                    ->Exec("CREATE TABLE tokens (id TEXT PRIMARY KEY, tenant "
                           "TEXT NOT NULL, role INTEGER NOT NULL, description "
                           "TEXT NOT NULL, digest TEXT NOT NULL, create_ms "
                           "INTEGER NOT NULL, revoke_ms INTEGER NOT NULL "
                           "DEFAULT 0); CREATE TABLE tenants (name TEXT "
                           "PRIMARY KEY, weight_milli INTEGER NOT NULL, "
                           "max_gpus INTEGER NOT NULL, max_queued_jobs INTEGER "
                           "NOT NULL, max_cpu_slots INTEGER NOT NULL); INSERT "
                           "INTO tenants VALUES ('old', 2000, 3, 0, 0); PRAGMA "
                           "application_id=1415135537;")
                    .ok());
  }
  auto store = Open();
  ASSERT_NE(store, nullptr);
  v1::Tenant old = store->GetTenant("old");
  EXPECT_EQ(old.max_gpus(), 3);
  EXPECT_DOUBLE_EQ(old.weight(), 2);
  EXPECT_FALSE(old.has_max_priority());
  old.set_max_priority(0);
  ASSERT_TRUE(store->SetTenant(old).ok());
  store = Open();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->GetTenant("old").max_priority(), 0);
  EXPECT_TRUE(store->GetTenant("old").has_max_priority());
}

TEST_F(AuthStoreTest, AForeignFileIsRefusedAndLeftAlone) {
  {
    std::ofstream out(dir_.File("auth.db"), std::ios::binary);
    out << "not a database at all, just some bytes that matter to someone";
  }
  const std::string before = ReadAll(dir_.File("auth.db"));
  auto store = AuthStore::Open(dir_.File("auth.db"), &clock_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(ReadAll(dir_.File("auth.db")), before);
}

}  // namespace
}  // namespace trainyard::server
