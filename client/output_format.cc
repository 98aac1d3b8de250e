// Human-readable output of `yard`. Numbers are printed the same way
// everywhere (loss with 4 decimals, accuracy as a percentage with 2) so that
// watch lines, tables and details read alike.
#include "client/output_format.h"

#include <algorithm>
#include <ostream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/json_string.h"
#include "common/proto_time.h"
#include "common/utf8.h"
#include "google/protobuf/util/json_util.h"

namespace trainyard::client {
namespace {

namespace v1 = ::trainyard::v1;

std::string Percent(double fraction) {
  return absl::StrFormat("%.2f%%", fraction * 100.0);
}

std::string Loss(double loss) { return absl::StrFormat("%.4f", loss); }

std::string StepColumn(const v1::Job& job) {
  int64_t total = job.progress().total_steps() > 0
                      ? job.progress().total_steps()
                      : job.spec().steps();
  int64_t step = job.progress().step();
  if (job.has_result()) step = job.result().step();
  if (step == 0 && !job.has_progress()) return "-";
  return absl::StrCat(step, "/", total);
}

std::string ProgressLine(const v1::TrainProgress& p) {
  std::string line = absl::StrCat("step ", p.step(), "/", p.total_steps(),
                                  " loss ", Loss(p.loss()));
  absl::StrAppend(&line,
                  absl::StrFormat(" %.0f samples/s", p.samples_per_second()));
  if (p.tokens_per_second() > 0) {
    absl::StrAppend(&line,
                    absl::StrFormat(" %.0f tokens/s", p.tokens_per_second()));
  }
  return line;
}

std::string EvalLine(const v1::EvalResult& e) {
  return absl::StrCat("eval step ", e.step(), ": loss ", Loss(e.loss()),
                      " accuracy ", Percent(e.accuracy()));
}

// Whether the run evaluated at all (else its eval figures are zeros, not
// results): every evaluation has a cross-entropy loss above 0. Every
// model's evaluation also measures accuracy, so a 0% is a result.
bool Evaluated(const v1::TrainFinished& f) { return f.eval_loss() > 0; }

std::string StateChangeLine(const v1::StateChange& c) {
  std::string line =
      absl::StrCat("state ", StateName(c.from()), " -> ", StateName(c.to()));
  if (c.attempt() > 0 && !c.worker_id().empty()) {
    absl::StrAppend(&line, " (attempt ", c.attempt(), ", worker ",
                    c.worker_id(), ")");
  }
  if (!c.reason().empty()) absl::StrAppend(&line, ": ", c.reason());
  return line;
}

std::string TrainerLine(const v1::TrainerEvent& t) {
  switch (t.event_case()) {
    case v1::TrainerEvent::kStarted: {
      const auto& s = t.started();
      std::string backend = s.backend().empty() ? "" : ", " + s.backend();
      if (s.start_step() > 0) {
        return absl::StrCat("training resumed at step ", s.start_step(), "/",
                            s.total_steps(), " from ", s.resumed_from(),
                            backend.empty() ? "" : " (" + s.backend() + ")");
      }
      return absl::StrCat("training started: ", s.total_steps(), " steps, ",
                          s.parameters(), " parameters", backend);
    }
    case v1::TrainerEvent::kProgress:
      return ProgressLine(t.progress());
    case v1::TrainerEvent::kEval:
      return EvalLine(t.eval());
    case v1::TrainerEvent::kCheckpoint:
      return absl::StrCat("checkpoint step ", t.checkpoint().step(), ": ",
                          t.checkpoint().path());
    case v1::TrainerEvent::kFinished: {
      const auto& f = t.finished();
      std::string line = absl::StrCat("training finished at step ", f.step(),
                                      ": train loss ", Loss(f.train_loss()));
      if (Evaluated(f)) {
        absl::StrAppend(&line, ", eval loss ", Loss(f.eval_loss()),
                        ", accuracy ", Percent(f.eval_accuracy()));
      }
      absl::StrAppend(&line, absl::StrFormat(" (%.1f s)", f.wall_seconds()));
      if (!f.stopped_early().empty()) {
        absl::StrAppend(&line, "; stopped early: ", f.stopped_early());
      }
      return line;
    }
    case v1::TrainerEvent::kInterrupted:
      return absl::StrCat("training interrupted at step ",
                          t.interrupted().step(), ": checkpoint ",
                          t.interrupted().checkpoint_path());
    default:
      return "trainer event";
  }
}

std::string CheckpointOf(const v1::Job& job) {
  if (!job.result().checkpoint_path().empty()) {
    return job.result().checkpoint_path();
  }
  if (!job.last_checkpoint().path().empty())
    return job.last_checkpoint().path();
  return job.checkpoint_dir();
}

}  // namespace

// A failure reason carries its stderr tail on a new line; a table keeps it
// on its row.
std::string OneLine(absl::string_view cell) {
  std::string out;
  for (absl::string_view part : absl::StrSplit(cell, '\n')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) continue;
    if (!out.empty()) out.push_back(' ');
    out.append(part.data(), part.size());
  }
  return out;
}

