// `yard` argument parsing. Global flags (--server, -o, --help) may appear
// anywhere; command flags only after their command. "--flag=value" and
// "--flag value" are both accepted; "--" ends the flags.
#include "client/cli_args.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/time_text.h"
#include "spec/limits.h"

namespace trainyard::client {
namespace {

namespace v1 = ::trainyard::v1;

absl::Status Usage(absl::string_view msg) {
  return absl::InvalidArgumentError(msg);
}

std::optional<Command> CommandNamed(const std::string& name) {
  if (name == "submit") return Command::kSubmit;
  if (name == "ls" || name == "list") return Command::kList;
  if (name == "get") return Command::kGet;
  if (name == "logs") return Command::kLogs;
  if (name == "watch") return Command::kWatch;
  if (name == "cancel") return Command::kCancel;
  if (name == "suspend") return Command::kSuspend;
  if (name == "resume") return Command::kResume;
  if (name == "set-priority") return Command::kSetPriority;
  if (name == "delete") return Command::kDelete;
  if (name == "checkpoints") return Command::kCheckpoints;
  if (name == "metrics") return Command::kMetrics;
  if (name == "download") return Command::kDownload;
  if (name == "workers") return Command::kWorkers;
  if (name == "usage") return Command::kUsage;
  if (name == "token" || name == "tokens") return Command::kToken;
  if (name == "tenant" || name == "tenants") return Command::kTenant;
  if (name == "drain") return Command::kDrain;
  if (name == "undrain") return Command::kUndrain;
  if (name == "forget") return Command::kForget;
  if (name == "help") return Command::kHelp;
  return std::nullopt;
}

// The commands that take one job ID or more.
bool TakesSeveralJobIds(Command c) {
  switch (c) {
    case Command::kCancel:
    case Command::kSuspend:
    case Command::kResume:
    case Command::kSetPriority:
    case Command::kDelete:
    case Command::kMetrics:
      return true;
    default:
      return false;
  }
}

class ArgParser {
 public:
  explicit ArgParser(const std::vector<std::string>& args) : args_(args) {}

  absl::StatusOr<CliArgs> Parse(const char* env_server) {
    if (env_server != nullptr && *env_server != '\0') {
      out_.server = env_server;
      out_.server_set = true;
    }
    bool flags_done = false;
    for (i_ = 0; i_ < args_.size(); ++i_) {
      const std::string& arg = args_[i_];
      if (!flags_done && arg == "--") {
        flags_done = true;
      } else if (!flags_done && arg.size() > 1 && arg[0] == '-') {
        absl::Status s = Flag(arg);
        if (!s.ok()) return s;
      } else if (!command_.has_value()) {
        command_ = CommandNamed(arg);
        if (!command_.has_value()) {
          return Usage(absl::StrCat("unknown command \"", arg,
                                    "\" (run 'yard --help')"));
        }
      } else {
        positional_.push_back(arg);
      }
    }
    if (help_) {
      out_.command = Command::kHelp;
      return out_;
    }
    if (!command_.has_value()) {
      return Usage("missing command (run 'yard --help')");
    }
    out_.command = *command_;
    absl::Status s = Positionals();
    if (!s.ok()) return s;
    if (out_.max_running > 0 && out_.sweeps.empty()) {
      return Usage(
          "--max-running: only with --sweep (one job alone: --set "
          "concurrency.group=NAME --set concurrency.max_running=N)");
    }
    if (out_.halving_min_steps > 0 && out_.sweeps.empty()) {
      return Usage(
          "--halving: only with --sweep (jobs submitted apart: --set "
          "halving.group=NAME --set halving.min_steps=N in each)");
    }
    if (out_.dry_run && out_.wait) {
      return Usage("--dry-run and --wait exclude each other");
    }
    if (out_.best && out_.step > 0) {
      return Usage("--step and --best exclude each other");
    }
    if (out_.csv && out_.output == OutputFormat::kJson) {
      return Usage("--csv and -o json exclude each other");
    }
    if (out_.command == Command::kSetPriority && !out_.priority.has_value()) {
      return Usage("'set-priority': missing --priority P");
    }
    return out_;
  }

