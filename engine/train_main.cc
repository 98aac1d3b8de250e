// yard-train: trains one JobSpec on this machine, alone or as a child of
// yard-worker, and works with the GPTs it trained.
//
//   yard-train run SPEC_FILE [--data-root DIR] [--checkpoint-dir DIR]
//                            [--threads N] [--progress text|json]
//                            [--rank R --world-size N --rendezvous FILE
//                             [--rendezvous-host ADDR] [--ranks-on-host N]]
//                            [--device D]
//                            [--allreduce-bucket-mb MB] [--dry-run]
//   yard-train sample CHECKPOINT_DIR [--tokens N] [--temperature T]
//                     [--top-k K] [--seed S] [--prompt TEXT] [--threads N]
//   yard-train export CHECKPOINT_DIR OUT_DIR
//
// Exit codes: 0 finished (TrainFinished was the last event); 1 runtime
// error (the reason is the last line on stderr); 2 usage error or invalid
// spec (one line on stderr; also a checkpoint dir whose newest checkpoint
// was written for another spec), for sample and export also a CHECKPOINT_DIR
// without a GPT checkpoint and an OUT_DIR that is taken; 3 stopped by
// SIGTERM/SIGINT after writing a checkpoint; 4 stopped because the
// worker's lease ran out untold (--lease-fd); 5 refused at start for want
// of memory here (the host's available memory for a CPU job, the GPU's
// grant or free memory for a GPU job): another machine may have it.
#include <fcntl.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"
#include "common/log.h"
#include "engine/core/gpt_sampler.h"
#include "engine/core/short_of_memory.h"
#include "engine/dist/socket_collective.h"
#include "engine/event_proto.h"
#include "engine/gpt_tools.h"
#include "engine/job_config.h"
#include "engine/lease_watch.h"
#include "engine/train_job.h"
#include "spec/spec.h"
#include "spec/spec_override.h"

namespace trainyard::engine {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;
constexpr int kExitInterrupted = 3;
constexpr int kExitLeaseLost = 4;
constexpr int kExitShortOfMemory = 5;

// The exit code of a job that failed before training: 2 for what the spec
// (or its files) got wrong, 5 for memory this machine lacks
// (short_of_memory.h), else 1.
int StartFailureExit(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kInvalidArgument) return kExitUsage;
  if (IsShortOfMemory(status)) return kExitShortOfMemory;
  return kExitRuntime;
}

constexpr char kSynopsis[] =
    "usage: yard-train run SPEC_FILE [--set FIELD=VALUE]...\n"
    "                                [--data-root DIR] [--checkpoint-dir DIR]\n"
    "                                [--warm-start CHECKPOINT_DIR]\n"
    "                                [--threads N] [--progress text|json]\n"
    "                                [--rank R --world-size N --rendezvous "
    "FILE\n"
    "                                 [--rendezvous-host ADDR]\n"
    "                                 [--ranks-on-host N]] [--device D]\n"
    "                                [--allreduce-bucket-mb MB] [--lease-fd "
    "FD]\n"
    "                                [--dry-run]\n"
    "       yard-train sample CHECKPOINT_DIR [--tokens N] [--temperature T]\n"
    "                         [--top-k K] [--seed S] [--prompt TEXT]\n"
    "                         [--threads N]\n"
    "       yard-train export CHECKPOINT_DIR OUT_DIR\n";