std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& cells) {
  std::vector<std::vector<std::string>> rows;
  rows.reserve(cells.size());
  for (const auto& row : cells) {
    std::vector<std::string>& flat = rows.emplace_back();
    for (const std::string& cell : row) {
      flat.push_back(cell.find('\n') == std::string::npos ? cell
                                                          : OneLine(cell));
    }
  }
  std::vector<size_t> widths(header.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < widths.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  };
  measure(header);
  for (const auto& row : rows) measure(row);
  std::string out;
  auto emit = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t i = 0; i < row.size() && i < widths.size(); ++i) {
      if (i > 0) line.append("  ");
      line.append(row[i]);
      if (i + 1 < row.size()) line.append(widths[i] - row[i].size(), ' ');
    }
    absl::StrAppend(&out, absl::StripTrailingAsciiWhitespace(line), "\n");
  };
  emit(header);
  for (const auto& row : rows) emit(row);
  return out;
}

std::string FormatAge(absl::Time then, absl::Time now) {
  if (then == absl::UnixEpoch() || then == absl::InfinitePast()) return "-";
  int64_t s = absl::ToInt64Seconds(now - then);
  if (s < 0) s = 0;
  if (s < 120) return absl::StrCat(s, "s");
  if (s < 2 * 3600) return absl::StrCat(s / 60, "m");
  if (s < 2 * 86400) return absl::StrCat(s / 3600, "h");
  return absl::StrCat(s / 86400, "d");
}

std::string StateName(v1::JobState state) {
  if (state == v1::JOB_STATE_UNSPECIFIED) return "-";
  const std::string& name = v1::JobState_Name(state);
  return name.empty() ? absl::StrCat(static_cast<int>(state)) : name;
}

// "QUEUED (#3)" for a queued job whose place in the queue is known.
std::string StateColumn(const v1::Job& job) {
  if (job.state() != v1::QUEUED || job.queue_position() <= 0) {
    return StateName(job.state());
  }
  return absl::StrCat(StateName(job.state()), " (#", job.queue_position(), ")");
}

std::string FormatJobsTable(const std::vector<v1::Job>& jobs, absl::Time now) {
  std::vector<std::vector<std::string>> rows;
  for (const v1::Job& job : jobs) {
    rows.push_back(
        {job.id(), job.name().empty() ? "-" : job.name(), StateColumn(job),
         job.attempt() > 0 ? absl::StrCat(job.attempt()) : "-",
         job.worker_id().empty() ? "-" : job.worker_id(), StepColumn(job),
         IsSet(job.create_time())
             ? FormatAge(FromProtoTime(job.create_time()), now)
             : "-"});
  }
  return FormatTable(
      {"ID", "NAME", "STATE", "ATTEMPT", "WORKER", "STEP", "AGE"}, rows);
}

std::string FormatEvent(const v1::JobEvent& event) {
  switch (event.payload_case()) {
    case v1::JobEvent::kStateChange:
      return StateChangeLine(event.state_change());
    case v1::JobEvent::kTrainer:
      return TrainerLine(event.trainer());
    default:
      return absl::StrCat("event ", event.sequence());
  }
}

std::string FormatOutcome(const v1::Job& job) {
  std::string line =
      absl::StrCat("job ", job.id(), " ", StateName(job.state()));
  if (job.state() == v1::SUCCEEDED) {
    if (!job.result().stopped_early().empty()) {
      absl::StrAppend(&line, " (stopped early at step ", job.result().step(),
                      " of ", job.spec().steps(), ")");
    }
    std::vector<std::string> parts;
    if (job.has_result() && Evaluated(job.result())) {
      parts.push_back(
          absl::StrCat("accuracy ", Percent(job.result().eval_accuracy())));
      parts.push_back(
          absl::StrCat("eval loss ", Loss(job.result().eval_loss())));
    }
    std::string ckpt = CheckpointOf(job);
    if (!ckpt.empty()) parts.push_back(absl::StrCat("checkpoint ", ckpt));
    if (!job.result().best_checkpoint_path().empty() &&
        job.result().best_checkpoint_path() != ckpt) {
      parts.push_back(absl::StrCat("best checkpoint ",
                                   job.result().best_checkpoint_path(),
                                   " (step ", job.result().best_step(), ")"));
    }
    if (!parts.empty())
      absl::StrAppend(&line, ": ", absl::StrJoin(parts, ", "));
  } else if (!job.state_reason().empty()) {
    absl::StrAppend(&line, ": ", job.state_reason());
  }
  return line;
}

