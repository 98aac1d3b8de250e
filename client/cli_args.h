// Command-line parsing for `yard`: a small, strict parser of our own so that
// every unknown flag, command or missing argument is a usage error with a
// message naming it. Pure functions; thread-safe.
#ifndef TRAINYARD_CLIENT_CLI_ARGS_H_
#define TRAINYARD_CLIENT_CLI_ARGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainyard/v1/jobs.pb.h"

namespace trainyard::client {

inline constexpr char kDefaultServer[] = "127.0.0.1:7070";
inline constexpr int64_t kDefaultListLimit = 100;

enum class Command {
  kHelp,
  kSubmit,
  kList,
  kGet,
  kLogs,
  kWatch,
  kCancel,
  kWorkers
};
enum class OutputFormat { kTable, kJson };

struct CliArgs {
  std::string server = kDefaultServer;  // --server, else YARD_SERVER
  OutputFormat output = OutputFormat::kTable;
  Command command = Command::kHelp;
  // submit
  std::string spec_path;
  bool wait = false;
  std::string request_id;
  // get, logs, watch, cancel
  std::string job_id;
  bool follow = false;  // logs -f
  std::string reason;   // cancel --reason
  // ls
  std::vector<trainyard::v1::JobState> states;
  int64_t limit = kDefaultListLimit;  // 0 = every job (--all)
};

// Parses argv[1..] (without the program name). `env_server` is the value of
// YARD_SERVER or null. Errors are INVALID_ARGUMENT with a one-line message
// such as "unknown command \"frobnicate\"".
absl::StatusOr<CliArgs> ParseArgs(const std::vector<std::string>& args,
                                  const char* env_server);

// Parses "running,QUEUED" into states; INVALID_ARGUMENT names a bad one.
absl::StatusOr<std::vector<trainyard::v1::JobState>> ParseStates(
    const std::string& list);

// The text printed by `yard --help`.
std::string UsageText();

}  // namespace trainyard::client

#endif  // TRAINYARD_CLIENT_CLI_ARGS_H_