 private:
  std::string* GlobalStringFlag(const std::string& name) {
    if (name == "--token") return &out_.token;
    if (name == "--token-file") return &out_.token_file;
    if (name == "--config") return &out_.config_path;
    if (name == "--tls-ca") return &out_.tls_ca;
    if (name == "--tls-server-name") return &out_.tls_server_name;
    return nullptr;
  }

  // The flag's value: "--name=value" or the next argument.
  absl::StatusOr<std::string> Value(
      const std::string& name, const std::optional<std::string>& inline_v) {
    if (inline_v.has_value()) return *inline_v;
    if (i_ + 1 >= args_.size()) {
      return Usage(absl::StrCat(name, ": missing value"));
    }
    return args_[++i_];
  }

  absl::Status Flag(const std::string& arg) {
    std::string name = arg;
    std::optional<std::string> inline_v;
    if (size_t eq = arg.find('='); eq != std::string::npos && arg[1] == '-') {
      name = arg.substr(0, eq);
      inline_v = arg.substr(eq + 1);
    }
    if (name == "-h" || name == "--help") {
      help_ = true;
      return absl::OkStatus();
    }
    if (name == "--server") {
      absl::StatusOr<std::string> v = Value(name, inline_v);
      if (!v.ok()) return v.status();
      if (v->empty()) return Usage("--server: must not be empty");
      out_.server = *v;
      out_.server_set = true;
      return absl::OkStatus();
    }
    if (std::string* field = GlobalStringFlag(name); field != nullptr) {
      absl::StatusOr<std::string> v = Value(name, inline_v);
      if (!v.ok()) return v.status();
      if (v->empty()) return Usage(absl::StrCat(name, ": must not be empty"));
      *field = *v;
      return absl::OkStatus();
    }
    if (name == "-o" || name == "--output") {
      absl::StatusOr<std::string> v = Value(name, inline_v);
      if (!v.ok()) return v.status();
      if (*v == "table") {
        out_.output = OutputFormat::kTable;
      } else if (*v == "json") {
        out_.output = OutputFormat::kJson;
      } else {
        return Usage(
            absl::StrCat(name, ": must be table or json, got \"", *v, "\""));
      }
      return absl::OkStatus();
    }
    return CommandFlag(name, inline_v);
  }