constexpr char kHelp[] =
    "\n"
    "Trains the JobSpec in SPEC_FILE (YAML or JSON) on CPU threads, or on a\n"
    "GPU where resources.gpus is set, resuming from the newest checkpoint in\n"
    "the checkpoint dir. SIGTERM or SIGINT finishes the current step,\n"
    "writes a checkpoint and exits with 3; a second one ends it at once,\n"
    "without a checkpoint.\n"
    "\n"
    "  --set FIELD=VALUE     override a field of the spec, in order, as\n"
    "                        yard submit --set does (--set steps=200\n"
    "                        --set model.mlp.hidden=[512,256])\n"
    "  --data-root DIR       spec data paths are relative to DIR (default .)\n"
    "  --checkpoint-dir DIR  default checkpoints/<spec name>\n"
    "  --warm-start DIR      start from the weights of this checkpoint (or a\n"
    "                        checkpoint root's newest) instead of a fresh\n"
    "                        initialization; step, optimizer state and data\n"
    "                        order start fresh. A checkpoint of the run's own\n"
    "                        in the checkpoint dir wins\n"
    "  --threads N           default spec.resources.cpu_threads\n"
    "  --progress text|json  json: one trainyard.v1.TrainerEvent per line\n"
    "  --rank, --world-size  data parallel: this process is rank R of N; each\n"
    "                        trains on micro_batch examples of every global\n"
    "                        batch of micro_batch x N, gradients are summed;\n"
    "                        rank 0 evaluates, checkpoints and reports\n"
    "  --rendezvous FILE     where rank 0 publishes its address (all ranks\n"
    "                        must see the same file)\n"
    "  --rendezvous-host A   the IPv4 or IPv6 address rank 0 listens on\n"
    "                        (default 127.0.0.1: all ranks on this machine)\n"
    "  --ranks-on-host N     ranks of the job on this machine, this one among\n"
    "                        them (default 1): a CPU job's memory estimate\n"
    "                        is checked against the host's available memory\n"
    "                        for all N (they start together)\n"
    "  --device D            GPU jobs: train on CUDA device D, an index among\n"
    "                        the CUDA-visible devices (default 0). A job of\n"
    "                        resources.gpus N runs N ranks (--world-size N),\n"
    "                        one per GPU, summing gradients with NCCL\n"
    "  --allreduce-bucket-mb MB  data parallel: gradients are summed in\n"
    "                        buckets of MB MiB while backward goes on\n"
    "                        (default 25; 0: one sum after backward)\n"
    "  --lease-fd FD         the worker's lease: FD gets a line each time it\n"
    "                        is renewed, the milliseconds it still runs (-1:\n"
    "                        none); past them with no new line, the run stops\n"
    "                        at once (exit 4): the worker was cut off and the\n"
    "                        server starts the job elsewhere\n"
    "  --dry-run             check, do not train: the spec, its data (sizes\n"
    "                        included), the starting weights, a CPU job's\n"
    "                        memory estimate against the host's available\n"
    "                        memory, and the checkpoint dir's checkpoint\n"
    "                        against the spec and --world-size; exit 0 and\n"
    "                        one line on stdout, or what the run would\n"
    "                        exit with before training\n"
    "\n"
    "Environment (read at start; README, \"The CUDA backend\"):\n"
    "  YARD_ATTENTION_TILING   bf16 attention tiling, FORWARD,BACKWARD, or\n"
    "                          auto\n"
    "  YARD_ATTENTION_BACKWARD two-kernel or ordered-dq\n"
    "  YARD_BIAS_GRADIENT      column-sums or epilogue\n"
    "  YARD_GEMM_CHOICES       a file of cuBLASLt choices, or auto\n"
    "  YARD_GPU_MEMORY_BYTES   the GPU memory taken (a worker's grant)\n"
    "  YARD_HOST_MEMORY_BYTES  the host memory a CPU job is checked against\n"
    "\n"
    "Exit codes: 0 finished, 1 runtime error, 2 usage or invalid spec (a\n"
    "checkpoint in the checkpoint dir written for another spec too),\n"
    "3 interrupted after a checkpoint, 4 stopped: the worker's lease ran out,\n"
    "5 not enough memory here (the host's for a CPU job, the GPU's for a GPU\n"
    "job): another machine may have it.\n"
    "sample and export exit 2 as well when CHECKPOINT_DIR holds no GPT\n"
    "checkpoint, and export when OUT_DIR exists and is not empty.\n"
    "\n"
    "sample prints text generated by the GPT in CHECKPOINT_DIR (a checkpoint,\n"
    "or a checkpoint root: its newest checkpoint), after the prompt:\n"
    "  --tokens N (default 500)  --temperature T (default 0.8; 0 = greedy)\n"
    "  --top-k K (default 0 = all)  --seed S (default 0)\n"
    "export writes that GPT as a Hugging Face GPT-2 folder (config.json,\n"
    "model.safetensors) that transformers' GPT2LMHeadModel loads, in\n"
    "OUT_DIR: a new folder, or an empty one.\n";

std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free);

