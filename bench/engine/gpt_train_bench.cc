// GPT training throughput through the engine's own job path: a JobSpec is
// built (or read from examples/shakespeare-char.yaml), defaulted, validated
// and turned into an EngineJob exactly as yard-train does, then TrainJob
// assembles data, backend, model, loader and trainer, and the benchmark
// drives Trainer::Advance step by step, timing each step to the device's
// completion. Precision comes from the spec (`precision: BF16`), so the
// figures are those of a real job. Checkpoints and evaluation are off.
//
//   gpt_train_bench [--config 124m|shakespeare] [--precision fp32|bf16]
//                   [--device cuda|cpu] [--micro-batch N|max] [--steps 20]
//                   [--warmup 3] [--threads 1] [--data-root DIR] [--csv FILE]
//                   [--profile-steps 0]
//
// 124m: GPT-2 small (12 layers, 12 heads, d_model 768, seq 1024, vocab
// 50304) on a shard of random tokens written to a temporary folder.
// shakespeare: examples/shakespeare-char.yaml under --data-root (default:
// the current directory). --micro-batch max (CUDA only) searches the largest
// micro-batch whose memory estimate fits the GPU's free memory, then backs
// off until a real step runs. --device cpu runs the same path on the CPU
// backend (a check of the benchmark itself on machines without a GPU).
//
// Prints the step time (median), tokens/s, MFU against 989 TFLOP/s (H100 and
// H200 SXM dense bf16) with FLOPs per token 6N + 6*L*C*T, peak memory, and
// one CSV line (header and row prefixed "CSV "), also appended to --csv.
// --profile-steps N then runs N more steps with every backend op timed to
// the device's completion (ProfilingBackend) and prints where a step's time
// goes, op by op (lines prefixed "PROFILE ").
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "engine/core/rng.h"
#include "engine/data/token_data.h"
#include "engine/job_config.h"
#include "engine/train_job.h"
#include "spec/spec.h"
#ifdef YARD_CUDA
#include <cuda_runtime_api.h>

#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/device_query.h"
#endif