  absl::Status CommandFlag(const std::string& name,
                           const std::optional<std::string>& inline_v) {
    const Command c = command_.value_or(Command::kHelp);
    auto no_value = [&]() -> absl::Status {
      if (inline_v.has_value()) {
        return Usage(absl::StrCat(name, ": takes no value"));
      }
      return absl::OkStatus();
    };
    if (c == Command::kSubmit && name == "--wait") {
      out_.wait = true;
      return no_value();
    }
    if (c == Command::kSubmit && name == "--request-id") {
      absl::StatusOr<std::string> v = Value(name, inline_v);
      if (!v.ok()) return v.status();
      if (v->empty()) return Usage("--request-id: must not be empty");
      out_.request_id = *v;
      return absl::OkStatus();
    }
    if (c == Command::kSubmit && name == "--dry-run") {
      out_.dry_run = true;
      return no_value();
    }
    if (c == Command::kSubmit && name == "--sweep") {
      absl::StatusOr<std::string> v = Value(name, inline_v);
      if (!v.ok()) return v.status();
      absl::StatusOr<SweepAxis> axis = ParseSweepAxis(*v);
      if (!axis.ok()) return axis.status();
      out_.sweeps.push_back(*std::move(axis));
      return absl::OkStatus();
    }
    if (c == Command::kSubmit && name == "--max-running") {
      absl::StatusOr<std::string> v = Value(name, inline_v);
      if (!v.ok()) return v.status();
      if (!absl::SimpleAtoi(*v, &out_.max_running) || out_.max_running < 1) {
        return Usage(absl::StrCat(
            "--max-running: must be a positive number of jobs, got \"", *v,
            "\""));
      }
      return absl::OkStatus();
    }
    if (c == Command::kSubmit && name == "--halving") {
      absl::StatusOr<std::string> v = Value(name, inline_v);
      if (!v.ok()) return v.status();
      const size_t colon = v->find(':');
      const bool with_factor = colon != std::string::npos;
      if (!absl::SimpleAtoi(v->substr(0, colon), &out_.halving_min_steps) ||
          out_.halving_min_steps < 1 ||
          (with_factor &&
           (!absl::SimpleAtoi(v->substr(colon + 1), &out_.halving_factor) ||
            out_.halving_factor < 1))) {
        return Usage(absl::StrCat(
            "--halving: expected STEPS or STEPS:FACTOR (positive numbers, "
            "e.g. 100:3), got \"",
            *v, "\""));
      }
      return absl::OkStatus();
    }
    if (c == Command::kSubmit && name == "--set") {
      // FIELD=VALUE is checked against the spec later: a bad one is an
      // invalid spec (exit 3), not a usage error.
      absl::StatusOr<std::string> v = Value(name, inline_v);
      if (!v.ok()) return v.status();
      out_.spec_overrides.push_back(*v);
      return absl::OkStatus();
    }
    if (c == Command::kDownload && name == "--step") {
      absl::StatusOr<std::string> v = Value(name, inline_v);
      if (!v.ok()) return v.status();
      int64_t n = 0;
      if (!absl::SimpleAtoi(*v, &n) || n < 1) {
        return Usage(absl::StrCat(
            "--step: must be a positive step number, got \"", *v, "\""));
      }
      out_.step = n;
      return absl::OkStatus();
    }
    if (c == Command::kDownload && name == "--best") {
      out_.best = true;
      return no_value();
    }
    if (c == Command::kDownload && name == "--dir") {
      absl::StatusOr<std::string> v = Value(name, inline_v);
      if (!v.ok()) return v.status();
      if (v->empty()) return Usage("--dir: must not be empty");
      out_.dir = *v;
      return absl::OkStatus();
    }
    if (c == Command::kMetrics && name == "--csv") {
      out_.csv = true;
      return no_value();
    }
    if (c == Command::kLogs && (name == "-f" || name == "--follow")) {
      out_.follow = true;
      return no_value();
    }
    if (c == Command::kLogs && name == "--tail") {
      absl::StatusOr<std::string> v = Value(name, inline_v);
      if (!v.ok()) return v.status();
      int32_t n = 0;
      if (!absl::SimpleAtoi(*v, &n) || n < 1) {
        return Usage(absl::StrCat(
            "--tail: must be a number of lines from 1 to ",
            std::numeric_limits<int32_t>::max(), ", got \"", *v, "\""));
      }
      out_.tail_lines = n;
      return absl::OkStatus();
    }
    if ((c == Command::kCancel || c == Command::kSuspend) &&
        name == "--reason") {
      absl::StatusOr<std::string> v = Value(name, inline_v);
      if (!v.ok()) return v.status();
      out_.reason = *v;
      return absl::OkStatus();
    }
    if (c == Command::kSetPriority && name == "--priority") {
      absl::StatusOr<std::string> v = Value(name, inline_v);
      if (!v.ok()) return v.status();
      int32_t p = 0;
      if (!absl::SimpleAtoi(*v, &p) || p < -spec::kMaxPriority ||
          p > spec::kMaxPriority) {
        return Usage(absl::StrCat("--priority: must be an integer from ",
                                  -spec::kMaxPriority, " to ",
                                  spec::kMaxPriority, ", got \"", *v, "\""));
      }
      out_.priority = p;
      return absl::OkStatus();
    }
    if (c == Command::kDelete && name == "--keep-checkpoints") {
      out_.keep_checkpoints = true;
      return no_value();
    }
    if (c == Command::kUsage) return UsageFlag(name, inline_v);
    if (c == Command::kDrain) return DrainFlag(name, inline_v);
    if (c == Command::kList) return ListFlag(name, inline_v);
    if (c == Command::kToken) return TokenFlag(name, inline_v);
    if (c == Command::kTenant) return TenantFlag(name, inline_v);
    return UnknownFlag(name);
  }

