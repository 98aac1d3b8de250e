// yard-train: trains one JobSpec on this machine, alone or as a child of
// yard-worker.
//
//   yard-train run SPEC_FILE [--data-root DIR] [--checkpoint-dir DIR]
//                            [--threads N] [--progress text|json]
//
// Exit codes: 0 finished (TrainFinished was the last event); 1 runtime
// error (the reason is the last line on stderr); 2 usage error or invalid
// spec; 3 stopped by SIGTERM/SIGINT after writing a checkpoint.
#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "engine/event_proto.h"
#include "engine/job_config.h"
#include "engine/train_job.h"
#include "spec/spec.h"

namespace trainyard::engine {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;
constexpr int kExitInterrupted = 3;

constexpr char kSynopsis[] =
    "usage: yard-train run SPEC_FILE [--data-root DIR] [--checkpoint-dir DIR]\n"
    "                                [--threads N] [--progress text|json]\n";

constexpr char kHelp[] =
    "\n"
    "Trains the JobSpec in SPEC_FILE (YAML or JSON) on CPU threads, resuming\n"
    "from the newest checkpoint in the checkpoint dir. SIGTERM or SIGINT\n"
    "finishes the current step, writes a checkpoint and exits with 3.\n"
    "\n"
    "  --data-root DIR       spec data paths are relative to DIR (default .)\n"
    "  --checkpoint-dir DIR  default checkpoints/<spec name>\n"
    "  --threads N           default spec.resources.cpu_threads\n"
    "  --progress text|json  json: one trainyard.v1.TrainerEvent per line\n"
    "\n"
    "Exit codes: 0 finished, 1 runtime error, 2 usage or invalid spec,\n"
    "3 interrupted after a checkpoint.\n";

std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void OnStopSignal(int) { g_stop.store(true); }

struct Args {
  std::string spec_file;
  std::string data_root = ".";
  std::string checkpoint_dir;
  int threads = 0;
  bool json = false;
};

// Parses argv; on failure returns the message for stderr.
std::string ParseArgs(const std::vector<std::string>& argv, Args* args) {
  if (argv.empty() || argv[0] != "run") {
    return argv.empty() ? "missing command (run)"
                        : absl::StrCat("unknown command '", argv[0], "'");
  }
  for (size_t i = 1; i < argv.size(); ++i) {
    std::string flag = argv[i], value;
    const bool is_flag = flag.rfind("--", 0) == 0;
    if (is_flag && flag.find('=') != std::string::npos) {
      value = flag.substr(flag.find('=') + 1);
      flag = flag.substr(0, flag.find('='));
    } else if (is_flag) {
      if (i + 1 >= argv.size()) return absl::StrCat(flag, " needs a value");
      value = argv[++i];
    }
    if (!is_flag) {
      if (!args->spec_file.empty()) {
        return absl::StrCat("unexpected argument '", flag, "'");
      }
      args->spec_file = flag;
    } else if (flag == "--data-root") {
      args->data_root = value;
    } else if (flag == "--checkpoint-dir") {
      args->checkpoint_dir = value;
    } else if (flag == "--threads") {
      if (!absl::SimpleAtoi(value, &args->threads) || args->threads < 1 ||
          args->threads > 256) {
        return absl::StrCat("--threads must be an integer in [1, 256], got '",
                            value, "'");
      }
    } else if (flag == "--progress") {
      if (value != "text" && value != "json") {
        return absl::StrCat("--progress must be text or json, got '", value,
                            "'");
      }
      args->json = value == "json";
    } else {
      return absl::StrCat("unknown flag ", flag);
    }
  }
  if (args->spec_file.empty()) return "missing SPEC_FILE";
  return "";
}

class StdoutSink : public TrainerEventSink {
 public:
  explicit StdoutSink(bool json) : json_(json) {}
  void Emit(const TrainerEvent& event) override {
    const std::string line =
        json_ ? ToJsonLine(ToProto(event)) : ToTextLine(event);
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }

 private:
  const bool json_;
};

void InstallSignalHandlers() {
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

int Fail(int code, absl::string_view message) {
  std::fflush(stdout);
  std::cerr << "yard-train: " << message << std::endl;
  return code;
}

absl::StatusOr<EngineJob> LoadJob(const Args& args) {
  absl::StatusOr<trainyard::v1::JobSpec> spec =
      spec::ReadJobSpecFile(args.spec_file);
  if (!spec.ok()) return spec.status();
  const trainyard::v1::JobSpec full = spec::WithDefaults(*spec);
  spec::ValidationOptions validation;
  validation.data_root = args.data_root;
  if (absl::Status s = spec::ValidateJobSpec(full, validation); !s.ok()) {
    return s;
  }
  JobConfigOptions options;
  options.data_root = args.data_root;
  options.checkpoint_dir = args.checkpoint_dir;
  options.threads = args.threads;
  return EngineJobFromSpec(full, options);
}

int Main(const std::vector<std::string>& argv) {
  if (!argv.empty() &&
      (argv[0] == "--help" || argv[0] == "-h" || argv[0] == "help")) {
    std::cout << kSynopsis << kHelp;
    return kExitOk;
  }
  Args args;
  if (std::string error = ParseArgs(argv, &args); !error.empty()) {
    std::cerr << kSynopsis;
    return Fail(kExitUsage, error);
  }
  // From here on a stop request is honoured: a signal during setup stops
  // the run before its first step, after a checkpoint.
  InstallSignalHandlers();
  absl::StatusOr<EngineJob> job = LoadJob(args);
  if (!job.ok()) return Fail(kExitUsage, job.status().message());
  StdoutSink sink(args.json);
  absl::StatusOr<std::unique_ptr<TrainJob>> train =
      TrainJob::Create(*job, &sink);
  if (!train.ok()) {
    const bool spec_error =
        train.status().code() == absl::StatusCode::kInvalidArgument;
    return Fail(spec_error ? kExitUsage : kExitRuntime,
                train.status().message());
  }
  YARD_LOG(INFO) << "training " << (job->name.empty() ? "run" : job->name)
                 << " with " << job->threads << " thread(s), checkpoints in "
                 << job->trainer.checkpoint.dir;
  absl::StatusOr<Trainer::Outcome> outcome = (*train)->Run(&g_stop);
  if (!outcome.ok()) return Fail(kExitRuntime, outcome.status().message());
  return *outcome == Trainer::Outcome::kInterrupted ? kExitInterrupted
                                                    : kExitOk;
}

}  // namespace
}  // namespace trainyard::engine

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return trainyard::engine::Main(args);
}
