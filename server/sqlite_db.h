// SqliteDb and SqliteStatement: a thin RAII layer over one sqlite3
// connection that turns SQLite result codes into absl::Status (naming the
// database file and SQLite's own message). Not thread-safe: JobStore owns one
// connection and serializes every use of it under its mutex.
//
// Prepared statements are kept for reuse: a statement going out of scope
// is reset, its bindings cleared, and handed to the next Prepare of the
// same SQL text, which so skips SQLite's parsing and planning (most of a
// small statement's cost). At most kMaxKeptSql texts are kept (SQL built
// at run time, such as an IN list of any length, may make many), each with
// as many idle statements as were ever in use at once, up to
// kMaxKeptPerSql; past either, a statement is finalized as before.
#ifndef TRAINYARD_SERVER_SQLITE_DB_H_
#define TRAINYARD_SERVER_SQLITE_DB_H_

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainyard::server {

class SqliteDb;

class SqliteStatement {
 public:
  SqliteStatement(SqliteStatement&& other) noexcept;
  SqliteStatement& operator=(SqliteStatement&&) = delete;
  ~SqliteStatement();

  // Parameters are 1-based, as in SQLite.
  SqliteStatement& Bind(int index, int64_t value);
  SqliteStatement& BindDouble(int index, double value);
  SqliteStatement& BindText(int index, std::string_view value);
  SqliteStatement& BindBlob(int index, std::string_view value);

  // Next row: true when a row is ready, false when done.
  absl::StatusOr<bool> Step();
  // Steps to the end, for statements that return no rows.
  absl::Status Run();

  int64_t ColumnInt64(int index) const;
  double ColumnDouble(int index) const;
  std::string ColumnText(int index) const;
  std::string ColumnBlob(int index) const;

 private:
  friend class SqliteDb;
  SqliteStatement(SqliteDb* owner, sqlite3* db, sqlite3_stmt* stmt,
                  std::string_view label)
      : owner_(owner), db_(db), stmt_(stmt), label_(label) {}

  SqliteDb* owner_;  // takes the statement back when this goes
  sqlite3* db_;
  sqlite3_stmt* stmt_;
  std::string_view label_;  // the database path, for error messages
};

class SqliteDb {
 public:
  // Opens (creating if missing) the database file at `path`, mode 0600.
  static absl::StatusOr<std::unique_ptr<SqliteDb>> Open(const std::string& path);
  ~SqliteDb();

  // Runs one or more statements that return no rows.
  absl::Status Exec(std::string_view sql);
  absl::StatusOr<SqliteStatement> Prepare(std::string_view sql);
  // The value of the first column of the first row of `sql`.
  absl::StatusOr<int64_t> QueryInt64(std::string_view sql);
  // Rows the last INSERT, UPDATE or DELETE on this connection changed.
  int64_t Changes() const;

  const std::string& path() const { return path_; }

  static constexpr size_t kMaxKeptSql = 256;
  static constexpr size_t kMaxKeptPerSql = 4;

 private:
  friend class SqliteStatement;
  SqliteDb(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  // A statement no longer in use: reset and kept for its SQL's next
  // Prepare, or finalized.
  void TakeBack(sqlite3_stmt* stmt);

  sqlite3* db_;
  std::string path_;
  // Idle prepared statements by SQL text.
  std::unordered_map<std::string, std::vector<sqlite3_stmt*>> idle_;
};

// The absl::Status for SQLite result code `rc` (canonical code chosen by
// kind: full disk RESOURCE_EXHAUSTED, busy or I/O error UNAVAILABLE, not a database
// FAILED_PRECONDITION, corrupt DATA_LOSS, else INTERNAL).
absl::Status SqliteError(int rc, std::string_view what, std::string_view detail);

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_SQLITE_DB_H_