  absl::Status UsageFlag(const std::string& name,
                         const std::optional<std::string>& inline_v) {
    if (name == "--jobs") {
      out_.by_job = true;
      return inline_v.has_value() ? Usage("--jobs: takes no value")
                                  : absl::OkStatus();
    }
    std::string* field = name == "--since"    ? &out_.since
                         : name == "--until"  ? &out_.until
                         : name == "--tenant" ? &out_.tenant
                                              : nullptr;
    if (field == nullptr) return UnknownFlag(name);
    absl::StatusOr<std::string> v = Value(name, inline_v);
    if (!v.ok()) return v.status();
    if (v->empty()) return Usage(absl::StrCat(name, ": must not be empty"));
    if (field != &out_.tenant) {
      // The forms are checked now; the command reads the time against its
      // own clock when it runs.
      absl::StatusOr<absl::Time> t = ParseTimeOrAge(*v, absl::Now());
      if (!t.ok()) return Usage(absl::StrCat(name, ": ", t.status().message()));
    }
    *field = *v;
    return absl::OkStatus();
  }

  absl::Status DrainFlag(const std::string& name,
                         const std::optional<std::string>& inline_v) {
    if (name == "--reason") {
      absl::StatusOr<std::string> v = Value(name, inline_v);
      if (!v.ok()) return v.status();
      out_.reason = *v;
      return absl::OkStatus();
    }
    bool* field = name == "--wait"        ? &out_.wait
                  : name == "--keep-jobs" ? &out_.keep_jobs
                                          : nullptr;
    if (field == nullptr) return UnknownFlag(name);
    if (inline_v.has_value()) {
      return Usage(absl::StrCat(name, ": takes no value"));
    }
    *field = true;
    return absl::OkStatus();
  }

  absl::Status TokenFlag(const std::string& name,
                         const std::optional<std::string>& inline_v) {
    if (name == "--all") {
      if (inline_v.has_value()) return Usage("--all: takes no value");
      out_.include_revoked = true;
      return absl::OkStatus();
    }
    std::string* field = name == "--role"          ? &out_.role
                         : name == "--description" ? &out_.description
                                                   : nullptr;
    if (field == nullptr) return UnknownFlag(name);
    absl::StatusOr<std::string> v = Value(name, inline_v);
    if (!v.ok()) return v.status();
    *field = *v;
    return absl::OkStatus();
  }

  absl::Status TenantFlag(const std::string& name,
                          const std::optional<std::string>& inline_v) {
    if (name == "--weight") {
      absl::StatusOr<std::string> v = Value(name, inline_v);
      if (!v.ok()) return v.status();
      if (!absl::SimpleAtod(*v, &out_.weight) || !(out_.weight > 0)) {
        return Usage(
            absl::StrCat("--weight: must be a number > 0, got \"", *v, "\""));
      }
      return absl::OkStatus();
    }
    if (name == "--max-priority") {
      absl::StatusOr<std::string> v = Value(name, inline_v);
      if (!v.ok()) return v.status();
      int32_t cap = 0;
      if (*v == "none") {
        out_.max_priority = kNoPriorityCap;
      } else if (absl::SimpleAtoi(*v, &cap) && cap >= -spec::kMaxPriority &&
                 cap <= spec::kMaxPriority) {
        out_.max_priority = cap;
      } else {
        return Usage(absl::StrCat(
            "--max-priority: must be an integer from ", -spec::kMaxPriority,
            " to ", spec::kMaxPriority, ", or none, got \"", *v, "\""));
      }
      return absl::OkStatus();
    }
    int32_t* field = name == "--max-gpus"          ? &out_.max_gpus
                     : name == "--max-queued-jobs" ? &out_.max_queued_jobs
                     : name == "--max-cpu-slots"   ? &out_.max_cpu_slots
                                                   : nullptr;
    if (field == nullptr) return UnknownFlag(name);
    absl::StatusOr<std::string> v = Value(name, inline_v);
    if (!v.ok()) return v.status();
    if (!absl::SimpleAtoi(*v, field) || *field < 0) {
      return Usage(absl::StrCat(name,
                                ": must be an integer >= 0 "
                                "(0 = unlimited), got \"",
                                *v, "\""));
    }
    return absl::OkStatus();
  }