std::string FormatSweepResults(
    const std::vector<v1::Job>& jobs, const std::vector<std::string>& fields,
    const std::vector<std::vector<std::string>>& values) {
  std::vector<std::string> header = {"ID", "STATE"};
  for (const std::string& field : fields) {
    header.push_back(absl::AsciiStrToUpper(field));
  }
  for (const char* h : {"STEP", "TRAIN-LOSS", "EVAL-LOSS", "ACCURACY"}) {
    header.push_back(h);
  }
  // The best SUCCEEDED job: compared by accuracy when any job has one,
  // else by eval loss when any has one, else by train loss. Jobs that
  // halving stopped early (evaluated at a rung, not at the end) are
  // candidates only when no job ran on.
  bool by_accuracy = false, by_eval_loss = false, any_ran_on = false;
  std::vector<std::string> halved;
  for (const v1::Job& job : jobs) {
    if (job.state() != v1::SUCCEEDED) continue;
    by_accuracy |= job.result().eval_accuracy() > 0;
    by_eval_loss |= job.result().eval_loss() > 0;
    any_ran_on |= !job.has_halving_stop();
    if (job.has_halving_stop()) {
      halved.push_back(
          absl::StrCat(job.id(), " (rung ", job.halving_stop().rung(), ")"));
    }
  }
  auto score = [&](const v1::Job& job) {  // higher is better
    const v1::TrainFinished& r = job.result();
    if (by_accuracy) return r.eval_accuracy();
    return -(by_eval_loss ? r.eval_loss() : r.train_loss());
  };
  int best = -1;
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const v1::Job& job = jobs[i];
    std::vector<std::string> row = {job.id(), StateName(job.state())};
    for (size_t f = 0; f < fields.size(); ++f) {
      row.push_back(i < values.size() && f < values[i].size() ? values[i][f]
                                                              : "-");
    }
    row.push_back(StepColumn(job));
    const bool done = job.state() == v1::SUCCEEDED && job.has_result();
    const v1::TrainFinished& r = job.result();
    row.push_back(done ? Loss(r.train_loss()) : "-");
    row.push_back(done && Evaluated(r) ? Loss(r.eval_loss()) : "-");
    row.push_back(done && Evaluated(r) ? Percent(r.eval_accuracy()) : "-");
    rows.push_back(std::move(row));
    const bool candidate = done && !(any_ran_on && job.has_halving_stop());
    if (candidate && (best < 0 || score(job) > score(jobs[best]))) {
      best = static_cast<int>(i);
    }
  }
  std::string out = FormatTable(header, rows);
  if (!halved.empty()) {
    absl::StrAppend(
        &out, "stopped early by halving: ", absl::StrJoin(halved, ", "), "\n");
  }
  if (best >= 0) {
    const v1::TrainFinished& r = jobs[best].result();
    absl::StrAppend(
        &out, "best: ", jobs[best].id(), " (",
        by_accuracy    ? absl::StrCat("accuracy ", Percent(r.eval_accuracy()))
        : by_eval_loss ? absl::StrCat("eval loss ", Loss(r.eval_loss()))
                       : absl::StrCat("train loss ", Loss(r.train_loss())),
        ")\n");
  }
  return out;
}

std::string FormatCheckpointsTable(
    const std::vector<v1::CheckpointInfo>& checkpoints, absl::Time now) {
  std::vector<std::vector<std::string>> rows;
  for (const v1::CheckpointInfo& c : checkpoints) {
    rows.push_back({absl::StrCat(c.step()), FormatBytes(c.bytes()),
                    FormatAge(FromProtoTime(c.save_time()), now),
                    c.best() ? "best" : ""});
  }
  return FormatTable({"STEP", "SIZE", "SAVED", ""}, rows);
}

std::string FormatDeleted(const v1::DeleteJobResponse& response,
                          bool keep_checkpoints) {
  std::string line = absl::StrCat("deleted job ", response.job_id());
  if (!response.deleted_checkpoint_dir().empty()) {
    return absl::StrCat(line, " and its checkpoints (",
                        response.deleted_checkpoint_dir(), ", ",
                        FormatBytes(response.deleted_checkpoint_bytes()), ")");
  }
  return absl::StrCat(line, keep_checkpoints
                                ? " (checkpoints kept)"
                                : " (no checkpoint directory removed)");
}

namespace {

// Seconds as hours: two decimals, four below 0.01 h (a short CPU job).
std::string Hours(double seconds) {
  const double h = seconds / 3600;
  if (h <= 0) return "0.00";
  if (h < 0.0001) return "<0.0001";
  return absl::StrFormat(h < 0.01 ? "%.4f" : "%.2f", h);
}

// The hour columns of a usage row.
std::vector<std::string> HourCells(const v1::UsageRow& row) {
  return {Hours(row.gpu_seconds()), Hours(row.failed_gpu_seconds()),
          Hours(row.cpu_slot_seconds()), Hours(row.failed_cpu_slot_seconds())};
}

}  // namespace

