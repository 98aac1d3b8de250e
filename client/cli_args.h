// Command-line parsing for `yard`: a small, strict parser of our own so that
// every unknown flag, command or missing argument is a usage error with a
// message naming it. Pure functions; thread-safe.
#ifndef TRAINYARD_CLIENT_CLI_ARGS_H_
#define TRAINYARD_CLIENT_CLI_ARGS_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/sweep.h"
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
  kSuspend,
  kResume,
  kSetPriority,  // set-priority ID... --priority P
  kDelete,
  kCheckpoints,  // checkpoints ID
  kMetrics,      // metrics ID... [--csv]
  kDownload,     // download ID
  kWorkers,
  kUsage,    // usage [--since WHEN] [--until WHEN] [--tenant NAME] [--jobs]
  kToken,    // token create|ls|revoke (admin)
  kTenant,   // tenant set|ls (admin)
  kDrain,    // drain WORKER (admin)
  kUndrain,  // undrain WORKER (admin)
  kForget,   // forget WORKER (admin)
};
enum class OutputFormat { kTable, kJson };

struct CliArgs {
  std::string server = kDefaultServer;  // --server, else YARD_SERVER
  bool server_set = false;  // by --server or YARD_SERVER (beats the config)
  // Credentials and TLS (client_config.h resolves them with the
  // environment and the config file).
  std::string token;            // --token
  std::string token_file;       // --token-file
  std::string config_path;      // --config
  std::string tls_ca;           // --tls-ca
  std::string tls_server_name;  // --tls-server-name
  OutputFormat output = OutputFormat::kTable;
  Command command = Command::kHelp;
  // submit
  std::string spec_path;
  // submit --set FIELD=VALUE, in command-line order; checked and applied
  // by spec::ApplySpecOverride once the file is read.
  std::vector<std::string> spec_overrides;
  // submit --sweep FIELD=V1,V2,..., in command-line order (client/sweep.h).
  std::vector<SweepAxis> sweeps;
  // submit --sweep --max-running N: at most N of the sweep's jobs run at
  // once (their concurrency group is the sweep's request id); 0: no limit.
  int32_t max_running = 0;
  // submit --sweep --halving STEPS[:FACTOR]: the sweep's jobs make one
  // halving group (spec.halving; the sweep's request id names it) with
  // these rungs; 0: none. The factor 0 is the server's default.
  int64_t halving_min_steps = 0;
  int32_t halving_factor = 0;
  bool dry_run = false;  // submit --dry-run
  bool wait = false;  // submit --wait, drain --wait
  std::string request_id;
  // get, logs, watch, cancel, suspend, resume, delete, metrics
  std::string job_id;
  // cancel, suspend, resume, set-priority, delete and metrics take several:
  // every ID, in order (job_id is the first).
  std::vector<std::string> job_ids;
  bool follow = false;            // logs -f
  int32_t tail_lines = 0;         // logs --tail N; 0: the whole log
  std::string reason;             // cancel/suspend --reason, drain --reason
  bool keep_checkpoints = false;  // delete --keep-checkpoints
  std::optional<int32_t> priority;  // set-priority --priority P (required)
  bool csv = false;                 // metrics --csv
  // download
  int64_t step = 0;   // --step N; 0: the newest
  bool best = false;  // --best
  std::string dir;    // --dir DIR; empty: <id>-step-<step>
  // drain, undrain, forget
  std::string worker_id;
  bool keep_jobs = false;  // drain --keep-jobs
  // usage: the window's ends as written (common/time_text.h
  // ParseTimeOrAge; checked here, resolved when the command runs); empty:
  // the server's default (the last 7 days, up to now)
  std::string since;
  std::string until;
  std::string tenant;   // usage --tenant
  bool by_job = false;  // usage --jobs
  // ls
  std::vector<trainyard::v1::JobState> states;
  std::string name_contains;          // ls --name
  bool quiet = false;                 // ls -q: ids only
  int64_t limit = kDefaultListLimit;  // 0 = every job (--all)
  // token, tenant
  std::string subcommand;  // create, ls, revoke / set, ls
  std::string target;      // token create TENANT, revoke ID; tenant set NAME
  std::string role = "tenant";   // token create --role
  std::string description;       // token create --description
  bool include_revoked = false;  // token ls --all
  int32_t max_gpus = -1;         // tenant set; -1: keep the current value
  int32_t max_queued_jobs = -1;
  int32_t max_cpu_slots = -1;
  double weight = 0;  // 0: keep the current value
  // tenant set --max-priority: nullopt keeps the current cap; a value sets
  // it; kNoPriorityCap ("none") removes it.
  std::optional<int32_t> max_priority;
};

inline constexpr int32_t kNoPriorityCap = std::numeric_limits<int32_t>::min();

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
