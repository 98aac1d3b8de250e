// From a JobSpec (the API's protobuf message) to the engine's plain configs.
// This is the one place that knows both: the engine libraries stay free of
// protobuf, and yard-train calls this after spec::WithDefaults and
// spec::ValidateJobSpec. Pure functions; thread-safe.
#ifndef TRAINYARD_ENGINE_JOB_CONFIG_H_
#define TRAINYARD_ENGINE_JOB_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/gpt.h"
#include "engine/core/memory_estimate.h"
#include "engine/core/mlp.h"
#include "engine/core/trainer.h"
#include "trainyard/v1/spec.pb.h"

namespace trainyard::engine {

struct JobConfigOptions {
  // Spec data paths are relative to this root.
  std::string data_root = ".";
  // Empty: DefaultCheckpointDir(spec).
  std::string checkpoint_dir;
  // 0: spec.resources.cpu_threads.
  int threads = 0;
  // Ranks of the job on this host, this process among them (yard-train
  // --ranks-on-host; the worker passes how many it starts): a CPU job's
  // memory estimate is checked for all of them together.
  int ranks_on_host = 1;
  // A checkpoint (or a checkpoint root: its newest) whose weights start the
  // job instead of a fresh initialization (the server's pick for
  // spec.warm_start, or yard-train --warm-start). Empty: none.
  std::string warm_start;
};

// MNIST files, resolved inside the data root.
struct MnistFiles {
  std::string images;
  std::string labels;
  int64_t holdout = 0;
  // Separate evaluation files; empty when the holdout split is used.
  std::string eval_images;
  std::string eval_labels;
};

// A text file, resolved inside the data root.
struct TextFiles {
  std::string train;
  std::string eval;  // empty: hold out the last 10% of train
  bool char_tokenizer = false;
};

// llm.c token shards, resolved inside the data root.
struct TokenFiles {
  std::vector<std::string> train;
  std::vector<std::string> eval;  // empty: hold out the last 10% of train
};

// Fraction of the training tokens held out when no eval data is given.
inline constexpr double kTokenHoldoutFraction = 0.1;

struct EngineJob {
  std::string name;
  // Exactly one model: the MLP on MNIST, or the GPT on text or tokens.
  bool is_gpt = false;
  MlpConfig mlp;
  MnistFiles mnist;
  GptConfig gpt;
  // Hugging Face GPT-2 folder to start from; empty for a fresh init.
  std::string gpt_init_from;
  // A checkpoint (or root) whose weights start the job; empty for none.
  // Only the weights: step, optimizer state and data order start fresh.
  std::string warm_start;
  std::optional<TextFiles> text;
  std::optional<TokenFiles> tokens;
  TrainerConfig trainer;
  int threads = 1;
  // JobConfigOptions::ranks_on_host.
  int ranks_on_host = 1;
  // GPUs of the whole job; each rank trains on one (the CUDA backend, on
  // the first GPU it sees). 0: the CPU backend.
  int gpus = 0;
  // precision: FP32 (or unspecified) trains in fp32; BF16 in mixed
  // precision (bf16 activations and working weights, fp32 masters and
  // optimizer state), on the CPU or CUDA backend alike.
  DType activation_dtype = DType::kF32;
  // Benchmarks: wrap the backend in a ProfilingBackend (TrainJob::profiler)
  // that can time every op. Never set from a spec.
  bool profile_ops = false;
};

// The backend activation dtype a spec's precision asks for.
DType ActivationDType(trainyard::v1::Precision precision);

// REQUIRES: spec has defaults applied and passed validation. Still returns
// INVALID_ARGUMENT, starting with the field path, for what this engine
// cannot run (a model and data that do not go together, GPUs).
absl::StatusOr<EngineJob> EngineJobFromSpec(const trainyard::v1::JobSpec& spec,
                                            const JobConfigOptions& options);

// 16 hex digits identifying everything that shapes the trained weights:
// model, data, optimizer, batch, steps, precision and seed. Not the name,
// threads (results do not depend on them), logging, evaluation or
// checkpoint policy, so those may change across a resume.
std::string SpecFingerprint(const trainyard::v1::JobSpec& spec);

// The memory the spec's job needs on `device` (see memory_estimate.h;
// `cuda_attention` as there).
// REQUIRES: defaults applied (spec::WithDefaults) and a valid model.
MemoryEstimate EstimateSpecMemory(
    const trainyard::v1::JobSpec& spec, DeviceKind device,
    AttentionState cuda_attention = AttentionState::kLogSumExp);

// "checkpoints/<name>", the name reduced to [A-Za-z0-9._-] ("run" when
// nothing usable is left).
std::string DefaultCheckpointDir(const trainyard::v1::JobSpec& spec);

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_JOB_CONFIG_H_