  absl::Status ListFlag(const std::string& name,
                        const std::optional<std::string>& inline_v) {
    if (name == "--all") {
      if (inline_v.has_value()) return Usage("--all: takes no value");
      all_ = true;
      out_.limit = 0;
    } else if (name == "--state") {
      absl::StatusOr<std::string> v = Value(name, inline_v);
      if (!v.ok()) return v.status();
      absl::StatusOr<std::vector<v1::JobState>> states = ParseStates(*v);
      if (!states.ok()) return states.status();
      out_.states.insert(out_.states.end(), states->begin(), states->end());
    } else if (name == "-q" || name == "--quiet") {
      if (inline_v.has_value())
        return Usage(absl::StrCat(name, ": takes no value"));
      out_.quiet = true;
    } else if (name == "--name") {
      absl::StatusOr<std::string> v = Value(name, inline_v);
      if (!v.ok()) return v.status();
      if (v->empty()) return Usage("--name: must not be empty");
      out_.name_contains = *v;
    } else if (name == "--limit") {
      absl::StatusOr<std::string> v = Value(name, inline_v);
      if (!v.ok()) return v.status();
      int64_t n = 0;
      if (!absl::SimpleAtoi(*v, &n) || n < 1) {
        return Usage(absl::StrCat("--limit: must be a positive integer, got \"",
                                  *v, "\""));
      }
      limit_set_ = true;
      out_.limit = n;
    } else {
      return UnknownFlag(name);
    }
    if (all_ && limit_set_)
      return Usage("--all and --limit exclude each other");
    return absl::OkStatus();
  }

  absl::Status UnknownFlag(const std::string& name) const {
    if (!command_.has_value()) {
      return Usage(absl::StrCat("unknown flag \"", name,
                                "\" (command flags go after the command)"));
    }
    return Usage(
        absl::StrCat("unknown flag \"", name, "\" for ", CommandWord()));
  }

  std::string CommandWord() const {
    for (const std::string& a : args_) {
      if (CommandNamed(a) == command_) return "'" + a + "'";
    }
    return "this command";
  }

  // token create TENANT | ls | revoke ID; tenant set NAME | ls.
  absl::Status AdminPositionals() {
    if (positional_.empty()) {
      return Usage(absl::StrCat(CommandWord(), ": missing subcommand (",
                                out_.command == Command::kToken
                                    ? "create, ls or revoke"
                                    : "set or ls",
                                ")"));
    }
    out_.subcommand = positional_[0];
    const bool token = out_.command == Command::kToken;
    const char* what = nullptr;
    if (token && out_.subcommand == "create") {
      what = "TENANT";
    } else if (token && out_.subcommand == "revoke") {
      what = "token ID";
    } else if (!token && out_.subcommand == "set") {
      what = "tenant NAME";
    } else if (out_.subcommand != "ls" && out_.subcommand != "list") {
      return Usage(absl::StrCat(CommandWord(), ": unknown subcommand \"",
                                out_.subcommand, "\""));
    }
    const size_t want = what != nullptr ? 2 : 1;
    if (positional_.size() > want) {
      return Usage(
          absl::StrCat("unexpected argument \"", positional_[want], "\""));
    }
    if (want == 2 && (positional_.size() < 2 || positional_[1].empty())) {
      return Usage(absl::StrCat(CommandWord(), " ", out_.subcommand,
                                ": missing ", what));
    }
    if (want == 2) out_.target = positional_[1];
    return absl::OkStatus();
  }

