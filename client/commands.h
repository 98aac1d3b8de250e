// The `yard` commands, run against a JobClient and writing to the given
// streams, so that main() only parses, connects and exits. Each returns the
// process exit code (client/exit_codes.h) and has printed any error as one
// line "yard: error: ..." on `err`. Not thread-safe (one command at a time).
#ifndef TRAINYARD_CLIENT_COMMANDS_H_
#define TRAINYARD_CLIENT_COMMANDS_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/cli_args.h"
#include "client/exit_codes.h"
#include "client/job_client.h"
#include "common/clock.h"
#include "trainyard/v1/spec.pb.h"

namespace trainyard::client {

// Prints "yard: error: <message>" as one line (newlines in the message
// become spaces) and returns the exit code for the status.
int ReportError(const absl::Status& status, std::ostream& err);

// The error `s` about job `job_id`, naming it when the server's message
// does not; an id is named as the server quotes one: escaped, and cut to
// its first 64 bytes and "...".
absl::Status AboutJob(const absl::Status& s, const std::string& job_id);

// What `yard submit` submits: the spec file with its --set overrides, or
// with --sweep one spec per combination (client/sweep.h).
struct SubmitPlan {
  std::vector<trainyard::v1::JobSpec> specs;
  // A sweep: the swept fields, and for each spec its value of each, as
  // written. Empty for a single job.
  std::vector<std::string> sweep_fields;
  std::vector<std::vector<std::string>> sweep_values;
};

// Reads the spec file named by args.spec_path, applies args.spec_overrides
// (--set) in order and expands args.sweeps, before any server is
// contacted. Returns kExitOk, or kExitInvalidArgument having printed the
// error, which names the file, the override or the sweep.
int ReadSubmitPlan(const CliArgs& args, SubmitPlan* plan, std::ostream& err);

// Submits the plan ReadSubmitPlan made (args.dry_run: has the server check
// it and submits nothing). A sweep is checked whole first, then submitted
// job by job with request ids "<ID>-1", "<ID>-2", ... (ID: --request-id,
// else a random one), so the same command run again after a failure
// submits only the jobs still missing; --wait then follows every job and
// prints a table of their results.
int RunSubmit(const CliArgs& args, const SubmitPlan& plan, JobClient& client,
              std::ostream& out, std::ostream& err);

// Every other command (args.command != kSubmit, kHelp).
int RunCommand(const CliArgs& args, JobClient& client, std::ostream& out,
               std::ostream& err);

// `yard token ...` and `yard tenant ...` (admin_commands.cc).
int RunAdminCommand(const CliArgs& args, JobClient& client, std::ostream& out,
                    std::ostream& err);

// `yard drain ...`, `yard undrain ...` and `yard forget ...`
// (worker_commands.cc). drain --wait
// polls the worker list, pausing on `clock` between polls.
int RunWorkerCommand(const CliArgs& args, JobClient& client, Clock& clock,
                     std::ostream& out, std::ostream& err);

// `yard usage` (usage_command.cc): the window's ends are read against
// `clock` (--since 7d is 7 days before its now).
int RunUsageCommand(const CliArgs& args, JobClient& client, const Clock& clock,
                    std::ostream& out, std::ostream& err);

// `yard metrics` (metrics_command.cc): the jobs' training curves, as a
// table a job, CSV (--csv) or JSON. Every job is read before anything is
// printed, so an error (the first job that fails, named) prints no curve.
int RunMetricsCommand(const CliArgs& args, JobClient& client, std::ostream& out,
                      std::ostream& err);

}  // namespace trainyard::client

#endif  // TRAINYARD_CLIENT_COMMANDS_H_
