// `yard drain` and `yard undrain`: an administrator takes a worker out of
// service for maintenance and puts it back; `yard forget` removes a lost
// worker gone for good. drain --wait then polls the
// worker list until none of the worker's jobs is left on it; it has no
// timeout of its own (Ctrl-C ends it, as it ends `watch`). With -o json,
// stdout carries only the Worker the server answered, and the wait's lines
// go to stderr.
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "client/output_format.h"

namespace trainyard::client {
namespace {

namespace v1 = ::trainyard::v1;

// How often drain --wait asks for the worker list.
constexpr absl::Duration kDrainPollInterval = absl::Milliseconds(250);

// "Not found" and "not drained" name the worker, whatever the server's
// wording; other errors (a tenant token, a bad reason) are not about it.
absl::Status AboutWorker(const absl::Status& s, const std::string& id) {
  const bool about_it = s.code() == absl::StatusCode::kNotFound ||
                        s.code() == absl::StatusCode::kFailedPrecondition;
  if (!about_it || absl::StrContains(s.message(), id)) return s;
  return absl::Status(s.code(), absl::StrCat("worker ", id, ": ", s.message()));
}

// "1 job", "2 jobs".
std::string Jobs(int n) { return absl::StrCat(n, n == 1 ? " job" : " jobs"); }

// "worker w1 draining: 2 jobs are being preempted and will resume
// elsewhere".
std::string DrainLine(const v1::Worker& w, bool keep_jobs) {
  std::string line = absl::StrCat("worker ", w.id(), " draining: ");
  const int n = w.jobs_size();
  if (n == 0) return line + "no jobs on it";
  if (keep_jobs) {
    return absl::StrCat(line, Jobs(n), n == 1 ? " keeps" : " keep",
                        " running there until ",
                        n == 1 ? "it ends" : "they end");
  }
  return absl::StrCat(line, Jobs(n), n == 1 ? " is" : " are",
                      " being preempted and will resume elsewhere");
}

// The worker `id` in a list, or null.
const v1::Worker* Find(const v1::ListWorkersResponse& list,
                       const std::string& id) {
  for (const v1::Worker& w : list.workers()) {
    if (w.id() == id) return &w;
  }
  return nullptr;
}

// Polls until worker `id`, which had `jobs` jobs, has none left. A worker
// that leaves the list, or takes jobs again (someone undrained it), ends the
// wait with an error: its jobs might never leave it.
int WaitUntilDrained(const std::string& id, int jobs, JobClient& client,
                     Clock& clock, std::ostream& out, std::ostream& err) {
  while (jobs > 0) {
    clock.SleepUntil(clock.Now() + kDrainPollInterval);
    absl::StatusOr<v1::ListWorkersResponse> list = client.ListWorkers();
    if (!list.ok()) return ReportError(list.status(), err);
    const v1::Worker* w = Find(*list, id);
    if (w == nullptr) {
      return ReportError(
          absl::NotFoundError(absl::StrCat(
              "worker ", id, " is no longer known to the server; it still had ",
              Jobs(jobs))),
          err);
    }
    if (w->state() == v1::WORKER_READY) {
      return ReportError(
          absl::FailedPreconditionError(
              absl::StrCat("worker ", id,
                           " takes jobs again (undrained while waiting) with ",
                           Jobs(jobs), " on it")),
          err);
    }
    if (w->jobs_size() != jobs) {
      jobs = w->jobs_size();
      if (jobs > 0) {
        out << "worker " << id << ": " << Jobs(jobs) << " left" << std::endl;
      }
    }
  }
  out << "worker " << id << " drained: no jobs left" << std::endl;
  return kExitOk;
}

int RunDrain(const CliArgs& args, JobClient& client, Clock& clock,
             std::ostream& out, std::ostream& err) {
  absl::StatusOr<v1::Worker> w =
      client.DrainWorker(args.worker_id, args.reason, args.keep_jobs);
  if (!w.ok()) return ReportError(AboutWorker(w.status(), args.worker_id), err);
  const bool json = args.output == OutputFormat::kJson;
  const bool keep_jobs =
      w->has_drain() ? w->drain().keep_jobs() : args.keep_jobs;
  if (json) {
    if (absl::Status s = PrintJson(out, *w, true); !s.ok()) {
      return ReportError(s, err);
    }
  } else {
    out << DrainLine(*w, keep_jobs) << std::endl;
  }
  if (!args.wait) return kExitOk;
  return WaitUntilDrained(args.worker_id, w->jobs_size(), client, clock,
                          json ? err : out, err);
}

int RunUndrain(const CliArgs& args, JobClient& client, std::ostream& out,
               std::ostream& err) {
  absl::StatusOr<v1::Worker> w = client.UndrainWorker(args.worker_id);
  if (!w.ok()) return ReportError(AboutWorker(w.status(), args.worker_id), err);
  if (args.output == OutputFormat::kJson) {
    if (absl::Status s = PrintJson(out, *w, true); !s.ok()) {
      return ReportError(s, err);
    }
  } else if (w->state() == v1::WORKER_READY) {
    out << "worker " << w->id() << " ready: takes jobs again\n";
  } else if (w->state() == v1::WORKER_DRAINING) {
    out << "worker " << w->id()
        << " undrained; state DRAINING: the worker is shutting down\n";
  } else {
    out << "worker " << w->id() << " undrained; state "
        << WorkerStateName(w->state()) << ": takes jobs once it is ready\n";
  }
  return kExitOk;
}

int RunForget(const CliArgs& args, JobClient& client, std::ostream& out,
              std::ostream& err) {
  absl::Status s = client.ForgetWorker(args.worker_id);
  if (!s.ok()) return ReportError(AboutWorker(s, args.worker_id), err);
  if (args.output == OutputFormat::kJson) {
    out << "{}\n";
  } else {
    out << "worker " << args.worker_id << " forgotten\n";
  }
  return kExitOk;
}

}  // namespace

int RunWorkerCommand(const CliArgs& args, JobClient& client, Clock& clock,
                     std::ostream& out, std::ostream& err) {
  switch (args.command) {
    case Command::kDrain:
      return RunDrain(args, client, clock, out, err);
    case Command::kUndrain:
      return RunUndrain(args, client, out, err);
    case Command::kForget:
      return RunForget(args, client, out, err);
    default:
      return ReportError(absl::InternalError("worker command not handled"),
                         err);
  }
}

}  // namespace trainyard::client
