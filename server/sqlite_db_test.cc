// Tests of SqliteDb's statement reuse: a statement handed back is reset
// and its bindings cleared before the next Prepare of the same SQL gets
// it, statements of one SQL in use at once are distinct, and past the
// caps statements are finalized and all still works.
#include "server/sqlite_db.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/test_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::server {
namespace {

class SqliteDbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto db = SqliteDb::Open(dir_.File("test.db"));
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = *std::move(db);
    ASSERT_TRUE(db_->Exec("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT);"
                          "INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c');")
                    .ok());
  }

  // The v of every row `sql` returns, its first parameter bound to `k`
  // when given.
  std::vector<std::string> Values(const char* sql, int64_t k = -1) {
    auto q = db_->Prepare(sql);
    EXPECT_TRUE(q.ok()) << q.status();
    if (!q.ok()) return {};
    if (k >= 0) q->Bind(1, k);
    std::vector<std::string> out;
    while (*q->Step()) out.push_back(q->ColumnText(0));
    return out;
  }

  TestDir dir_;
  std::unique_ptr<SqliteDb> db_;
};

TEST_F(SqliteDbTest, AReusedStatementStartsOverWithNoBindings) {
  constexpr char kByKey[] = "SELECT v FROM t WHERE k >= ? ORDER BY k";
  EXPECT_THAT(Values(kByKey, 2), ::testing::ElementsAre("b", "c"));
  // Unbound, the parameter is NULL again: no row (not the 2 of before).
  EXPECT_TRUE(Values(kByKey).empty());
  {  // left after its first row
    auto q = db_->Prepare(kByKey);
    ASSERT_TRUE(q.ok());
    q->Bind(1, 1);
    ASSERT_TRUE(*q->Step());
    EXPECT_EQ(q->ColumnText(0), "a");
  }
  EXPECT_THAT(Values(kByKey, 1), ::testing::ElementsAre("a", "b", "c"));
}

TEST_F(SqliteDbTest, OneSqlInUseTwiceAtOnceGetsTwoStatements) {
  constexpr char kAll[] = "SELECT v FROM t ORDER BY k";
  auto outer = db_->Prepare(kAll);
  ASSERT_TRUE(outer.ok());
  std::vector<std::string> pairs;
  while (*outer->Step()) {
    const std::string a = outer->ColumnText(0);
    for (const std::string& b : Values(kAll)) pairs.push_back(a + b);
  }
  EXPECT_EQ(pairs.size(), 9u);
  EXPECT_EQ(pairs.front(), "aa");
  EXPECT_EQ(pairs.back(), "cc");
}

TEST_F(SqliteDbTest, AFailedStatementCanBeUsedAgain) {
  constexpr char kInsert[] = "INSERT INTO t (k, v) VALUES (?, ?)";
  {
    auto dup = db_->Prepare(kInsert);
    ASSERT_TRUE(dup.ok());
    dup->Bind(1, 1).BindText(2, "again");
    EXPECT_FALSE(dup->Run().ok()) << "k 1 exists";
  }
  auto fresh = db_->Prepare(kInsert);
  ASSERT_TRUE(fresh.ok());
  fresh->Bind(1, 4).BindText(2, "d");
  EXPECT_TRUE(fresh->Run().ok());
  EXPECT_EQ(db_->Changes(), 1);
  EXPECT_THAT(Values("SELECT v FROM t WHERE k = ?", 4),
              ::testing::ElementsAre("d"));
}

TEST_F(SqliteDbTest, AKeptStatementSeesASchemaChange) {
  constexpr char kStar[] = "SELECT * FROM t ORDER BY k LIMIT 1";
  {
    auto q = db_->Prepare(kStar);
    ASSERT_TRUE(q.ok() && *q->Step());
  }
  ASSERT_TRUE(db_->Exec("ALTER TABLE t ADD COLUMN w INTEGER DEFAULT 7").ok());
  auto q = db_->Prepare(kStar);
  ASSERT_TRUE(q.ok());
  ASSERT_TRUE(*q->Step());
  EXPECT_EQ(q->ColumnInt64(2), 7);
}

TEST_F(SqliteDbTest, PastTheCapsStatementsStillWork) {
  // More distinct texts than are kept, each used more times at once than
  // are kept.
  for (size_t i = 0; i < SqliteDb::kMaxKeptSql + 20; ++i) {
    const std::string sql = absl::StrCat("SELECT v FROM t WHERE k = ", 1 + i % 3,
                                         " AND ", i, " = ", i);
    std::vector<SqliteStatement> open;
    for (size_t j = 0; j < SqliteDb::kMaxKeptPerSql + 2; ++j) {
      auto q = db_->Prepare(sql);
      ASSERT_TRUE(q.ok()) << q.status();
      open.push_back(*std::move(q));
    }
    for (SqliteStatement& q : open) {
      ASSERT_TRUE(*q.Step());
      EXPECT_EQ(q.ColumnText(0), std::string(1, "abc"[i % 3]));
    }
  }
  EXPECT_FALSE(db_->Prepare("SELECT nonsense FROM nowhere").ok());
  EXPECT_FALSE(db_->Prepare("  -- only a comment").ok());
}

}  // namespace
}  // namespace trainyard::server