// The first SIGTERM or SIGINT asks for a checkpoint at the end of the
// step; a second one (Ctrl-C again: a step can take minutes) ends the
// process at once, by that signal, without one. The worker sends one
// SIGTERM, then SIGKILL after its grace period.
extern "C" void OnStopSignal(int sig) {
  if (g_stop.exchange(true)) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

struct Args {
  std::string spec_file;
  std::string data_root = ".";
  std::string checkpoint_dir;
  std::string warm_start;
  std::vector<std::string> overrides;  // --set, in order
  int threads = 0;
  bool json = false;
  SocketCollectiveOptions ranks;
  int device = 0;
  int64_t bucket_mb = -1;  // -1: the trainer's default
  int lease_fd = -1;       // -1: no lease to watch
  bool dry_run = false;
  int ranks_on_host = 1;
};

// A flag taking a value, and how the value lands in the arguments T: the
// message for a bad value, or "" when it is good.
template <typename T>
struct ValueFlag {
  std::string_view name;
  std::string (*apply)(absl::string_view flag, const std::string& value,
                       T* args);
};

// Reads `value` into *out when it is an integer in [lo, hi].
template <typename Int>
std::string IntIn(absl::string_view flag, const std::string& value, Int lo,
                  Int hi, Int* out) {
  Int v;
  if (!absl::SimpleAtoi(value, &v) || v < lo || v > hi) {
    return hi == std::numeric_limits<Int>::max()
               ? absl::StrCat(flag, " must be an integer of at least ", lo,
                              ", got '", value, "'")
               : absl::StrCat(flag, " must be an integer in [", lo, ", ", hi,
                              "], got '", value, "'");
  }
  *out = v;
  return "";
}

// Parses the flags (--name VALUE or --name=VALUE) of argv after the command
// and its one positional argument (`positional_name` in errors) into
// *positional.
// Returns the message for stderr, "" when all is well.
template <typename T>
std::string ParseFlags(const std::vector<std::string>& argv,
                       absl::Span<const ValueFlag<T>> flags, T* args,
                       absl::string_view positional_name,
                       std::string* positional) {
  bool have_positional = false;
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      if (have_positional) {
        return absl::StrCat("unexpected argument '", arg, "'");
      }
      *positional = arg;
      have_positional = true;
      continue;
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const ValueFlag<T>* flag = nullptr;
    for (const ValueFlag<T>& f : flags) {
      if (f.name == name) flag = &f;
    }
    if (flag == nullptr) return absl::StrCat("unknown flag ", name);
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < argv.size()) {
      value = argv[++i];
    } else {
      return absl::StrCat(name, " needs a value");
    }
    if (std::string error = flag->apply(name, value, args); !error.empty()) {
      return error;
    }
  }
  return have_positional ? "" : absl::StrCat("missing ", positional_name);
}

// For the flags whose value is taken as it is.
std::string Set(const std::string& value, std::string* out) {
  *out = value;
  return "";
}

using S = absl::string_view;
using V = const std::string&;

const ValueFlag<Args> kRunFlags[] = {
    {"--set",
     [](S, V v, Args* a) {
       a->overrides.push_back(v);
       return std::string();
     }},
    {"--data-root", [](S, V v, Args* a) { return Set(v, &a->data_root); }},
    {"--checkpoint-dir",
     [](S, V v, Args* a) { return Set(v, &a->checkpoint_dir); }},
    {"--warm-start",
     [](S, V v, Args* a) {
       a->warm_start = v;
       return std::string(
           v.empty() ? "--warm-start needs a checkpoint directory" : "");
     }},
    {"--threads",
     [](S f, V v, Args* a) { return IntIn(f, v, 1, 256, &a->threads); }},
    {"--progress",
     [](S, V v, Args* a) {
       a->json = v == "json";
       return v == "text" || v == "json"
                  ? std::string()
                  : absl::StrCat("--progress must be text or json, got '", v,
                                 "'");
     }},
    {"--rank",
     [](S f, V v, Args* a) { return IntIn(f, v, 0, 4096, &a->ranks.rank); }},
    {"--world-size",
     [](S f, V v, Args* a) {
       return IntIn(f, v, 1, 4096, &a->ranks.world_size);
     }},
    {"--rendezvous",
     [](S, V v, Args* a) { return Set(v, &a->ranks.rendezvous_file); }},
    {"--rendezvous-host",
     [](S, V v, Args* a) { return Set(v, &a->ranks.listen_host); }},
    {"--ranks-on-host",
     [](S f, V v, Args* a) { return IntIn(f, v, 1, 4096, &a->ranks_on_host); }},
    {"--device",
     [](S f, V v, Args* a) { return IntIn(f, v, 0, 1023, &a->device); }},
    {"--allreduce-bucket-mb",
     [](S f, V v, Args* a) {
       return IntIn<int64_t>(f, v, 0, 65536, &a->bucket_mb);
     }},
    {"--lease-fd",
     [](S, V v, Args* a) {
       return absl::SimpleAtoi(v, &a->lease_fd) && a->lease_fd >= 0 &&
                      fcntl(a->lease_fd, F_GETFD) >= 0
                  ? std::string()
                  : absl::StrCat(
                        "--lease-fd must be an open file descriptor, got '", v,
                        "'");
     }},
};

