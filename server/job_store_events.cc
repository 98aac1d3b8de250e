// JobStore: the events and logs of each job (see job_store.h for retention).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/field_errors.h"
#include "common/proto_time.h"
#include "common/status_macros.h"
#include "server/job_store.h"

namespace trainyard::server {
namespace {

enum EventKind : int64_t { kStateChange = 0, kTrainer = 1 };

// Per-job counters the store keeps beside the job row.
struct JobCounters {
  int64_t create_seq = 0;
  int64_t last_sequence = 0;
  int64_t pruned_through = 0;
  int64_t log_start = 0;
  int64_t log_end = 0;
};

absl::StatusOr<JobCounters> LoadCounters(SqliteDb& db, std::string_view id) {
  ASSIGN_OR_RETURN(SqliteStatement q,
                   db.Prepare("SELECT create_seq, last_sequence, "
                              "pruned_through, log_start, log_end "
                              "FROM jobs WHERE id = ?"));
  q.BindText(1, id);
  ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) {
    return absl::NotFoundError(
        absl::StrCat("job ", std::string(id), " not found"));
  }
  return JobCounters{q.ColumnInt64(0), q.ColumnInt64(1), q.ColumnInt64(2),
                     q.ColumnInt64(3), q.ColumnInt64(4)};
}

}  // namespace

absl::Status JobStore::InsertEvents(JobRecord& record,
                                    std::vector<v1::JobEvent>& events) {
  const absl::Time now = options_.clock->Now();
  for (v1::JobEvent& e : events) {
    e.set_job_id(record.job.id());
    e.set_sequence(++record.last_sequence);
    if (!e.has_time()) *e.mutable_time() = ToProtoTime(now);
    const bool trainer = e.has_trainer();
    if (e.has_state_change()) uncommitted_changes_.push_back(e.state_change());
    ASSIGN_OR_RETURN(SqliteStatement ins,
                     db_->Prepare("INSERT INTO events (job_seq, seq, kind, "
                                  "event) VALUES (?, ?, ?, ?)"));
    ins.Bind(1, record.create_seq)
        .Bind(2, e.sequence())
        .Bind(3, trainer ? kTrainer : kStateChange)
        .BindBlob(4, e.SerializeAsString());
    RETURN_IF_ERROR(ins.Run());
    if (trainer) {
      ASSIGN_OR_RETURN(SqliteStatement count,
                       db_->Prepare("UPDATE jobs SET trainer_events = "
                                    "trainer_events + 1 WHERE create_seq = ?"));
      count.Bind(1, record.create_seq);
      RETURN_IF_ERROR(count.Run());
      RETURN_IF_ERROR(PruneTrainerEvents(record.create_seq));
      RETURN_IF_ERROR(RecordMetricPoint(record.create_seq, e));
    }
  }
  return absl::OkStatus();
}

