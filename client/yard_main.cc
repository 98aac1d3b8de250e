// yard: the Trainyard command-line client.
//
//   yard [--server HOST:PORT] [--token T] [-o table|json] COMMAND [ARGS]
//
// The server address, token and TLS settings come from flags, else the
// environment, else the config file (client_config.h). Errors are one line on
// stderr ("yard: error: ..."), and the exit code says what went wrong:
//
//   0  success
//   1  the job ended but did not succeed (submit --wait, watch), or another
//      local failure
//   2  usage error (unknown command or flag, missing argument)
//   3  invalid spec or argument (the spec file cannot be read or parsed, a
//      --set override does not fit it, or the server answered
//      INVALID_ARGUMENT or ALREADY_EXISTS)
//   4  not found (unknown job id)
//   5  failed precondition (e.g. cancelling a job that already ended, or
//      deleting one that has not)
//   6  server unreachable or unavailable
//   7  any other server error
//   8  not authenticated or not allowed (token missing, wrong, revoked, or
//      of a role or tenant that may not do this)
//   9  a quota or limit was reached
#include <grpc/support/log.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "client/cli_args.h"
#include "client/client_config.h"
#include "client/commands.h"
#include "client/exit_codes.h"
#include "client/job_client.h"

namespace {

using namespace trainyard::client;  // NOLINT: a main file

int Main(const std::vector<std::string>& argv) {
  absl::StatusOr<CliArgs> args = ParseArgs(argv, std::getenv("YARD_SERVER"));
  if (!args.ok()) {
    ReportError(args.status(), std::cerr);
    return kExitUsage;
  }
  if (args->command == Command::kHelp) {
    std::cout << UsageText();
    return kExitOk;
  }
  // A spec is read before connecting: its mistakes need no server.
  SubmitPlan plan;
  if (args->command == Command::kSubmit) {
    int code = ReadSubmitPlan(*args, &plan, std::cerr);
    if (code != kExitOk) return code;
  }
  absl::StatusOr<ClientOptions> options =
      ResolveClientOptions(*args, ClientEnv::FromProcess());
  if (!options.ok()) {
    // A token that cannot be sent is a wrong token (8); the rest is usage.
    const int code = ReportError(options.status(), std::cerr);
    return code == kExitDenied ? code : kExitUsage;
  }
  absl::StatusOr<std::unique_ptr<JobClient>> client =
      JobClient::Connect(*options);
  if (!client.ok()) return ReportError(client.status(), std::cerr);
  if (args->command == Command::kSubmit) {
    return RunSubmit(*args, plan, **client, std::cout, std::cerr);
  }
  return RunCommand(*args, **client, std::cout, std::cerr);
}

}  // namespace

int main(int argc, char** argv) {
  // gRPC's own log lines (e.g. one per failed TLS handshake retry) would
  // break the one-line error; what they say reaches the error message
  // through the calls' statuses. GRPC_VERBOSITY set: left as gRPC has it.
  if (std::getenv("GRPC_VERBOSITY") == nullptr) {
    gpr_set_log_function([](gpr_log_func_args*) {});
  }
  std::vector<std::string> args(argv + 1, argv + argc);
  return Main(args);
}
