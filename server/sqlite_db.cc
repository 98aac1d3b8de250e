#include "server/sqlite_db.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace trainyard::server {

absl::Status SqliteError(int rc, std::string_view what,
                         std::string_view detail) {
  std::string msg = absl::StrCat(std::string(what), ": ", std::string(detail));
  switch (rc & 0xff) {
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(msg);
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_IOERR:  // a failed write or fsync: retry once the disk heals
      return absl::UnavailableError(msg);
    case SQLITE_NOTADB:
      return absl::FailedPreconditionError(msg);
    case SQLITE_CORRUPT:
      return absl::DataLossError(msg);
    default:
      return absl::InternalError(msg);
  }
}

SqliteStatement::SqliteStatement(SqliteStatement&& other) noexcept
    : owner_(other.owner_),
      db_(other.db_),
      stmt_(other.stmt_),
      label_(other.label_) {
  other.stmt_ = nullptr;
}

SqliteStatement::~SqliteStatement() {
  if (stmt_ != nullptr) owner_->TakeBack(stmt_);
}

SqliteStatement& SqliteStatement::Bind(int index, int64_t value) {
  sqlite3_bind_int64(stmt_, index, value);
  return *this;
}

SqliteStatement& SqliteStatement::BindDouble(int index, double value) {
  sqlite3_bind_double(stmt_, index, value);
  return *this;
}

SqliteStatement& SqliteStatement::BindText(int index, std::string_view value) {
  sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()),
                    SQLITE_TRANSIENT);
  return *this;
}

SqliteStatement& SqliteStatement::BindBlob(int index, std::string_view value) {
  // A zero-length blob must still be a blob, not NULL.
  sqlite3_bind_blob(stmt_, index, value.empty() ? "" : value.data(),
                    static_cast<int>(value.size()), SQLITE_TRANSIENT);
  return *this;
}

absl::StatusOr<bool> SqliteStatement::Step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return SqliteError(rc, label_, sqlite3_errmsg(db_));
}

absl::Status SqliteStatement::Run() {
  while (true) {
    absl::StatusOr<bool> row = Step();
    if (!row.ok()) return row.status();
    if (!*row) return absl::OkStatus();
  }
}

int64_t SqliteStatement::ColumnInt64(int index) const {
  return sqlite3_column_int64(stmt_, index);
}

double SqliteStatement::ColumnDouble(int index) const {
  return sqlite3_column_double(stmt_, index);
}

std::string SqliteStatement::ColumnText(int index) const {
  const unsigned char* text = sqlite3_column_text(stmt_, index);
  if (text == nullptr) return "";
  return std::string(reinterpret_cast<const char*>(text),
                     sqlite3_column_bytes(stmt_, index));
}

std::string SqliteStatement::ColumnBlob(int index) const {
  const void* data = sqlite3_column_blob(stmt_, index);
  if (data == nullptr) return "";
  return std::string(static_cast<const char*>(data),
                     sqlite3_column_bytes(stmt_, index));
}

absl::StatusOr<std::unique_ptr<SqliteDb>> SqliteDb::Open(
    const std::string& path) {
  // Jobs, specs, logs, tenants and token digests are nobody else's
  // business: a new file is created 0600 before SQLite opens it (so no one
  // can open it in between, whatever the umask), an older one is made so
  // too, and so are its WAL companions, which SQLite creates with its mode.
  // An existing file is never opened here: closing any descriptor of it
  // would drop every POSIX lock this process's connections hold on it, and
  // another process (an operator's sqlite3 shell) could then take itself
  // for the last user and delete the WAL under them.
  const int fd =
      ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd >= 0) {
    const bool made_private = ::fchmod(fd, 0600) == 0;
    const int err = errno;
    ::close(fd);  // a file new this instant: no connection has locks on it
    if (!made_private) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot create ", path, " as a private file: ", std::strerror(err)));
    }
  } else if (errno != EEXIST) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create ", path, " as a private file: ", std::strerror(errno)));
  } else if (::chmod(path.c_str(), 0600) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot make ", path, " private: ", std::strerror(errno)));
  }
  for (const char* suffix : {"-wal", "-shm"}) {
    const std::string file = path + suffix;
    if (::chmod(file.c_str(), 0600) != 0 && errno != ENOENT) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot make ", file, " private: ", std::strerror(errno)));
    }
  }
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                               SQLITE_OPEN_NOMUTEX,
                           nullptr);
  if (rc != SQLITE_OK) {
    absl::Status s = SqliteError(
        rc, path, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    sqlite3_close(db);
    return s;
  }
  sqlite3_extended_result_codes(db, 1);
  // Another process (an operator's sqlite3 shell) may hold a lock briefly.
  sqlite3_busy_timeout(db, 5000);
  return std::unique_ptr<SqliteDb>(new SqliteDb(db, path));
}

SqliteDb::~SqliteDb() {
  for (auto& [sql, stmts] : idle_) {
    for (sqlite3_stmt* stmt : stmts) sqlite3_finalize(stmt);
  }
  sqlite3_close_v2(db_);
}

void SqliteDb::TakeBack(sqlite3_stmt* stmt) {
  // A failed step's error comes back from reset too: it was reported then.
  sqlite3_reset(stmt);
  sqlite3_clear_bindings(stmt);
  const char* sql = sqlite3_sql(stmt);
  auto it = sql != nullptr ? idle_.find(sql) : idle_.end();
  if (it == idle_.end() && sql != nullptr && idle_.size() < kMaxKeptSql) {
    it = idle_.emplace(sql, std::vector<sqlite3_stmt*>()).first;
  }
  if (it == idle_.end() || it->second.size() >= kMaxKeptPerSql) {
    sqlite3_finalize(stmt);
    return;
  }
  it->second.push_back(stmt);
}

absl::Status SqliteDb::Exec(std::string_view sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, std::string(sql).c_str(), nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return absl::OkStatus();
  absl::Status s = SqliteError(rc, path_, err ? err : sqlite3_errstr(rc));
  sqlite3_free(err);
  return s;
}

absl::StatusOr<SqliteStatement> SqliteDb::Prepare(std::string_view sql) {
  if (auto it = idle_.find(std::string(sql));
      it != idle_.end() && !it->second.empty()) {
    sqlite3_stmt* stmt = it->second.back();
    it->second.pop_back();
    return SqliteStatement(this, db_, stmt, path_);
  }
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()),
                              &stmt, nullptr);
  if (rc != SQLITE_OK) return SqliteError(rc, path_, sqlite3_errmsg(db_));
  if (stmt == nullptr) {  // only blanks or a comment: nothing to run
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": no SQL statement in \"", std::string(sql), "\""));
  }
  return SqliteStatement(this, db_, stmt, path_);
}

absl::StatusOr<int64_t> SqliteDb::QueryInt64(std::string_view sql) {
  absl::StatusOr<SqliteStatement> stmt = Prepare(sql);
  if (!stmt.ok()) return stmt.status();
  absl::StatusOr<bool> row = stmt->Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::NotFoundError(absl::StrCat("no row for ", std::string(sql)));
  return stmt->ColumnInt64(0);
}

int64_t SqliteDb::Changes() const { return sqlite3_changes64(db_); }

}  // namespace trainyard::server