namespace trainyard::engine {
namespace {

namespace v1 = trainyard::v1;

// Dense bf16 tensor throughput of an H100 SXM (the H200 has the same).
constexpr double kPeakFlops = 989e12;
constexpr char kCsvHeader[] =
    "impl,config,precision,device,micro_batch,seq_len,params,steps,"
    "step_ms_median,tokens_per_s,mfu_pct,peak_alloc_mib,device_used_mib,"
    "last_loss";

struct Options {
  std::string config = "shakespeare";
  std::string precision = "fp32";
  std::string device = "cuda";
  int64_t micro_batch = 0;  // 0: the config's own
  bool max_micro_batch = false;
  int64_t steps = 20;
  int64_t warmup = 3;
  int threads = 1;
  std::string data_root = ".";
  std::string csv;
  int64_t profile_steps = 0;
};

absl::Status ParseFlag(const std::string& flag, const std::string& value,
                       Options* o) {
  int64_t n = 0;
  const bool number = absl::SimpleAtoi(value, &n) && n >= 0;
  if (flag == "--config" && (value == "124m" || value == "shakespeare")) {
    o->config = value;
  } else if (flag == "--precision" && (value == "fp32" || value == "bf16")) {
    o->precision = value;
  } else if (flag == "--device" && (value == "cuda" || value == "cpu")) {
    o->device = value;
  } else if (flag == "--micro-batch" && value == "max") {
    o->max_micro_batch = true;
  } else if (flag == "--micro-batch" && number && n > 0) {
    o->micro_batch = n;
  } else if (flag == "--steps" && number && n > 0) {
    o->steps = n;
  } else if (flag == "--warmup" && number) {
    o->warmup = n;
  } else if (flag == "--threads" && number && n > 0 && n <= 256) {
    o->threads = static_cast<int>(n);
  } else if (flag == "--data-root" && !value.empty()) {
    o->data_root = value;
  } else if (flag == "--csv" && !value.empty()) {
    o->csv = value;
  } else if (flag == "--profile-steps" && number) {
    o->profile_steps = n;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("bad flag or value: ", flag, " ", value));
  }
  return absl::OkStatus();
}

absl::StatusOr<Options> ParseFlags(int argc, char** argv) {
  Options o;
  if (argc % 2 != 1) {
    return absl::InvalidArgumentError("every flag takes one value");
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    RETURN_IF_ERROR(ParseFlag(argv[i], argv[i + 1], &o));
  }
  if (o.max_micro_batch && o.device != "cuda") {
    return absl::InvalidArgumentError(
        "--micro-batch max sizes against GPU memory: it needs --device cuda");
  }
  return o;
}

// GPT-2 small on random tokens: a shard of 2^21 tokens (4 MiB) is enough
// for random windows of 1,025 tokens and a held-out tail.
absl::StatusOr<v1::JobSpec> Gpt2SmallSpec(const std::string& data_root) {
  const std::string dir = data_root + "/bench-tokens";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create ", dir, ": ", ec.message()));
  }
  constexpr int64_t kVocab = 50304;
  Rng rng(1);
  std::vector<int32_t> tokens(int64_t{1} << 21);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng.Below(kVocab));
  RETURN_IF_ERROR(WriteTokenShard(dir + "/train.bin", tokens));
  v1::JobSpec spec;
  spec.set_name("gpt2-124m-bench");
  v1::GptModel* gpt = spec.mutable_model()->mutable_gpt();
  gpt->set_n_layer(12);
  gpt->set_n_head(12);
  gpt->set_d_model(768);
  gpt->set_seq_len(1024);
  gpt->set_vocab_size(kVocab);
  spec.mutable_data()->mutable_tokens()->add_train("bench-tokens/train.bin");
  v1::OptimizerSpec* opt = spec.mutable_optimizer();
  opt->set_lr(6e-4);
  opt->set_weight_decay(0.1);
  opt->set_beta2(0.95);
  opt->set_grad_clip(1.0);
  spec.mutable_batch()->set_micro_batch(8);
  spec.set_seed(1);
  return spec;
}

// The config's spec with the benchmark's overrides: device, precision,
// micro-batch, steps, and no evaluation, checkpoints or progress chatter.
absl::StatusOr<v1::JobSpec> BaseSpec(const Options& o,
                                     const std::string& data_root) {
  v1::JobSpec spec;
  if (o.config == "124m") {
    ASSIGN_OR_RETURN(spec, Gpt2SmallSpec(data_root));
  } else {
    ASSIGN_OR_RETURN(spec, spec::ReadJobSpecFile(
                               data_root + "/examples/shakespeare-char.yaml"));
  }
  spec.set_precision(o.precision == "bf16" ? v1::BF16 : v1::FP32);
  spec.mutable_resources()->set_gpus(o.device == "cuda" ? 1 : 0);
  spec.mutable_resources()->set_cpu_threads(o.threads);
  if (o.micro_batch > 0) spec.mutable_batch()->set_micro_batch(o.micro_batch);
  spec.mutable_batch()->set_grad_accum(1);
  // One step more than timed (the confirming step of --micro-batch max may
  // come on top of the warm-up). A report every step costs nothing: the
  // loss is on the host already.
  spec.set_steps(o.warmup + o.steps + o.profile_steps + 1);
  spec.set_log_every_steps(1);
  spec.mutable_eval()->set_every_steps(0);
  spec.mutable_checkpoint()->set_every_steps(0);
  return spec::WithDefaults(spec);
}

// Keeps the last reported training loss; the rest of the events go.
class LossSink : public TrainerEventSink {
 public:
  void Emit(const TrainerEvent& event) override {
    if (const auto* p = std::get_if<TrainProgressEvent>(&event)) {
      last_loss = p->loss;
    }
  }
  double last_loss = 0;
};