  absl::Status Positionals() {
    if (out_.command == Command::kToken || out_.command == Command::kTenant) {
      return AdminPositionals();
    }
    const char* what = nullptr;
    std::string* target = nullptr;
    switch (out_.command) {
      case Command::kSubmit:
        what = "SPEC file";
        target = &out_.spec_path;
        break;
      case Command::kGet:
      case Command::kLogs:
      case Command::kWatch:
      case Command::kCancel:
      case Command::kSuspend:
      case Command::kResume:
      case Command::kSetPriority:
      case Command::kDelete:
      case Command::kCheckpoints:
      case Command::kMetrics:
      case Command::kDownload:
        what = "job ID";
        target = &out_.job_id;
        break;
      case Command::kDrain:
      case Command::kUndrain:
      case Command::kForget:
        what = "worker ID";
        target = &out_.worker_id;
        break;
      default:
        break;
    }
    size_t want = target != nullptr ? 1 : 0;
    const bool many = TakesSeveralJobIds(out_.command);
    if (many) {
      want = std::max<size_t>(1, positional_.size());
      for (const std::string& id : positional_) {
        if (id.empty()) {
          return Usage(absl::StrCat(CommandWord(), ": empty ", what));
        }
      }
      out_.job_ids = positional_;
    }
    if (positional_.size() > want) {
      return Usage(
          absl::StrCat("unexpected argument \"", positional_[want], "\""));
    }
    if (positional_.size() < want) {
      return Usage(absl::StrCat(CommandWord(), ": missing ", what));
    }
    if (target != nullptr) {
      if (positional_[0].empty()) {
        return Usage(absl::StrCat(CommandWord(), ": empty ", what));
      }
      *target = positional_[0];
    }
    return absl::OkStatus();
  }

  const std::vector<std::string>& args_;
  size_t i_ = 0;
  std::optional<Command> command_;
  std::vector<std::string> positional_;
  bool help_ = false;
  bool all_ = false;
  bool limit_set_ = false;
  CliArgs out_;
};

}  // namespace

absl::StatusOr<CliArgs> ParseArgs(const std::vector<std::string>& args,
                                  const char* env_server) {
  return ArgParser(args).Parse(env_server);
}

absl::StatusOr<std::vector<v1::JobState>> ParseStates(const std::string& list) {
  std::vector<v1::JobState> states;
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    std::string name = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(part));
    v1::JobState state;
    if (name == "JOB_STATE_UNSPECIFIED" || !v1::JobState_Parse(name, &state)) {
      return Usage(absl::StrCat(
          "--state: unknown state \"", part,
          "\" (queued, scheduled, running, succeeded, failed, cancelled, "
          "preempting, suspended)"));
    }
    states.push_back(state);
  }
  return states;
}