std::string FormatUtcTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", t, absl::UTCTimeZone());
}

std::string FormatUsageReport(const v1::UsageReport& report) {
  const std::string window =
      absl::StrCat("from ", FormatUtcTime(FromProtoTime(report.start_time())),
                   " to ", FormatUtcTime(FromProtoTime(report.end_time())));
  if (report.tenants().empty()) return absl::StrCat("no usage ", window, "\n");
  std::string out = absl::StrCat("usage ", window, "\n");
  const std::vector<std::string> hours = {"GPU-H", "FAILED-GPU-H", "CPU-SLOT-H",
                                          "FAILED-CPU-SLOT-H"};
  std::vector<std::string> header = {"TENANT", "JOBS", "ATTEMPTS"};
  header.insert(header.end(), hours.begin(), hours.end());
  std::vector<std::vector<std::string>> rows;
  auto add = [&rows](const std::string& name, const v1::UsageRow& row) {
    std::vector<std::string> cells = {name, absl::StrCat(row.jobs()),
                                      absl::StrCat(row.attempts())};
    for (std::string& c : HourCells(row)) cells.push_back(std::move(c));
    rows.push_back(std::move(cells));
  };
  for (const v1::UsageRow& row : report.tenants()) add(row.tenant(), row);
  if (report.tenants_size() > 1) add("total", report.total());
  absl::StrAppend(&out, FormatTable(header, rows));
  if (report.jobs().empty()) return out;

  header = {"JOB", "TENANT", "STATE", "ATTEMPTS"};
  header.insert(header.end(), hours.begin(), hours.end());
  header.push_back("NAME");
  rows.clear();
  for (const v1::UsageRow& row : report.jobs()) {
    std::vector<std::string> cells = {row.job_id(), row.tenant(),
                                      row.state() == v1::JOB_STATE_UNSPECIFIED
                                          ? "deleted"
                                          : StateName(row.state()),
                                      absl::StrCat(row.attempts())};
    for (std::string& c : HourCells(row)) cells.push_back(std::move(c));
    cells.push_back(OneLine(row.job_name()));
    rows.push_back(std::move(cells));
  }
  absl::StrAppend(&out, "\n", FormatTable(header, rows));
  if (report.jobs_truncated()) {
    absl::StrAppend(&out, "(only the ", report.jobs_size(),
                    " jobs with the most GPU time; more jobs had usage)\n");
  }
  return out;
}

std::string LogLinesToJson::Line(int64_t offset, absl::string_view text) const {
  std::string out = absl::StrCat("{\"offset\":", offset, ",\"line\":");
  AppendJsonString(ToValidUtf8(std::string_view(text.data(), text.size())),
                   &out);
  out += "}\n";
  return out;
}

std::string LogLinesToJson::Add(const v1::LogChunk& chunk) {
  std::string out;
  if (!open_.empty() &&
      chunk.offset() != open_offset_ + static_cast<int64_t>(open_.size())) {
    out = Finish();
  }
  const std::string& data = chunk.data();
  size_t begin = 0;
  if (open_.empty()) open_offset_ = chunk.offset();
  for (size_t nl = data.find('\n'); nl != std::string::npos;
       nl = data.find('\n', begin)) {
    open_.append(data, begin, nl - begin);
    out += Line(open_offset_, open_);
    open_.clear();
    begin = nl + 1;
    open_offset_ = chunk.offset() + static_cast<int64_t>(begin);
  }
  open_.append(data, begin, std::string::npos);
  return out;
}

std::string LogLinesToJson::Finish() {
  if (open_.empty()) return "";
  std::string out = Line(open_offset_, open_);
  open_.clear();
  return out;
}

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message,
                                   bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.preserve_proto_field_names = true;
  // Zeros too: GPU 0's index, 0% utilisation, a job at step 0. A field
  // that is absent only when it is 0 makes every script test for both.
  options.always_print_primitive_fields = true;
  std::string out;
  const auto status =
      google::protobuf::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat(
        "cannot print the server's ", message.GetDescriptor()->name(),
        " as JSON: ", std::string(status.message())));
  }
  if (pretty && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

absl::Status PrintJson(std::ostream& out,
                       const google::protobuf::Message& message, bool pretty) {
  absl::StatusOr<std::string> json = ToJson(message, pretty);
  if (!json.ok()) return json.status();
  out << *json << std::endl;
  return absl::OkStatus();
}

}  // namespace trainyard::client