// A job ready to step: the spec's EngineJob with checkpoints off.
struct BenchJob {
  LossSink sink;
  std::unique_ptr<TrainJob> job;
};

absl::StatusOr<std::unique_ptr<BenchJob>> StartJob(
    const v1::JobSpec& spec, const std::string& data_root) {
  spec::ValidationOptions validation;
  validation.data_root = data_root;
  RETURN_IF_ERROR(spec::ValidateJobSpec(spec, validation));
  JobConfigOptions config;
  config.data_root = data_root;
  ASSIGN_OR_RETURN(EngineJob engine_job, EngineJobFromSpec(spec, config));
  engine_job.trainer.checkpoint.dir.clear();  // no checkpoints, no resume
  engine_job.profile_ops = true;  // timing off until --profile-steps
  auto bench = std::make_unique<BenchJob>();
  ASSIGN_OR_RETURN(bench->job, TrainJob::Create(engine_job, &bench->sink));
  RETURN_IF_ERROR(bench->job->trainer().Start());
  return bench;
}

// One optimizer step, timed to the device's completion, in seconds.
absl::StatusOr<double> TimedStep(TrainJob& job) {
  const auto start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(job.trainer().Advance());
  RETURN_IF_ERROR(job.backend().Synchronize());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

#ifdef YARD_CUDA
struct GpuMemory {
  int64_t free = 0;
  int64_t total = 0;
};

absl::StatusOr<GpuMemory> QueryGpuMemory() {
  size_t free = 0, total = 0;
  const cudaError_t err = cudaMemGetInfo(&free, &total);
  if (err != cudaSuccess) {
    return absl::UnavailableError(
        absl::StrCat("cudaMemGetInfo: ", cudaGetErrorString(err)));
  }
  return GpuMemory{static_cast<int64_t>(free), static_cast<int64_t>(total)};
}

// The largest micro-batch whose memory estimate (the one the scheduler and
// the backend's arena use, for the attention backward YARD_ATTENTION_BACKWARD
// picks, as the job reads it) fits in `free` bytes; 0 when none does.
int64_t LargestEstimatedFit(v1::JobSpec spec, int64_t free) {
  AttentionState attention = AttentionState::kLogSumExp;
  if (const char* b = std::getenv("YARD_ATTENTION_BACKWARD");
      b != nullptr && *b != '\0') {
    // A bad name fails the job itself, naming it.
    if (auto parsed = ParseAttentionBackward(b); parsed.ok()) {
      attention = CudaAttentionState(*parsed);
    }
  }
  const int64_t seq = spec.model().gpt().seq_len();
  int64_t lo = 0;
  int64_t hi = std::min(spec::kMaxMicroBatch, spec::kMaxMicroBatchTokens / seq);
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    spec.mutable_batch()->set_micro_batch(static_cast<int32_t>(mid));
    if (EstimateSpecMemory(spec, DeviceKind::kCuda, attention).total() <=
        free) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

bool OutOfMemory(const absl::Status& s) {
  return s.code() == absl::StatusCode::kResourceExhausted ||
         absl::StrContains(s.message(), "out of memory");
}

// Starts the job at the largest micro-batch that really runs a step: the
// estimate's pick, then 10% less at a time while the device runs out of
// memory. *spec ends with the micro-batch chosen.
absl::StatusOr<std::unique_ptr<BenchJob>> StartLargestJob(
    v1::JobSpec* spec, const std::string& data_root) {
  ASSIGN_OR_RETURN(GpuMemory mem, QueryGpuMemory());
  int64_t mb = LargestEstimatedFit(*spec, mem.free);
  std::printf("micro-batch search: %.1f GiB free; the estimate fits %ld\n",
              mem.free / double(int64_t{1} << 30), mb);
  for (int attempt = 0; mb > 0 && attempt < 12; ++attempt) {
    spec->mutable_batch()->set_micro_batch(static_cast<int32_t>(mb));
    absl::StatusOr<std::unique_ptr<BenchJob>> job = StartJob(*spec, data_root);
    absl::Status step = job.status();
    if (job.ok()) step = TimedStep(*(*job)->job).status();
    if (step.ok()) {
      std::printf("micro-batch %ld ran a step\n", mb);
      return job;
    }
    if (!OutOfMemory(step)) return step;
    std::printf("micro-batch %ld: %s\n", mb, step.ToString().c_str());
    job = absl::CancelledError();  // free the device before the next try
    mb = std::min(mb - 1, mb * 9 / 10);
  }
  return absl::ResourceExhaustedError("no micro-batch fits the GPU");
}
#endif  // YARD_CUDA

struct DeviceFacts {
  std::string name = "cpu";
  int64_t used_bytes = 0;  // whole process on the device, context included
};

DeviceFacts ReadDevice(const Options& o) {
  DeviceFacts d;
#ifdef YARD_CUDA
  if (o.device == "cuda") {
    auto devices = cuda::ListCudaDevices();
    if (devices.ok() && !devices->empty()) d.name = (*devices)[0].name;
    auto mem = QueryGpuMemory();
    if (mem.ok()) d.used_bytes = mem->total - mem->free;
  }
#else
  (void)o;
#endif
  return d;
}

void Report(const Options& o, const v1::JobSpec& spec, BenchJob& bench,
            std::vector<double> seconds) {
  TrainJob& job = *bench.job;
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  const auto& gpt = spec.model().gpt();
  const int64_t mb = spec.batch().micro_batch();
  const double tokens_per_s = mb * gpt.seq_len() / median;
  const int64_t n = job.model().num_parameters();
  const double flops_per_token =
      6.0 * n + 6.0 * gpt.n_layer() * gpt.d_model() * gpt.seq_len();
  const double mfu = tokens_per_s * flops_per_token / kPeakFlops;
  const DeviceFacts device = ReadDevice(o);
  const double mib = 1 << 20;
  const double peak = job.backend().peak_allocated_bytes() / mib;
  const std::string row = absl::StrFormat(
      "trainyard-%s,%s,%s,%s,%d,%d,%d,%d,%.3f,%.1f,%.2f,%.1f,%.1f,%.4f",
      o.device, o.config, o.precision, device.name, mb, gpt.seq_len(), n,
      o.steps, median * 1e3, tokens_per_s, mfu * 100, peak,
      device.used_bytes / mib, bench.sink.last_loss);
  absl::PrintF(
      "device %s | %s %s micro-batch %d x %d tokens, %d parameters\n"
      "step %.2f ms (median of %zu; min %.2f, max %.2f) | %.0f tokens/s | "
      "MFU %.2f%% of %.0f TFLOP/s | peak engine memory %.0f MiB, device "
      "%.0f MiB\n",
      device.name, o.config, o.precision, mb, gpt.seq_len(), n, median * 1e3,
      seconds.size(), seconds.front() * 1e3, seconds.back() * 1e3, tokens_per_s,
      mfu * 100, kPeakFlops / 1e12, peak, device.used_bytes / mib);
  absl::PrintF("CSV %s\nCSV %s\n", kCsvHeader, row);
  if (!o.csv.empty()) {
    const bool fresh = !std::filesystem::exists(o.csv);
    std::ofstream out(o.csv, std::ios::app);
    if (fresh) out << kCsvHeader << "\n";
    out << row << "\n";
  }
}

// `steps` more steps with every op timed; prints each op's calls and time
// per step, most time first, and its share of the profiled step.
absl::Status ProfileSteps(TrainJob& job, int64_t steps, double plain_median) {
  ProfilingBackend* profiler = job.profiler();
  if (profiler == nullptr) return absl::InternalError("no op profiler");
  profiler->Reset();
  profiler->set_enabled(true);
  double total = 0;
  for (int64_t i = 0; i < steps; ++i) {
    absl::StatusOr<double> s = TimedStep(job);
    if (!s.ok()) {
      profiler->set_enabled(false);
      return s.status();
    }
    total += *s;
  }
  profiler->set_enabled(false);
  const double per_step = total / static_cast<double>(steps);
  absl::PrintF(
      "PROFILE %d steps with a wait after every op: %.2f ms a step (plain "
      "median %.2f ms)\n",
      steps, per_step * 1e3, plain_median * 1e3);
  absl::PrintF("PROFILE %-36s %10s %10s %7s\n", "op", "calls/step", "ms/step",
               "share");
  const auto row = [&](absl::string_view op, double calls, double seconds) {
    absl::PrintF(
        "PROFILE %-36s %10s %10.3f %6.1f%%\n", op,
        calls < 0 ? std::string()
                  : absl::StrFormat("%.1f", calls / static_cast<double>(steps)),
        seconds / static_cast<double>(steps) * 1e3, 100 * seconds / total);
  };
  double ops = 0, linear = 0, linear_calls = 0;
  for (const OpTime& t : profiler->Profile()) {
    ops += t.seconds;
    if (absl::StartsWith(t.op, "Linear")) {
      linear += t.seconds;
      linear_calls += static_cast<double>(t.calls);
    }
    row(t.op, static_cast<double>(t.calls), t.seconds);
  }
  // The linear layers' shapes (inputs x outputs) together.
  row("(linear layers, all shapes)", linear_calls, linear);
  row("(host, between ops)", -1, total - ops);
  return absl::OkStatus();
}

// A temporary folder removed with everything in it when this goes.
struct ScratchDir {
  std::string path;
  ~ScratchDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
};

absl::Status Run(const Options& o) {
  std::string data_root = o.data_root;
  ScratchDir scratch;
  if (o.config == "124m") {
    // Random tokens need no dataset: a temporary data root holds the shard.
    char tmpl[] = "/tmp/gpt-train-bench.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
    data_root = scratch.path = tmpl;
  }
  ASSIGN_OR_RETURN(v1::JobSpec spec, BaseSpec(o, data_root));
  std::unique_ptr<BenchJob> bench;
  int64_t done = 0;
#ifdef YARD_CUDA
  if (o.max_micro_batch) {
    ASSIGN_OR_RETURN(bench, StartLargestJob(&spec, data_root));
    done = 1;  // the confirming step counts as a warm-up step
  }
#endif
  if (bench == nullptr) {
    ASSIGN_OR_RETURN(bench, StartJob(spec, data_root));
  }
  std::vector<double> seconds;
  for (int64_t step = done; static_cast<int64_t>(seconds.size()) < o.steps;
       ++step) {
    ASSIGN_OR_RETURN(double s, TimedStep(*bench->job));
    if (step >= o.warmup) seconds.push_back(s);
  }
  Report(o, spec, *bench, seconds);
  if (o.profile_steps > 0) {
    std::sort(seconds.begin(), seconds.end());
    RETURN_IF_ERROR(ProfileSteps(*bench->job, o.profile_steps,
                                 seconds[seconds.size() / 2]));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace trainyard::engine

int main(int argc, char** argv) {
  auto options = trainyard::engine::ParseFlags(argc, argv);
  if (!options.ok()) {
    std::fprintf(stderr,
                 "gpt_train_bench: %s\nusage: gpt_train_bench [--config 124m|"
                 "shakespeare] [--precision fp32|bf16] [--device cuda|cpu] "
                 "[--micro-batch N|max] [--steps N] [--warmup N] [--threads N] "
                 "[--data-root DIR] [--csv FILE] [--profile-steps N]\n",
                 std::string(options.status().message()).c_str());
    return 2;
  }
  const absl::Status s = trainyard::engine::Run(*options);
  if (!s.ok()) {
    std::fprintf(stderr, "gpt_train_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