// Parses argv; on failure returns the message for stderr.
std::string ParseArgs(const std::vector<std::string>& argv, Args* args) {
  if (argv.empty() || argv[0] != "run") {
    return absl::StrCat(argv.empty()
                            ? "missing command"
                            : absl::StrCat("unknown command '", argv[0], "'"),
                        " (run, sample or export; see yard-train --help)");
  }
  // The one flag without a value.
  std::vector<std::string> rest;
  for (const std::string& a : argv) {
    if (a == "--dry-run") {
      args->dry_run = true;
    } else {
      rest.push_back(a);
    }
  }
  if (std::string error = ParseFlags<Args>(rest, kRunFlags, args, "SPEC_FILE",
                                           &args->spec_file);
      !error.empty()) {
    return error;
  }
  const SocketCollectiveOptions& r = args->ranks;
  if (r.world_size < 1 || r.rank >= r.world_size) {
    return absl::StrCat("--rank ", r.rank, " must be below --world-size ",
                        r.world_size);
  }
  if (r.world_size > 1 && r.rendezvous_file.empty()) {
    return "--world-size above 1 needs --rendezvous FILE";
  }
  if (args->ranks_on_host > r.world_size) {
    return absl::StrCat("--ranks-on-host ", args->ranks_on_host,
                        " must not be above --world-size ", r.world_size);
  }
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

// An error is one line on stderr, and the last: the worker reports it as
// the job's reason.
int Fail(int code, absl::string_view message) {
  std::fflush(stdout);
  std::cerr << "yard-train: " << message << std::endl;
  return code;
}

// sample and export: what the command line asked for that cannot be done
// (nothing to read there, not a GPT, OUT_DIR taken) is a usage error, as
// it fails again however often it is tried; an unreadable checkpoint or a
// failed write is a runtime error.
int FailModelCommand(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kInvalidArgument:
      return Fail(kExitUsage, status.message());
    default:
      return Fail(kExitRuntime, status.message());
  }
}

struct SampleArgs {
  std::string dir;
  SampleOptions options{500, 0.8, 0, 0};
  std::string prompt;
  int threads = 1;
};

const ValueFlag<SampleArgs> kSampleFlags[] = {
    {"--tokens",
     [](S f, V v, SampleArgs* a) {
       return IntIn<int64_t>(f, v, 0, 1'000'000, &a->options.tokens);
     }},
    {"--temperature",
     [](S f, V v, SampleArgs* a) {
       double t;
       if (!absl::SimpleAtod(v, &t) || !(t >= 0 && t <= 100)) {
         return absl::StrCat(f, " must be a number in [0, 100], got '", v, "'");
       }
       a->options.temperature = t;
       return std::string();
     }},
    {"--top-k",
     [](S f, V v, SampleArgs* a) {
       return IntIn<int64_t>(f, v, 0, std::numeric_limits<int64_t>::max(),
                             &a->options.top_k);
     }},
    {"--seed",
     [](S f, V v, SampleArgs* a) {
       return IntIn<uint64_t>(f, v, 0, std::numeric_limits<uint64_t>::max(),
                              &a->options.seed);
     }},
    {"--threads",
     [](S f, V v, SampleArgs* a) { return IntIn(f, v, 1, 256, &a->threads); }},
    {"--prompt", [](S, V v, SampleArgs* a) { return Set(v, &a->prompt); }},
};

