// `yard metrics ID...`: the jobs' training curves (JobService.
// GetJobMetrics). A step's progress report and evaluation make one row:
//
//   STEP  LOSS    LR      GRAD-NORM  TOKENS/S  EVAL-LOSS  ELAPSED
//   10    4.1270  0.0006  1.82       497113    -          0s
//
// with SAMPLES/S for a model that reads no tokens, ACCURACY after EVAL-LOSS
// for a classifier, and a line saying how the server thinned a long run.
// --csv writes every figure unrounded, one row a step and job, for a
// plotting tool; -o json the JobMetrics as they came.
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/commands.h"
#include "client/output_format.h"
#include "common/proto_time.h"

namespace trainyard::client {
namespace {

namespace v1 = ::trainyard::v1;

// One step of a curve: its progress report, its evaluation, or both.
struct Row {
  int64_t step = 0;
  absl::Time time;  // the first point's of the step
  const v1::TrainProgress* progress = nullptr;
  const v1::EvalResult* eval = nullptr;
};

// The points are by step, a step's report before its evaluation.
std::vector<Row> RowsOf(const v1::JobMetrics& m) {
  std::vector<Row> rows;
  for (const v1::MetricPoint& p : m.points()) {
    if (!p.has_progress() && !p.has_eval()) continue;
    const int64_t step =
        p.has_progress() ? p.progress().step() : p.eval().step();
    if (rows.empty() || rows.back().step != step) {
      rows.push_back(Row{.step = step, .time = FromProtoTime(p.time())});
    }
    if (p.has_progress()) rows.back().progress = &p.progress();
    if (p.has_eval()) rows.back().eval = &p.eval();
  }
  return rows;
}

// "42s", "3m05s", "2h07m".
std::string Elapsed(absl::Duration d) {
  const int64_t s = absl::ToInt64Seconds(d);
  if (s < 60) return absl::StrCat(s, "s");
  if (s < 7200) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm", s / 3600, s / 60 % 60);
}

std::string Thinned(const char* what, int64_t stride) {
  return absl::StrCat("(", what,
                      " thinned by the server over this long run: those at "
                      "steps that are multiples of ",
                      stride, " are kept, and the newest)\n");
}

std::string FormatCurveTable(const v1::JobMetrics& m) {
  const std::vector<Row> rows = RowsOf(m);
  if (rows.empty()) {
    return absl::StrCat("job ", m.job_id(), " has reported no progress yet\n");
  }
  bool tokens = false, evals = false, accuracy = false;
  for (const Row& r : rows) {
    if (r.progress != nullptr && r.progress->tokens_per_second() > 0) {
      tokens = true;
    }
    if (r.eval != nullptr) {
      evals = true;
      if (r.eval->accuracy() > 0) accuracy = true;
    }
  }
  std::vector<std::string> header = {"STEP", "LOSS", "LR", "GRAD-NORM",
                                     tokens ? "TOKENS/S" : "SAMPLES/S"};
  if (evals) header.push_back("EVAL-LOSS");
  if (accuracy) header.push_back("ACCURACY");
  header.push_back("ELAPSED");
  std::vector<std::vector<std::string>> cells;
  const absl::Time start = rows.front().time;
  for (const Row& r : rows) {
    std::vector<std::string> row = {absl::StrCat(r.step)};
    if (r.progress != nullptr) {
      const v1::TrainProgress& p = *r.progress;
      row.push_back(absl::StrFormat("%.4f", p.loss()));
      row.push_back(absl::StrFormat("%.3g", p.lr()));
      row.push_back(absl::StrFormat("%.3g", p.grad_norm()));
      row.push_back(absl::StrFormat(
          "%.0f", tokens ? p.tokens_per_second() : p.samples_per_second()));
    } else {
      row.insert(row.end(), 4, "-");
    }
    if (evals) {
      row.push_back(r.eval != nullptr ? absl::StrFormat("%.4f", r.eval->loss())
                                      : "-");
    }
    if (accuracy) {
      row.push_back(r.eval != nullptr
                        ? absl::StrFormat("%.2f%%", r.eval->accuracy() * 100)
                        : "-");
    }
    row.push_back(Elapsed(r.time - start));
    cells.push_back(std::move(row));
  }
  std::string out = FormatTable(header, cells);
  if (m.progress_stride() > 1) {
    out += Thinned("progress reports", m.progress_stride());
  }
  if (m.eval_stride() > 1) out += Thinned("evaluations", m.eval_stride());
  return out;
}

constexpr char kCsvHeader[] =
    "job_id,step,time,elapsed_seconds,loss,lr,grad_norm,samples_per_second,"
    "tokens_per_second,memory_bytes,eval_loss,eval_accuracy\n";

std::string Number(double v) { return absl::StrFormat("%.9g", v); }

std::string FormatCurveCsv(const v1::JobMetrics& m) {
  std::string out;
  const std::vector<Row> rows = RowsOf(m);
  for (const Row& r : rows) {
    std::vector<std::string> f = {
        m.job_id(), absl::StrCat(r.step),
        absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", r.time, absl::UTCTimeZone()),
        Number(absl::ToDoubleSeconds(r.time - rows.front().time))};
    if (r.progress != nullptr) {
      const v1::TrainProgress& p = *r.progress;
      f.insert(f.end(),
               {Number(p.loss()), Number(p.lr()), Number(p.grad_norm()),
                Number(p.samples_per_second()), Number(p.tokens_per_second()),
                absl::StrCat(p.memory_bytes())});
    } else {
      f.insert(f.end(), 6, "");
    }
    if (r.eval != nullptr) {
      f.push_back(Number(r.eval->loss()));
      f.push_back(Number(r.eval->accuracy()));
    } else {
      f.insert(f.end(), 2, "");
    }
    absl::StrAppend(&out, absl::StrJoin(f, ","), "\n");
  }
  return out;
}

}  // namespace

int RunMetricsCommand(const CliArgs& args, JobClient& client, std::ostream& out,
                      std::ostream& err) {
  std::vector<v1::JobMetrics> curves;
  for (const std::string& id : args.job_ids) {
    absl::StatusOr<v1::JobMetrics> m = client.GetMetrics(id);
    if (!m.ok()) return ReportError(AboutJob(m.status(), id), err);
    curves.push_back(*std::move(m));
  }
  if (args.output == OutputFormat::kJson) {
    for (const v1::JobMetrics& m : curves) {
      if (absl::Status s = PrintJson(out, m, curves.size() == 1); !s.ok()) {
        return ReportError(s, err);
      }
    }
    return kExitOk;
  }
  if (args.csv) out << kCsvHeader;
  for (size_t i = 0; i < curves.size(); ++i) {
    if (args.csv) {
      out << FormatCurveCsv(curves[i]);
      continue;
    }
    if (curves.size() > 1) {
      out << (i > 0 ? "\n" : "") << "job " << curves[i].job_id() << "\n";
    }
    out << FormatCurveTable(curves[i]);
  }
  out.flush();
  return kExitOk;
}

}  // namespace trainyard::client