std::string UsageText() {
  return R"(usage: yard [--server HOST:PORT] [-o table|json] COMMAND [ARGS]

Commands:
  submit SPEC [--set FIELD=VALUE]... [--sweep FIELD=V1,V2,...]...
         [--max-running N] [--halving STEPS[:FACTOR]] [--wait] [--dry-run]
         [--request-id ID]
                     submit a job spec (YAML or JSON) and print its id;
                     --set overrides a field of the spec, in order (e.g.
                     --set optimizer.lr=0.003 --set model.mlp.hidden=512,256);
                     --sweep submits one job per combination of the values
                     (at most 100; a list value in brackets:
                     --sweep model.mlp.hidden=[256],[512,256]), each named
                     after its values, at most N of them running at once
                     with --max-running; --halving stops the sweep's less
                     promising jobs early (successive halving: at steps
                     STEPS, STEPS*FACTOR, ..., a job whose eval loss is not
                     among the best 1/FACTOR there, default 3, stops);
                     --wait follows it to the end (exit 0 only if
                     SUCCEEDED; a sweep: all of them, then a table of
                     results); --dry-run has the server check the job(s)
                     and submits nothing
  ls [--state S[,S]] [--name TEXT] [--limit N | --all] [-q]
                     list jobs, oldest first (at most 100 unless --limit/--all);
                     --name: only those whose name contains TEXT; -q: only
                     their ids, one a line (yard cancel $(yard ls -q ...))
  get ID             show one job
  logs ID [-f] [--tail N]
                     print the job's log (--tail: its last N lines); -f
                     follows it until the job ends
  watch ID           follow the job's state changes and progress live
  cancel ID... [--reason TEXT]
                     cancel jobs
  suspend ID... [--reason TEXT]
                     park jobs: a running one checkpoints and stops, and
                     none is scheduled again until resumed
  resume ID...       queue suspended jobs again; they go on from their
                     latest checkpoint
  set-priority ID... --priority P
                     change jobs' priority (-1000..1000, at most the
                     tenant's max priority) while they have not ended: the
                     next scheduling pass queues, and preempts, by it
  delete ID... [--keep-checkpoints]
                     delete ended jobs for good: their records, events, logs
                     and (unless --keep-checkpoints) their checkpoints
  checkpoints ID     list the job's checkpoints (newest first)
  metrics ID... [--csv]
                     the jobs' training curves: loss, learning rate, grad
                     norm, throughput and evaluations by step over the
                     whole run (long runs thinned evenly by the server);
                     --csv: one row a step (and job), for plotting
  download ID [--step N | --best] [--dir DIR]
                     copy one of the job's checkpoints (default: the newest)
                     from the server into DIR (default: ID-step-STEP), each
                     file checked; yard-train sample/export read it
  workers            list workers and cluster capacity
  usage [--since WHEN] [--until WHEN] [--tenant NAME] [--jobs]
                     GPU- and CPU-slot-hours jobs held, by tenant (default:
                     the last 7 days; WHEN: an age such as 7d or 36h, a
                     date 2026-11-01 (UTC), an RFC 3339 time, or now);
                     --jobs: also by job, the most GPU time first

Admin commands (admin token):
  token create TENANT [--role tenant|admin|worker] [--description TEXT]
                     make a token and print its secret (shown only once)
  token ls [--all]   list tokens (--all: with revoked ones)
  token revoke ID    revoke a token at once
  tenant set NAME [--max-gpus N] [--max-queued-jobs N] [--max-cpu-slots N]
                  [--weight W] [--max-priority P|none]
                     set a tenant's quotas (0 = unlimited), fair-share
                     weight and highest job priority; unset ones keep
                     their value
  tenant ls          list tenants with quotas
  drain WORKER [--reason TEXT] [--keep-jobs] [--wait]
                     stop placing jobs on a worker; its jobs checkpoint and
                     resume elsewhere (--keep-jobs: let them finish there);
                     --wait: until none of its jobs is left on it
  undrain WORKER     let a drained worker take jobs again
  forget WORKER      remove a lost worker (a node gone for good) from the
                     worker list and the lost count

Global flags:
  --server HOST:PORT yard-server address (default: $YARD_SERVER, else the
                     config file, else 127.0.0.1:7070)
  --token TOKEN      bearer token (default: $YARD_TOKEN, else the config
                     file's token or token_file)
  --token-file FILE  read the token from FILE
  --config FILE      config file (default: $YARD_CONFIG, else
                     ~/.config/trainyard/config): lines "key = value" with
                     keys server, token, token_file, tls_ca, tls_server_name
  --tls-ca FILE      speak TLS, trusting the server certificate signed by
                     this CA (default: $YARD_TLS_CA, else the config file)
  --tls-server-name NAME
                     name to check in the server certificate
  -o, --output FMT   table (default) or json (protobuf JSON, snake_case names,
                     every field printed, zeros and empty lists included)
  -h, --help         show this help

Exit codes:
  0 success            1 job did not succeed (submit --wait, watch) or other
  2 usage error        3 invalid spec or argument
  4 job or worker not found
  5 failed precondition (e.g. cancel of a job that already ended, delete
    of one that has not, resume of one that is not suspended,
    set-priority of one that ended, forget of a worker that is not lost)
  6 server unreachable 7 other server error
  8 not authenticated or not allowed (missing, wrong or revoked token;
    an admin command or another tenant's usage with a tenant token;
    another tenant's job is "not found", 4)
  9 quota or limit reached (RESOURCE_EXHAUSTED)
  cancel, suspend, resume, set-priority and delete of several IDs go on
  past a failed one and exit with the first failure's code.
)";
}

}  // namespace trainyard::client
