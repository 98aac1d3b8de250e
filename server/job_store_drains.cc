// JobStore: what it keeps of workers: the administrators' drains, one row
// per drained worker holding its WorkerDrain message, the known workers,
// one row each holding its latest WorkerHello, and the server's last sign
// of life (a row of the meta table), the latest it can have heard them.
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "server/job_store.h"

namespace trainyard::server {

absl::Status JobStore::PutWorkerDrain(const v1::WorkerDrain& drain) {
  if (drain.worker_id().empty()) {
    return absl::InvalidArgumentError("worker drain: empty worker id");
  }
  return Commit(Durability::kTransition, "put_worker_drain", [&] {
    ASSIGN_OR_RETURN(SqliteStatement put,
                     db_->Prepare("INSERT OR REPLACE INTO worker_drains "
                                  "(worker_id, drain) VALUES (?, ?)"));
    put.BindText(1, drain.worker_id()).BindBlob(2, drain.SerializeAsString());
    return put.Run();
  });
}

absl::Status JobStore::DeleteWorkerDrain(std::string_view worker_id) {
  return Commit(Durability::kTransition, "delete_worker_drain", [&] {
    ASSIGN_OR_RETURN(SqliteStatement find,
                     db_->Prepare("SELECT 1 FROM worker_drains WHERE "
                                  "worker_id = ?"));
    find.BindText(1, worker_id);
    ASSIGN_OR_RETURN(bool found, find.Step());
    if (!found) {
      return absl::NotFoundError(
          absl::StrCat("worker '", std::string(worker_id), "' is not drained"));
    }
    ASSIGN_OR_RETURN(SqliteStatement del,
                     db_->Prepare("DELETE FROM worker_drains WHERE "
                                  "worker_id = ?"));
    del.BindText(1, worker_id);
    return del.Run();
  });
}

absl::StatusOr<std::vector<v1::WorkerDrain>> JobStore::ListWorkerDrains()
    const {
  Reader reader(this);
  ASSIGN_OR_RETURN(SqliteStatement q,
                   reader.db().Prepare("SELECT drain FROM worker_drains "
                                       "ORDER BY worker_id"));
  std::vector<v1::WorkerDrain> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return out;
    if (!out.emplace_back().ParseFromString(q.ColumnBlob(0))) {
      return absl::DataLossError(
          absl::StrCat(options_.path, ": a worker drain does not parse"));
    }
  }
}

absl::Status JobStore::PutKnownWorker(const v1::WorkerHello& hello) {
  if (hello.worker_id().empty()) {
    return absl::InvalidArgumentError("known worker: empty worker id");
  }
  v1::WorkerHello kept = hello;
  kept.clear_running();
  return Commit(Durability::kTransition, "put_known_worker", [&] {
    ASSIGN_OR_RETURN(SqliteStatement put,
                     db_->Prepare("INSERT OR REPLACE INTO known_workers "
                                  "(worker_id, hello, lost) VALUES (?, ?, 0)"));
    put.BindText(1, kept.worker_id()).BindBlob(2, kept.SerializeAsString());
    return put.Run();
  });
}

absl::Status JobStore::DeleteKnownWorker(std::string_view worker_id) {
  return Commit(Durability::kTransition, "delete_known_worker", [&] {
    ASSIGN_OR_RETURN(SqliteStatement del,
                     db_->Prepare("DELETE FROM known_workers WHERE "
                                  "worker_id = ?"));
    del.BindText(1, worker_id);
    return del.Run();
  });
}

absl::Status JobStore::MarkKnownWorkerLost(std::string_view worker_id) {
  return Commit(Durability::kTransition, "mark_known_worker_lost", [&] {
    ASSIGN_OR_RETURN(SqliteStatement mark,
                     db_->Prepare("UPDATE known_workers SET lost = 1 WHERE "
                                  "worker_id = ?"));
    mark.BindText(1, worker_id);
    return mark.Run();
  });
}

absl::Status JobStore::ForgetWorker(std::string_view worker_id) {
  return Commit(Durability::kTransition, "forget_worker", [&] {
    for (const char* sql : {"DELETE FROM known_workers WHERE worker_id = ?",
                            "DELETE FROM worker_drains WHERE worker_id = ?"}) {
      ASSIGN_OR_RETURN(SqliteStatement del, db_->Prepare(sql));
      del.BindText(1, worker_id);
      RETURN_IF_ERROR(del.Run());
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<JobStore::KnownWorker>> JobStore::ListKnownWorkers()
    const {
  Reader reader(this);
  ASSIGN_OR_RETURN(SqliteStatement q,
                   reader.db().Prepare("SELECT worker_id, hello, lost FROM "
                                       "known_workers ORDER BY worker_id"));
  std::vector<KnownWorker> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return out;
    KnownWorker w;
    if (!w.hello.ParseFromString(q.ColumnBlob(1))) {
      // One bad row must not keep the server from starting: that worker
      // is only unknown until it connects.
      YARD_LOG(WARNING) << options_.path << ": the known worker "
                        << q.ColumnText(0) << " does not parse; skipped";
      continue;
    }
    w.lost = q.ColumnInt64(2) != 0;
    out.push_back(std::move(w));
  }
}

absl::Status JobStore::MarkAlive(absl::Time now) {
  return Commit(Durability::kTelemetry, "mark_alive", [&] {
    ASSIGN_OR_RETURN(SqliteStatement put,
                     db_->Prepare("INSERT OR REPLACE INTO meta (key, value) "
                                  "VALUES ('alive_ms', ?)"));
    put.Bind(1, absl::ToUnixMillis(now));
    return put.Run();
  });
}

absl::StatusOr<std::optional<absl::Time>> JobStore::LastAlive() const {
  Reader reader(this);
  ASSIGN_OR_RETURN(
      SqliteStatement q,
      reader.db().Prepare("SELECT value FROM meta WHERE key = 'alive_ms'"));
  ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return std::nullopt;
  return absl::FromUnixMillis(q.ColumnInt64(0));
}

}  // namespace trainyard::server