std::string ParseSampleArgs(const std::vector<std::string>& argv,
                            SampleArgs* args) {
  return ParseFlags<SampleArgs>(argv, kSampleFlags, args, "CHECKPOINT_DIR",
                                &args->dir);
}

// The prompt as tokens: text through the model's tokenizer, or token ids
// separated by spaces for models trained on token shards. An empty prompt
// starts from a newline (or token 0).
absl::StatusOr<std::vector<int32_t>> PromptTokens(const LoadedGpt& gpt,
                                                  const std::string& prompt) {
  if (gpt.tokenizer.has_value()) {
    if (!prompt.empty()) return gpt.tokenizer->Encode(prompt);
    absl::StatusOr<std::vector<int32_t>> nl = gpt.tokenizer->Encode("\n");
    return nl.ok() ? *nl : std::vector<int32_t>{0};
  }
  std::vector<int32_t> ids;
  for (absl::string_view part :
       absl::StrSplit(prompt, ' ', absl::SkipEmpty())) {
    int32_t id;
    if (!absl::SimpleAtoi(part, &id)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--prompt: this model has no tokenizer; give token ids, got '", part,
          "'"));
    }
    ids.push_back(id);
  }
  if (ids.empty()) ids.push_back(0);
  return ids;
}

int SampleMain(const std::vector<std::string>& argv) {
  SampleArgs args;
  if (std::string error = ParseSampleArgs(argv, &args); !error.empty()) {
    return Fail(kExitUsage, error);
  }
  absl::StatusOr<LoadedGpt> gpt = LoadGptCheckpoint(args.dir, args.threads);
  if (!gpt.ok()) return FailModelCommand(gpt.status());
  absl::StatusOr<std::vector<int32_t>> prompt = PromptTokens(*gpt, args.prompt);
  if (!prompt.ok()) return Fail(kExitUsage, prompt.status().message());
  if (gpt->tokenizer.has_value()) {
    // Only tokens that decode to text: a vocab_size above the tokenizer's
    // would otherwise print U+FFFD for the ids no character has.
    args.options.vocab_limit = std::min<int64_t>(
        gpt->tokenizer->vocab_size(), gpt->model->config().vocab_size);
  }
  absl::StatusOr<std::vector<int32_t>> out =
      SampleTokens(*gpt->model, *prompt, args.options);
  if (absl::IsDataLoss(out.status())) {
    // The checkpoint read back intact but its model computes no numbers.
    return Fail(kExitRuntime, absl::StrCat(gpt->checkpoint_path, ": ",
                                           out.status().message()));
  }
  if (!out.ok()) return Fail(kExitUsage, out.status().message());
  if (gpt->tokenizer.has_value()) {
    std::cout << args.prompt << gpt->tokenizer->Decode(*out) << std::endl;
  } else {
    std::cout << absl::StrJoin(*out, " ") << std::endl;
  }
  return kExitOk;
}

int ExportMain(const std::vector<std::string>& argv) {
  for (size_t i = 1; i < argv.size(); ++i) {
    if (argv[i].rfind("--", 0) == 0) {
      return Fail(kExitUsage,
                  absl::StrCat("unknown flag ", argv[i],
                               " (export takes CHECKPOINT_DIR OUT_DIR only)"));
    }
  }
  if (argv.size() != 3) {
    return Fail(kExitUsage,
                argv.size() < 3
                    ? "export needs CHECKPOINT_DIR and OUT_DIR"
                    : absl::StrCat("unexpected argument '", argv[3], "'"));
  }
  if (absl::Status s = ExportGptCheckpoint(argv[1], argv[2]); !s.ok()) {
    return FailModelCommand(s);
  }
  std::cerr << "yard-train: wrote " << argv[2] << std::endl;
  return kExitOk;
}

absl::StatusOr<EngineJob> LoadJob(const Args& args) {
  absl::StatusOr<trainyard::v1::JobSpec> spec =
      spec::ReadJobSpecFile(args.spec_file);
  if (!spec.ok()) return spec.status();
  for (const std::string& assignment : args.overrides) {
    if (absl::Status s = spec::ApplySpecOverride(assignment, *spec); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--set ", s.message()));
    }
  }
  const trainyard::v1::JobSpec full = spec::WithDefaults(*spec);
  spec::ValidationOptions validation;
  validation.data_root = args.data_root;
  if (absl::Status s = spec::ValidateJobSpec(full, validation); !s.ok()) {
    return s;
  }
  JobConfigOptions options;
  options.data_root = args.data_root;
  options.checkpoint_dir = args.checkpoint_dir;
  options.warm_start = args.warm_start;
  options.threads = args.threads;
  options.ranks_on_host = args.ranks_on_host;
  return EngineJobFromSpec(full, options);
}

