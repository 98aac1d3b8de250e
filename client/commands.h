// The `yard` commands, run against a JobClient and writing to the given
// streams, so that main() only parses, connects and exits. Each returns the
// process exit code (client/exit_codes.h) and has printed any error as one
// line "yard: error: ..." on `err`. Not thread-safe (one command at a time).
#ifndef TRAINYARD_CLIENT_COMMANDS_H_
#define TRAINYARD_CLIENT_COMMANDS_H_

#include <ostream>
#include <string>

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

// Reads the spec file named by args.spec_path into *spec and applies
// args.spec_overrides (--set) in order, before any server is contacted.
// Returns kExitOk, or kExitInvalidArgument having printed the error, which
// names the file or the override.
int ReadSubmitSpec(const CliArgs& args, trainyard::v1::JobSpec* spec,
                   std::ostream& err);

// `spec` is the spec ReadSubmitSpec made of args.spec_path.
int RunSubmit(const CliArgs& args, const trainyard::v1::JobSpec& spec,
              JobClient& client, std::ostream& out, std::ostream& err);

// Every other command (args.command != kSubmit, kHelp).
int RunCommand(const CliArgs& args, JobClient& client, std::ostream& out,
               std::ostream& err);

// `yard token ...` and `yard tenant ...` (admin_commands.cc).
int RunAdminCommand(const CliArgs& args, JobClient& client, std::ostream& out,
                    std::ostream& err);

// `yard drain ...` and `yard undrain ...` (worker_commands.cc). drain --wait
// polls the worker list, pausing on `clock` between polls.
int RunWorkerCommand(const CliArgs& args, JobClient& client, Clock& clock,
                     std::ostream& out, std::ostream& err);

}  // namespace trainyard::client

#endif  // TRAINYARD_CLIENT_COMMANDS_H_
