// `yard` commands. Watching a job prints each event as it arrives (table:
// one human line; json: one JobEvent per line) and ends with the job's
// outcome; the exit code then says whether it SUCCEEDED.
#include "client/commands.h"

#include <algorithm>
#include <functional>
#include <random>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "client/checkpoint_download.h"
#include "client/output_format.h"
#include "client/sweep.h"
#include "common/field_errors.h"
#include "common/status_macros.h"
#include "google/protobuf/struct.pb.h"
#include "spec/spec.h"
#include "spec/spec_override.h"

namespace trainyard::client {

absl::Status AboutJob(const absl::Status& s, const std::string& job_id) {
  // The server quotes an id escaped, and a long one cut at 64 bytes
  // (spec::NotAJobId): that names it too, and so does this.
  const std::string shown = absl::CHexEscape(job_id.substr(0, 64));
  if (s.ok() || absl::StrContains(s.message(), shown)) return s;
  return absl::Status(
      s.code(), absl::StrCat("job ", shown, job_id.size() > 64 ? "..." : "",
                             ": ", s.message()));
}

namespace {

namespace v1 = ::trainyard::v1;

bool IsTerminal(v1::JobState s) {
  return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED;
}

// Waits for a job to end, passing each of its events to `on_event`, and
// returns it ended. A stream that ends while the job is still going (e.g.
// the server shut down gracefully) is resumed a bounded number of times
// from the last event seen.
absl::StatusOr<v1::Job> WaitForEnd(
    const std::string& job_id, JobClient& client,
    const std::function<void(const v1::JobEvent&)>& on_event) {
  constexpr int kMaxRounds = 30;
  int64_t last = 0;
  auto seen = [&](const v1::JobEvent& event) {
    last = std::max(last, event.sequence());
    on_event(event);
    return true;
  };
  for (int round = 0;; ++round) {
    RETURN_IF_ERROR(AboutJob(client.Watch(job_id, last, seen), job_id));
    absl::StatusOr<v1::Job> job = client.Get(job_id);
    if (!job.ok()) return AboutJob(job.status(), job_id);
    if (IsTerminal(job->state())) return job;
    if (round + 1 >= kMaxRounds) {
      return absl::UnavailableError(
          absl::StrCat("the event stream of job ", job_id,
                       " keeps ending before the job does (state ",
                       StateName(job->state()), ")"));
    }
    absl::SleepFor(absl::Seconds(1));
  }
}

// Follows a job to its end, printing each event as it comes.
int Follow(const std::string& job_id, OutputFormat format, JobClient& client,
           std::ostream& out, std::ostream& err) {
  absl::Status unprinted;  // the first event that could not be printed
  absl::StatusOr<v1::Job> job =
      WaitForEnd(job_id, client, [&](const v1::JobEvent& event) {
        if (format == OutputFormat::kTable) {
          out << FormatEvent(event) << std::endl;
        } else if (absl::Status s = PrintJson(out, event, false); !s.ok()) {
          unprinted.Update(s);
        }
      });
  if (!job.ok()) return ReportError(job.status(), err);
  if (!unprinted.ok()) return ReportError(unprinted, err);
  if (format == OutputFormat::kTable) out << FormatOutcome(*job) << "\n";
  return job->state() == v1::SUCCEEDED ? kExitOk : kExitJobNotSucceeded;
}

int RunList(const CliArgs& args, JobClient& client, std::ostream& out,
            std::ostream& err) {
  bool truncated = false;
  ListOptions filter;
  filter.states = args.states;
  filter.name_contains = args.name_contains;
  absl::StatusOr<std::vector<v1::Job>> jobs =
      client.ListAll(filter, args.limit, &truncated);
  if (!jobs.ok()) return ReportError(jobs.status(), err);
  if (args.output == OutputFormat::kJson) {
    v1::ListJobsResponse all;
    for (v1::Job& job : *jobs) *all.add_jobs() = std::move(job);
    if (absl::Status s = PrintJson(out, all, true); !s.ok()) {
      return ReportError(s, err);
    }
  } else if (args.quiet) {
    for (const v1::Job& job : *jobs) out << job.id() << "\n";
  } else {
    out << FormatJobsTable(*jobs, absl::Now());
  }
  if (truncated) {
    err << "yard: showing the first " << args.limit
        << " jobs; use --limit N or --all for more\n";
  }
  return kExitOk;
}

int RunGet(const CliArgs& args, JobClient& client, std::ostream& out,
           std::ostream& err) {
  absl::StatusOr<v1::Job> job = client.Get(args.job_id);
  if (!job.ok()) return ReportError(AboutJob(job.status(), args.job_id), err);
  if (args.output == OutputFormat::kTable) {
    out << FormatJobDetails(*job, absl::Now());
  } else if (absl::Status s = PrintJson(out, *job, true); !s.ok()) {
    return ReportError(s, err);
  }
  return kExitOk;
}

int RunLogs(const CliArgs& args, JobClient& client, std::ostream& out,
            std::ostream& err) {
  const bool json = args.output == OutputFormat::kJson;
  LogLinesToJson lines;
  absl::Status s = client.Logs(
      args.job_id, 0, args.follow,
      [&](const v1::LogChunk& chunk) {
        out << (json ? lines.Add(chunk) : chunk.data()) << std::flush;
      },
      args.tail_lines);
  out << lines.Finish();
  if (!s.ok()) return ReportError(AboutJob(s, args.job_id), err);
  return kExitOk;
}

// Runs `one` for each of the command's job IDs, in order, going on past
// a failure (reported on `err`); the first failure's exit code.
int ForEachJobId(const CliArgs& args, std::ostream& err,
                 const std::function<absl::Status(const std::string&)>& one) {
  int exit_code = kExitOk;
  const std::vector<std::string> ids =
      args.job_ids.empty() ? std::vector<std::string>{args.job_id}
                           : args.job_ids;
  for (const std::string& id : ids) {
    absl::Status s = one(id);
    if (s.ok()) continue;
    const int code = ReportError(AboutJob(s, id), err);
    if (exit_code == kExitOk) exit_code = code;
  }
  return exit_code;
}

int RunCancel(const CliArgs& args, JobClient& client, std::ostream& out,
              std::ostream& err) {
  return ForEachJobId(args, err, [&](const std::string& id) -> absl::Status {
    ASSIGN_OR_RETURN(v1::Job job, client.Cancel(id, args.reason));
    if (args.output == OutputFormat::kJson) {
      RETURN_IF_ERROR(PrintJson(out, job, true));
    } else if (IsTerminal(job.state())) {
      out << "job " << job.id() << " " << StateName(job.state()) << "\n";
    } else {
      out << "job " << job.id() << ": cancel requested (state "
          << StateName(job.state()) << ")\n";
    }
    return absl::OkStatus();
  });
}

// A running job is stopping for the suspend (PREEMPTING): it checkpoints
// first, so the line says so.
int RunSuspend(const CliArgs& args, JobClient& client, std::ostream& out,
               std::ostream& err) {
  return ForEachJobId(args, err, [&](const std::string& id) -> absl::Status {
    ASSIGN_OR_RETURN(v1::Job job, client.Suspend(id, args.reason));
    if (args.output == OutputFormat::kJson) {
      RETURN_IF_ERROR(PrintJson(out, job, true));
    } else if (job.state() == v1::SUSPENDED) {
      out << "job " << job.id() << " SUSPENDED\n";
    } else {
      out << "job " << job.id() << ": suspend requested (state "
          << StateName(job.state())
          << "); it is SUSPENDED once it has checkpointed and stopped\n";
    }
    return absl::OkStatus();
  });
}

int RunResume(const CliArgs& args, JobClient& client, std::ostream& out,
              std::ostream& err) {
  return ForEachJobId(args, err, [&](const std::string& id) -> absl::Status {
    ASSIGN_OR_RETURN(v1::Job job, client.Resume(id));
    if (args.output == OutputFormat::kJson) {
      RETURN_IF_ERROR(PrintJson(out, job, true));
    } else if (job.state() == v1::QUEUED) {
      out << "job " << job.id() << " QUEUED"
          << (job.queue_position() > 0
                  ? absl::StrCat(" (#", job.queue_position(), " in the queue)")
                  : "")
          << "\n";
    } else {
      out << "job " << job.id() << ": resumed (state " << StateName(job.state())
          << "); it is QUEUED again once it has stopped\n";
    }
    return absl::OkStatus();
  });
}

int RunSetPriority(const CliArgs& args, JobClient& client, std::ostream& out,
                   std::ostream& err) {
  return ForEachJobId(args, err, [&](const std::string& id) -> absl::Status {
    ASSIGN_OR_RETURN(v1::Job job, client.SetPriority(id, *args.priority));
    if (args.output == OutputFormat::kJson) {
      RETURN_IF_ERROR(PrintJson(out, job, true));
    } else {
      // No queue position: the next scheduling pass places it anew.
      out << "job " << job.id() << " priority " << job.spec().priority() << " ("
          << StateName(job.state()) << ")\n";
    }
    return absl::OkStatus();
  });
}

// The server refuses a job that has not ended (FAILED_PRECONDITION); delete
// does not cancel it first: deleting is for good, so stopping a job stays a
// separate, deliberate step.
int RunDelete(const CliArgs& args, JobClient& client, std::ostream& out,
              std::ostream& err) {
  return ForEachJobId(args, err, [&](const std::string& id) -> absl::Status {
    ASSIGN_OR_RETURN(v1::DeleteJobResponse response,
                     client.Delete(id, args.keep_checkpoints));
    if (args.output == OutputFormat::kJson) {
      RETURN_IF_ERROR(PrintJson(out, response, true));
      return absl::OkStatus();
    }
    if (response.job_id().empty()) response.set_job_id(id);
    out << FormatDeleted(response, args.keep_checkpoints) << "\n";
    return absl::OkStatus();
  });
}

int RunCheckpoints(const CliArgs& args, JobClient& client, std::ostream& out,
                   std::ostream& err) {
  absl::StatusOr<std::vector<v1::CheckpointInfo>> all =
      client.ListCheckpoints(args.job_id);
  if (!all.ok()) return ReportError(AboutJob(all.status(), args.job_id), err);
  if (args.output == OutputFormat::kJson) {
    v1::ListCheckpointsResponse response;
    for (const v1::CheckpointInfo& c : *all) *response.add_checkpoints() = c;
    if (absl::Status s = PrintJson(out, response, true); !s.ok()) {
      return ReportError(s, err);
    }
  } else if (all->empty()) {
    out << "job " << args.job_id << " has no checkpoint yet\n";
  } else {
    out << FormatCheckpointsTable(*all, absl::Now());
  }
  return kExitOk;
}

// Errors of the server keep their exit codes; a download that cannot be
// written here, or whose files do not check out, exits 1 and leaves
// nothing behind.
int RunDownload(const CliArgs& args, JobClient& client, std::ostream& out,
                std::ostream& err) {
  v1::DownloadCheckpointRequest request;
  request.set_job_id(args.job_id);
  request.set_step(args.step);
  request.set_best(args.best);
  CheckpointDownload download(args.job_id, args.dir);
  absl::Status local;  // the first chunk this end could not take
  absl::Status s =
      client.DownloadCheckpoint(request, [&](const v1::CheckpointChunk& chunk) {
        return local = download.Add(chunk);
      });
  if (!s.ok() && local.ok()) return ReportError(AboutJob(s, args.job_id), err);
  absl::StatusOr<DownloadedCheckpoint> done =
      s.ok() ? download.Finish() : absl::StatusOr<DownloadedCheckpoint>(s);
  if (!done.ok()) {
    ReportError(done.status(), err);
    return kExitJobNotSucceeded;
  }
  if (args.output == OutputFormat::kJson) {
    google::protobuf::Struct result;
    auto& fields = *result.mutable_fields();
    fields["job_id"].set_string_value(args.job_id);
    fields["step"].set_number_value(static_cast<double>(done->step));
    fields["dir"].set_string_value(done->dir);
    fields["bytes"].set_number_value(static_cast<double>(done->bytes));
    if (absl::Status s = PrintJson(out, result, true); !s.ok()) {
      return ReportError(s, err);
    }
  } else {
    out << "job " << args.job_id << " step " << done->step << " -> "
        << done->dir << " (" << absl::StrJoin(done->files, ", ") << "; "
        << FormatBytes(done->bytes) << ", checked against meta.json)\n";
  }
  return kExitOk;
}

int RunWorkers(const CliArgs& args, JobClient& client, std::ostream& out,
               std::ostream& err) {
  absl::StatusOr<v1::ListWorkersResponse> workers = client.ListWorkers();
  if (!workers.ok()) return ReportError(workers.status(), err);
  if (args.output == OutputFormat::kJson) {
    if (absl::Status s = PrintJson(out, *workers, true); !s.ok()) {
      return ReportError(s, err);
    }
    return kExitOk;
  }
  absl::StatusOr<v1::ClusterStatus> status = client.GetClusterStatus();
  if (!status.ok()) return ReportError(status.status(), err);
  std::vector<v1::Worker> list(workers->workers().begin(),
                               workers->workers().end());
  out << FormatWorkersTable(list, &*status, absl::Now());
  return kExitOk;
}

}  // namespace

int ReportError(const absl::Status& status, std::ostream& err) {
  std::string message = absl::StrReplaceAll(
      status.message(), {{"\r\n", " "}, {"\n", " "}, {"\r", " "}});
  if (message.empty()) message = absl::StatusCodeToString(status.code());
  err << "yard: error: " << message << std::endl;
  return ExitCodeForStatus(status);
}

int ReadSubmitPlan(const CliArgs& args, SubmitPlan* plan, std::ostream& err) {
  auto invalid = [&](const absl::Status& s) {
    ReportError(s, err);
    return kExitInvalidArgument;
  };
  absl::StatusOr<v1::JobSpec> spec = spec::ReadJobSpecFile(args.spec_path);
  if (!spec.ok()) return invalid(spec.status());
  for (const std::string& assignment : args.spec_overrides) {
    absl::Status s = spec::ApplySpecOverride(assignment, *spec);
    if (!s.ok()) {
      return invalid(
          absl::InvalidArgumentError(absl::StrCat("--set ", s.message())));
    }
  }
  *plan = SubmitPlan();
  if (args.sweeps.empty()) {
    plan->specs.push_back(*std::move(spec));
    return kExitOk;
  }
  absl::StatusOr<std::vector<SweepPoint>> points = ExpandSweep(args.sweeps);
  if (!points.ok()) return invalid(points.status());
  absl::StatusOr<std::vector<v1::JobSpec>> specs = SweepSpecs(*spec, *points);
  if (!specs.ok()) return invalid(specs.status());
  plan->specs = *std::move(specs);
  for (const SweepAxis& axis : args.sweeps) {
    plan->sweep_fields.push_back(axis.field);
  }
  for (SweepPoint& point : *points) {
    plan->sweep_values.push_back(std::move(point.values));
  }
  return kExitOk;
}

namespace {

// Whether the server's error is about the request id rather than the spec:
// the field its status details name, or, from a server that sends no
// details (older than them), the field its message starts with.
bool AboutRequestId(const absl::Status& s) {
  return IsAboutField(s, "request_id") ||
         (FieldViolations(s).empty() &&
          absl::StartsWith(s.message(), "request_id"));
}

// The server's INVALID_ARGUMENT about a submitted spec says which file it
// came from, and that --set may be to blame (a sweep's errors also name the
// sweep's job); one about the request id names --request-id.
absl::Status AboutSpec(const absl::Status& s, const CliArgs& args) {
  if (AboutRequestId(s)) {
    return absl::Status(s.code(), absl::StrCat("--request-id: ", s.message()));
  }
  if (s.code() != absl::StatusCode::kInvalidArgument) return s;
  return absl::InvalidArgumentError(absl::StrCat(
      args.spec_path,
      args.spec_overrides.empty() ? "" : " with its --set overrides", ": ",
      s.message()));
}

// A request id for a sweep submitted without one, so that its jobs can be
// found again by a rerun: "sweep-" and 16 random hex digits.
std::string NewSweepRequestId() {
  std::random_device random;
  return absl::StrFormat("sweep-%08x%08x", random(), random());
}

int RunSweep(const CliArgs& args, const SubmitPlan& sweep, JobClient& client,
             std::ostream& out, std::ostream& err) {
  const std::string base =
      args.request_id.empty() ? NewSweepRequestId() : args.request_id;
  // --max-running and --halving: the sweep's jobs make one concurrency
  // group and one halving group, named after its request id (so a rerun
  // with --request-id makes the same specs, and finds its jobs again).
  SubmitPlan plan = sweep;
  for (v1::JobSpec& spec : plan.specs) {
    if (args.max_running > 0) {
      spec.mutable_concurrency()->set_group(base);
      spec.mutable_concurrency()->set_max_running(args.max_running);
    }
    if (args.halving_min_steps > 0) {
      spec.mutable_halving()->set_group(base);
      spec.mutable_halving()->set_min_steps(args.halving_min_steps);
      spec.mutable_halving()->set_factor(args.halving_factor);
    }
  }
  const size_t n = plan.specs.size();
  // An error about job i names it, and the spec file if the server
  // refused its spec.
  auto about_job = [&](size_t i, const absl::Status& status) {
    const absl::Status s = AboutSpec(status, args);
    const std::string request_id =
        AboutRequestId(status)
            ? absl::StrCat(" (request id ", SweepRequestId(base, i),
                           ": the sweep's and the job's number)")
            : "";
    return absl::Status(s.code(), absl::StrCat("sweep job ", i + 1, " of ", n,
                                               " (", plan.specs[i].name(), ")",
                                               request_id, ": ", s.message()));
  };
  // Every job, its request id included, is checked by the server before any
  // is submitted, so a value the server refuses leaves nothing half-made.
  for (size_t i = 0; i < n; ++i) {
    absl::StatusOr<v1::SubmitJobResponse> checked = client.Submit(
        plan.specs[i], SweepRequestId(base, i), /*validate_only=*/true);
    if (!checked.ok()) return ReportError(about_job(i, checked.status()), err);
    if (args.dry_run && args.output == OutputFormat::kTable) {
      out << "would submit: " << plan.specs[i].name() << "\n";
    } else if (args.dry_run) {
      if (absl::Status s = PrintJson(out, *checked, false); !s.ok()) {
        return ReportError(s, err);
      }
    }
  }
  if (args.dry_run) {
    if (args.output == OutputFormat::kTable) {
      out << "the server accepts all " << n << " jobs; nothing was submitted\n";
    }
    return kExitOk;
  }
  if (args.request_id.empty()) {
    err << "yard: the sweep's request id is " << base
        << " (the same command with --request-id " << base
        << " finds its jobs again)\n";
  }
  std::vector<std::string> ids;
  size_t existed = 0;
  for (size_t i = 0; i < n; ++i) {
    absl::StatusOr<v1::SubmitJobResponse> response =
        client.Submit(plan.specs[i], SweepRequestId(base, i));
    if (!response.ok()) {
      const int code = ReportError(about_job(i, response.status()), err);
      err << "yard: " << i << " of the " << n << " jobs are submitted";
      // Only a failure that may pass (the server unreachable, a quota)
      // is worth the same command again; it finds the jobs made so far.
      if (code == kExitUnavailable || code == kExitExhausted ||
          code == kExitServerError) {
        err << "; run the same command with --request-id " << base
            << " to submit the rest";
      }
      err << "\n";
      return code;
    }
    existed += response->already_existed() ? 1 : 0;
    ids.push_back(response->job().id());
    if (args.output == OutputFormat::kTable) {
      out << response->job().id() << "  " << plan.specs[i].name() << std::endl;
    } else if (absl::Status s = PrintJson(out, *response, false); !s.ok()) {
      return ReportError(s, err);
    }
  }
  if (existed > 0) {
    err << "yard: " << existed << " of the " << n
        << " jobs were made by an earlier run with request id " << base << "\n";
  }
  if (!args.wait) return kExitOk;
  std::vector<v1::Job> ended;
  for (const std::string& id : ids) {
    absl::StatusOr<v1::Job> job =
        WaitForEnd(id, client, [](const v1::JobEvent&) {});
    if (!job.ok()) return ReportError(job.status(), err);
    if (args.output == OutputFormat::kJson) {
      if (absl::Status s = PrintJson(out, *job, false); !s.ok()) {
        return ReportError(s, err);
      }
    } else {
      out << FormatOutcome(*job) << std::endl;
    }
    ended.push_back(*std::move(job));
  }
  if (args.output == OutputFormat::kTable) {
    out << "\n"
        << FormatSweepResults(ended, plan.sweep_fields, plan.sweep_values);
  }
  for (const v1::Job& job : ended) {
    if (job.state() != v1::SUCCEEDED) return kExitJobNotSucceeded;
  }
  return kExitOk;
}

}  // namespace

int RunSubmit(const CliArgs& args, const SubmitPlan& plan, JobClient& client,
              std::ostream& out, std::ostream& err) {
  if (!plan.sweep_fields.empty()) {
    return RunSweep(args, plan, client, out, err);
  }
  const v1::JobSpec& spec = plan.specs.at(0);
  absl::StatusOr<v1::SubmitJobResponse> response =
      client.Submit(spec, args.request_id, args.dry_run);
  if (!response.ok())
    return ReportError(AboutSpec(response.status(), args), err);
  const v1::Job& job = response->job();
  if (args.output == OutputFormat::kJson) {
    if (absl::Status s = PrintJson(out, *response, false); !s.ok()) {
      return ReportError(s, err);
    }
  } else if (args.dry_run) {
    out << "the server accepts this job; nothing was submitted\n";
  } else {
    out << job.id() << std::endl;
    if (response->already_existed()) {
      err << "yard: request id " << args.request_id
          << " was already used; this is the job it created\n";
    }
  }
  if (!args.wait) return kExitOk;
  return Follow(job.id(), args.output, client, out, err);
}

int RunCommand(const CliArgs& args, JobClient& client, std::ostream& out,
               std::ostream& err) {
  switch (args.command) {
    case Command::kList:
      return RunList(args, client, out, err);
    case Command::kGet:
      return RunGet(args, client, out, err);
    case Command::kLogs:
      return RunLogs(args, client, out, err);
    case Command::kWatch:
      return Follow(args.job_id, args.output, client, out, err);
    case Command::kCancel:
      return RunCancel(args, client, out, err);
    case Command::kSuspend:
      return RunSuspend(args, client, out, err);
    case Command::kCheckpoints:
      return RunCheckpoints(args, client, out, err);
    case Command::kMetrics:
      return RunMetricsCommand(args, client, out, err);
    case Command::kDownload:
      return RunDownload(args, client, out, err);
    case Command::kResume:
      return RunResume(args, client, out, err);
    case Command::kSetPriority:
      return RunSetPriority(args, client, out, err);
    case Command::kDelete:
      return RunDelete(args, client, out, err);
    case Command::kWorkers:
      return RunWorkers(args, client, out, err);
    case Command::kUsage:
      return RunUsageCommand(args, client, *Clock::Real(), out, err);
    case Command::kToken:
    case Command::kTenant:
      return RunAdminCommand(args, client, out, err);
    case Command::kDrain:
    case Command::kUndrain:
    case Command::kForget:
      return RunWorkerCommand(args, client, *Clock::Real(), out, err);
    default:
      return ReportError(absl::InternalError("command not handled here"), err);
  }
}

}  // namespace trainyard::client