// --dry-run: what would refuse the run before training (exit 2 as the run
// would), or one line on stdout saying what it found.
int DryRunMain(const Args& args) {
  absl::StatusOr<EngineJob> job = LoadJob(args);
  if (!job.ok()) return Fail(kExitUsage, job.status().message());
  absl::StatusOr<std::string> found =
      TrainJob::DryRun(*job, args.ranks.world_size);
  if (!found.ok()) {
    return Fail(StartFailureExit(found.status()), found.status().message());
  }
  std::cout << *found << std::endl;
  return kExitOk;
}

int Main(const std::vector<std::string>& argv) {
  // Help wherever it is asked for: `yard-train --help`, `yard-train help`,
  // `yard-train run --help`, `yard-train sample DIR -h`.
  const bool help =
      (!argv.empty() && argv[0] == "help") ||
      std::any_of(argv.begin(), argv.end(), [](const std::string& a) {
        return a == "--help" || a == "-h";
      });
  if (help) {
    std::cout << kSynopsis << kHelp;
    return kExitOk;
  }
  if (!argv.empty() && argv[0] == "sample") return SampleMain(argv);
  if (!argv.empty() && argv[0] == "export") return ExportMain(argv);
  Args args;
  if (std::string error = ParseArgs(argv, &args); !error.empty()) {
    return Fail(kExitUsage, error);
  }
  if (args.dry_run) return DryRunMain(args);
  // From here on a stop request is honoured: a signal during setup stops
  // the run before its first step, after a checkpoint.
  InstallSignalHandlers();
  // The worker's lease, watched from the start (loading data may take long).
  std::unique_ptr<LeaseWatch> lease;
  if (args.lease_fd >= 0) {
    absl::StatusOr<std::unique_ptr<LeaseWatch>> watch =
        LeaseWatch::Start(args.lease_fd, [](absl::Duration overdue) {
          std::fflush(stdout);
          std::cerr << "yard-train: stopping now: the worker has not renewed "
                       "its lease with the server (it ran out "
                    << absl::FormatDuration(overdue)
                    << " ago; the worker is frozen or cut off), so the "
                       "server starts this job elsewhere from its latest "
                       "checkpoint"
                    << std::endl;
          std::_Exit(kExitLeaseLost);
        });
    if (!watch.ok()) return Fail(kExitRuntime, watch.status().message());
    lease = *std::move(watch);
  }
  absl::StatusOr<EngineJob> job = LoadJob(args);
  if (!job.ok()) return Fail(kExitUsage, job.status().message());
  if (args.bucket_mb >= 0) {
    job->trainer.allreduce_bucket_bytes = args.bucket_mb << 20;
  }
  StdoutSink sink(args.json);
  SocketCollectiveOptions rank_options = args.ranks;
  rank_options.stop = &g_stop;
  absl::StatusOr<std::unique_ptr<SocketCollective>> ranks =
      SocketCollective::Connect(rank_options);
  if (absl::IsCancelled(ranks.status())) {
    // Nothing trained yet, so nothing to checkpoint: stopped as asked.
    return Fail(kExitInterrupted, ranks.status().message());
  }
  if (!ranks.ok()) return Fail(kExitRuntime, ranks.status().message());
  absl::StatusOr<std::unique_ptr<TrainJob>> train =
      TrainJob::Create(*job, &sink, ranks->get(), args.device);
  if (!train.ok()) {
    return Fail(StartFailureExit(train.status()), train.status().message());
  }
  YARD_LOG(INFO) << "training " << (job->name.empty() ? "run" : job->name)
                 << " with " << job->threads << " thread(s)"
                 << (args.ranks.world_size > 1
                         ? absl::StrCat(" as rank ", args.ranks.rank, " of ",
                                        args.ranks.world_size)
                         : "")
                 << (job->gpus > 0
                         ? absl::StrCat(" on CUDA device ", args.device)
                         : "")
                 << ", checkpoints in " << job->trainer.checkpoint.dir;
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