// Drops the oldest trainer events beyond the cap. Runs after each insert, so
// at most one event goes each time (an indexed lookup, not a scan).
absl::Status JobStore::PruneTrainerEvents(int64_t create_seq) {
  ASSIGN_OR_RETURN(SqliteStatement q,
                   db_->Prepare("SELECT trainer_events FROM jobs "
                                "WHERE create_seq = ?"));
  q.Bind(1, create_seq);
  ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return absl::InternalError("job row vanished while pruning");
  int64_t excess = q.ColumnInt64(0) - options_.trainer_events_kept;
  for (; excess > 0; --excess) {
    ASSIGN_OR_RETURN(SqliteStatement oldest,
                     db_->Prepare("SELECT seq FROM events WHERE job_seq = ? "
                                  "AND kind = 1 ORDER BY seq LIMIT 1"));
    oldest.Bind(1, create_seq);
    ASSIGN_OR_RETURN(bool found, oldest.Step());
    if (!found) break;
    const int64_t seq = oldest.ColumnInt64(0);
    ASSIGN_OR_RETURN(SqliteStatement del,
                     db_->Prepare("DELETE FROM events WHERE job_seq = ? AND "
                                  "seq = ?"));
    del.Bind(1, create_seq).Bind(2, seq);
    RETURN_IF_ERROR(del.Run());
    ASSIGN_OR_RETURN(SqliteStatement upd,
                     db_->Prepare("UPDATE jobs SET trainer_events = "
                                  "trainer_events - 1, pruned_through = "
                                  "max(pruned_through, ?) WHERE create_seq = ?"));
    upd.Bind(1, seq).Bind(2, create_seq);
    RETURN_IF_ERROR(upd.Run());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::JobEvent>> JobStore::ReadEvents(
    std::string_view id, int64_t after_sequence, int32_t max_events) const {
  if (after_sequence < 0) {
    return InvalidFieldError(
        "after_sequence", absl::StrCat("must be >= 0, got ", after_sequence));
  }
  Reader reader(this);
  ASSIGN_OR_RETURN(JobCounters c, LoadCounters(reader.db(), id));
  if (after_sequence > c.last_sequence) {
    return absl::OutOfRangeError(absl::StrCat(
        "after_sequence ", after_sequence, " is past the last event (",
        c.last_sequence, ") of job ", std::string(id)));
  }
  if (after_sequence > 0 && after_sequence < c.pruned_through) {
    return absl::OutOfRangeError(absl::StrCat(
        "events of job ", std::string(id), " up to sequence ",
        c.pruned_through,
        " were pruned (only the latest progress events are kept); watch "
        "again from after_sequence 0 or >= ",
        c.pruned_through));
  }
  ASSIGN_OR_RETURN(SqliteStatement q,
                   reader.db().Prepare("SELECT event FROM events WHERE job_seq = ? "
                                "AND seq > ? ORDER BY seq LIMIT ?"));
  q.Bind(1, c.create_seq).Bind(2, after_sequence).Bind(3, max_events);
  std::vector<v1::JobEvent> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return out;
    v1::JobEvent e;
    if (!e.ParseFromString(q.ColumnBlob(0))) {
      return absl::DataLossError(absl::StrCat(
          "job ", std::string(id), ": cannot parse a stored event"));
    }
    out.push_back(std::move(e));
  }
}

absl::Status JobStore::AppendLog(std::string_view id, std::string_view bytes) {
  if (bytes.empty()) return absl::OkStatus();
  return Commit(
      Durability::kTelemetry, "append_log",
      [&] {
        ASSIGN_OR_RETURN(JobCounters c, LoadCounters(*db_, id));
        const int64_t cap = options_.log_bytes_kept;
        int64_t start = c.log_end;
        if (static_cast<int64_t>(bytes.size()) > cap) {  // keep only its tail
          start += static_cast<int64_t>(bytes.size()) - cap;
          bytes.remove_prefix(bytes.size() - cap);
        }
        const int64_t end = start + static_cast<int64_t>(bytes.size());
        ASSIGN_OR_RETURN(SqliteStatement ins,
                         db_->Prepare("INSERT INTO logs (job_seq, start, end, "
                                      "data) VALUES (?, ?, ?, ?)"));
        ins.Bind(1, c.create_seq)
            .Bind(2, start)
            .Bind(3, end)
            .BindBlob(4, bytes);
        RETURN_IF_ERROR(ins.Run());
        // Drop whole chunks from the head until the log fits the cap again.
        ASSIGN_OR_RETURN(SqliteStatement del,
                         db_->Prepare("DELETE FROM logs WHERE job_seq = ? AND "
                                      "end <= ? - ?"));
        del.Bind(1, c.create_seq).Bind(2, end).Bind(3, cap);
        RETURN_IF_ERROR(del.Run());
        ASSIGN_OR_RETURN(SqliteStatement first,
                         db_->Prepare("SELECT min(start) FROM logs WHERE "
                                      "job_seq = ?"));
        first.Bind(1, c.create_seq);
        ASSIGN_OR_RETURN(bool row, first.Step());
        const int64_t log_start = row ? first.ColumnInt64(0) : start;
        ASSIGN_OR_RETURN(
            SqliteStatement upd,
            db_->Prepare("UPDATE jobs SET log_start = ?, log_end = ? "
                         "WHERE create_seq = ?"));
        upd.Bind(1, log_start).Bind(2, end).Bind(3, c.create_seq);
        return upd.Run();
      },
      id);
}

absl::StatusOr<LogRead> JobStore::ReadLog(std::string_view id, int64_t offset,
                                          int64_t max_bytes) const {
  if (offset < 0) {
    return InvalidFieldError("offset",
                             absl::StrCat("must be >= 0, got ", offset));
  }
  Reader reader(this);
  ASSIGN_OR_RETURN(JobCounters c, LoadCounters(reader.db(), id));
  if (offset > c.log_end) {
    return absl::OutOfRangeError(
        absl::StrCat("offset ", offset, " is past the end of the log of job ",
                     std::string(id), " (", c.log_end, " bytes)"));
  }
  LogRead out;
  out.offset = std::max(offset, c.log_start);
  out.end = c.log_end;
  ASSIGN_OR_RETURN(SqliteStatement q,
                   reader.db().Prepare("SELECT start, data FROM logs WHERE "
                                "job_seq = ? AND end > ? ORDER BY start"));
  q.Bind(1, c.create_seq).Bind(2, out.offset);
  while (static_cast<int64_t>(out.data.size()) < max_bytes) {
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    const int64_t start = q.ColumnInt64(0);
    std::string data = q.ColumnBlob(1);
    const int64_t at = out.offset + static_cast<int64_t>(out.data.size());
    if (start > at) break;  // a gap cannot happen; stop rather than lie
    const size_t skip = static_cast<size_t>(at - start);
    const size_t room = static_cast<size_t>(max_bytes) - out.data.size();
    out.data.append(data, skip, std::min(room, data.size() - skip));
  }
  return out;
}

}  // namespace trainyard::server
