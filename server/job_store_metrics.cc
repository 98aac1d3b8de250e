// JobStore: each job's training curve (v1::JobMetrics), written in the same
// transaction as the trainer event that carries each point.
//
// A job has two series, its progress reports and its evaluations, each
// keyed by step. A series holds at most metric_points_kept points: past
// that its stride doubles (1, 2, 4, ...) and only the points at steps that
// are multiples of it stay, until it fits again; a new point is stored
// whatever its step, and replaced by the next one unless it is on the
// stride. So each series keeps between half the cap and the cap of points
// spread evenly over the whole run, and its newest point. A series' row in
// metric_series holds its stride, count and newest step, so a point costs
// three indexed statements (four when the previous newest goes); only a
// thinning, or a run going back, scans the series.
//
// A run that goes back (a resumed attempt starts from a checkpoint, its
// TrainStarted naming the step) drops the points past that step, and a
// point at or before a series' newest step replaces the points from it on:
// the curve is the one of the run that went on, each step once.
#include <cstdint>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "server/job_store.h"

namespace trainyard::server {
namespace {

enum Series : int64_t { kProgress = 0, kEval = 1 };

// The series and step of a trainer event that makes a point, and the point.
struct PointOf {
  Series series;
  int64_t step;
  v1::MetricPoint point;
};

std::optional<PointOf> PointOfEvent(const v1::JobEvent& event) {
  const v1::TrainerEvent& t = event.trainer();
  PointOf out;
  *out.point.mutable_time() = event.time();
  if (t.has_progress()) {
    out.series = kProgress;
    out.step = t.progress().step();
    *out.point.mutable_progress() = t.progress();
  } else if (t.has_eval()) {
    out.series = kEval;
    out.step = t.eval().step();
    *out.point.mutable_eval() = t.eval();
  } else {
    return std::nullopt;
  }
  if (out.step < 0) return std::nullopt;
  return out;
}

// A series' row of metric_series: its stride, how many points it holds
// and its newest step (-1: none).
struct SeriesRow {
  int64_t stride = 1;
  int64_t points = 0;
  int64_t newest = -1;
};

absl::StatusOr<SeriesRow> LoadSeries(SqliteDb& db, int64_t job_seq,
                                     int64_t series) {
  ASSIGN_OR_RETURN(
      SqliteStatement q,
      db.Prepare("SELECT stride, points, newest FROM "
                 "metric_series WHERE job_seq = ? AND series = ?"));
  q.Bind(1, job_seq).Bind(2, series);
  ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return SeriesRow{};
  return SeriesRow{q.ColumnInt64(0), q.ColumnInt64(1), q.ColumnInt64(2)};
}

absl::Status SaveSeries(SqliteDb& db, int64_t job_seq, int64_t series,
                        const SeriesRow& s) {
  ASSIGN_OR_RETURN(SqliteStatement put,
                   db.Prepare("INSERT OR REPLACE INTO metric_series (job_seq, "
                              "series, stride, points, newest) VALUES (?, ?, "
                              "?, ?, ?)"));
  put.Bind(1, job_seq)
      .Bind(2, series)
      .Bind(3, s.stride)
      .Bind(4, s.points)
      .Bind(5, s.newest);
  return put.Run();
}

// A run that went back: the series' points at `first_step` and past it
// deleted, then its count and newest step read again (a scan of the
// series; only when a run goes back).
absl::Status DropPointsFrom(SqliteDb& db, int64_t job_seq, int64_t series,
                            int64_t first_step, SeriesRow& s) {
  ASSIGN_OR_RETURN(SqliteStatement del,
                   db.Prepare("DELETE FROM metric_points WHERE job_seq = ? "
                              "AND series = ? AND step >= ?"));
  del.Bind(1, job_seq).Bind(2, series).Bind(3, first_step);
  RETURN_IF_ERROR(del.Run());
  ASSIGN_OR_RETURN(SqliteStatement q,
                   db.Prepare("SELECT count(*), coalesce(max(step), -1) FROM "
                              "metric_points WHERE job_seq = ? AND "
                              "series = ?"));
  q.Bind(1, job_seq).Bind(2, series);
  ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return absl::InternalError("count(*) returned no row");
  s.points = q.ColumnInt64(0);
  s.newest = q.ColumnInt64(1);
  return absl::OkStatus();
}

}  // namespace

absl::Status JobStore::RecordMetricPoint(int64_t create_seq,
                                         const v1::JobEvent& event) {
  if (event.trainer().has_started()) {
    // The attempt trains on from this step: what was recorded past it
    // belongs to a run that did not go on.
    const int64_t from = event.trainer().started().start_step();
    if (from <= 0) {  // a fresh start: the strides start over too
      for (const char* sql : {"DELETE FROM metric_points WHERE job_seq = ?",
                              "DELETE FROM metric_series WHERE job_seq = ?"}) {
        ASSIGN_OR_RETURN(SqliteStatement del, db_->Prepare(sql));
        del.Bind(1, create_seq);
        RETURN_IF_ERROR(del.Run());
      }
      return absl::OkStatus();
    }
    for (const Series series : {kProgress, kEval}) {
      ASSIGN_OR_RETURN(SeriesRow row, LoadSeries(*db_, create_seq, series));
      if (row.newest <= from) continue;  // (so from + 1 cannot overflow)
      RETURN_IF_ERROR(DropPointsFrom(*db_, create_seq, series, from + 1, row));
      RETURN_IF_ERROR(SaveSeries(*db_, create_seq, series, row));
    }
    return absl::OkStatus();
  }
  std::optional<PointOf> p = PointOfEvent(event);
  if (!p.has_value()) return absl::OkStatus();

  ASSIGN_OR_RETURN(SeriesRow row, LoadSeries(*db_, create_seq, p->series));
  if (p->step <= row.newest) {  // the run went back: replace from here on
    RETURN_IF_ERROR(DropPointsFrom(*db_, create_seq, p->series, p->step, row));
  }
  // The newest point so far stops being the newest: it stays only on the
  // stride.
  if (row.newest >= 0 && row.newest % row.stride != 0) {
    ASSIGN_OR_RETURN(SqliteStatement off,
                     db_->Prepare("DELETE FROM metric_points WHERE job_seq = ? "
                                  "AND series = ? AND step = ?"));
    off.Bind(1, create_seq).Bind(2, p->series).Bind(3, row.newest);
    RETURN_IF_ERROR(off.Run());
    row.points -= db_->Changes();
  }
  ASSIGN_OR_RETURN(SqliteStatement ins,
                   db_->Prepare("INSERT INTO metric_points (job_seq, series, "
                                "step, point) VALUES (?, ?, ?, ?)"));
  ins.Bind(1, create_seq)
      .Bind(2, p->series)
      .Bind(3, p->step)
      .BindBlob(4, p->point.SerializeAsString());
  RETURN_IF_ERROR(ins.Run());
  ++row.points;
  row.newest = p->step;
  // Past the cap: double the stride until the series fits, or until it
  // would pass the newest step (then at most steps 0, the stride and the
  // newest are left: within any cap the options allow).
  while (row.points > options_.metric_points_kept &&
         row.stride <= p->step / 2) {
    row.stride *= 2;
    ASSIGN_OR_RETURN(SqliteStatement thin,
                     db_->Prepare("DELETE FROM metric_points WHERE job_seq = ? "
                                  "AND series = ? AND step % ? != 0 AND "
                                  "step != ?"));
    thin.Bind(1, create_seq)
        .Bind(2, p->series)
        .Bind(3, row.stride)
        .Bind(4, p->step);
    RETURN_IF_ERROR(thin.Run());
    row.points -= db_->Changes();
  }
  return SaveSeries(*db_, create_seq, p->series, row);
}

absl::Status JobStore::FillMetricsFromEvents() {
  ASSIGN_OR_RETURN(SqliteStatement q,
                   db_->Prepare("SELECT job_seq, event FROM events WHERE "
                                "kind = 1 ORDER BY job_seq, seq"));
  int64_t skipped = 0;
  while (true) {
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    v1::JobEvent e;
    if (!e.ParseFromString(q.ColumnBlob(1)) || !e.has_trainer()) {
      ++skipped;  // a point of a curve is not worth refusing the upgrade
      continue;
    }
    RETURN_IF_ERROR(RecordMetricPoint(q.ColumnInt64(0), e));
  }
  if (skipped > 0) {
    YARD_LOG(WARNING) << options_.path << ": " << skipped
                      << " stored trainer events could not be parsed and are "
                         "not in their jobs' training curves";
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::JobMetrics> JobStore::ReadMetrics(
    std::string_view id) const {
  Reader reader(this);
  ASSIGN_OR_RETURN(SqliteStatement job,
                   reader.db().Prepare("SELECT create_seq FROM jobs WHERE "
                                       "id = ?"));
  job.BindText(1, id);
  ASSIGN_OR_RETURN(bool found, job.Step());
  if (!found) {
    return absl::NotFoundError(
        absl::StrCat("job ", std::string(id), " not found"));
  }
  const int64_t create_seq = job.ColumnInt64(0);
  v1::JobMetrics out;
  out.set_job_id(std::string(id));
  out.set_progress_stride(1);
  out.set_eval_stride(1);
  ASSIGN_OR_RETURN(SqliteStatement strides,
                   reader.db().Prepare("SELECT series, stride FROM "
                                       "metric_series WHERE job_seq = ?"));
  strides.Bind(1, create_seq);
  while (true) {
    ASSIGN_OR_RETURN(bool row, strides.Step());
    if (!row) break;
    if (strides.ColumnInt64(0) == kProgress) {
      out.set_progress_stride(strides.ColumnInt64(1));
    } else {
      out.set_eval_stride(strides.ColumnInt64(1));
    }
  }
  ASSIGN_OR_RETURN(SqliteStatement points,
                   reader.db().Prepare("SELECT point FROM metric_points WHERE "
                                       "job_seq = ? ORDER BY step, series"));
  points.Bind(1, create_seq);
  while (true) {
    ASSIGN_OR_RETURN(bool row, points.Step());
    if (!row) return out;
    if (!out.add_points()->ParseFromString(points.ColumnBlob(0))) {
      return absl::DataLossError(absl::StrCat(
          "job ", std::string(id), ": cannot parse a stored metric point"));
    }
  }
}

}  // namespace trainyard::server
