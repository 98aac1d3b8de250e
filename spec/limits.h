// Every upper bound a job spec is held to, in one place. Specs come from
// anyone who can reach the API, so each size a spec controls is capped
// before anything is computed or allocated from it; the caps are far above
// what a real job on one node asks for, and low enough that no product of
// them can overflow int64 (see the static_asserts below). The README's
// "Job spec reference" lists them for users. Constants only; thread-safe.
#ifndef TRAINYARD_SPEC_LIMITS_H_
#define TRAINYARD_SPEC_LIMITS_H_

#include <cstdint>
#include <limits>

namespace trainyard::spec {

// Spec text (YAML or JSON) and the encoded JobSpec message: 1 MiB. Readers
// refuse a larger file before parsing it.
inline constexpr int64_t kMaxSpecBytes = int64_t{1} << 20;
// YAML/JSON nesting depth, and nodes visited while expanding YAML aliases
// (a "billion laughs" document is small on disk and huge once expanded).
inline constexpr int kMaxSpecDepth = 32;
inline constexpr int64_t kMaxSpecNodes = 100'000;
// The JSON text a YAML spec expands to: an alias copies its anchor's text
// each time, so 100,000 aliases of one long string would be gigabytes.
inline constexpr int64_t kMaxSpecExpandedBytes = 8 * kMaxSpecBytes;

// Strings. The job name is free text shown in listings; data paths are
// relative to the data root, and 4096 is Linux's PATH_MAX.
inline constexpr int64_t kMaxNameLength = 128;
inline constexpr int64_t kMaxPathLength = 4096;

// Run length and bookkeeping periods, in optimizer steps.
inline constexpr int64_t kMaxSteps = 10'000'000;
inline constexpr int64_t kMaxEvalBatches = 1'000'000;
// eval.patience: evaluations without improvement before early stopping.
inline constexpr int64_t kMaxPatience = 1000;
inline constexpr int64_t kMaxKeepLast = 1'000;
inline constexpr int64_t kMaxPriority = 1'000;  // and -kMaxPriority
inline constexpr int64_t kMaxRestarts = 100;
inline constexpr int64_t kMaxTimeLimitSeconds = int64_t{30} * 24 * 3600;
inline constexpr int kMaxDependencies = 16;  // depends_on
inline constexpr int64_t kMaxGroupRunning = 10'000;  // concurrency.max_running
inline constexpr int32_t kDefaultHalvingFactor = 3;  // halving.factor
inline constexpr int64_t kMaxHalvingFactor = 16;
inline constexpr int64_t kMaxJobIdLength = 128;

// Model sizes. Each dimension is capped on its own so no product of them
// overflows, and the parameter count as a whole: 2e9 fp32 parameters with
// AdamW take 32 GB before activations, the most one node trains.
inline constexpr int64_t kMaxParameters = 2'000'000'000;
inline constexpr int64_t kMaxLayers = 256;         // MLP hidden, GPT n_layer
inline constexpr int64_t kMaxLayerWidth = 65'536;  // MLP widths, GPT d_model
inline constexpr int64_t kMaxHeads = 1'024;
inline constexpr int64_t kMaxSeqLen = 65'536;
inline constexpr int64_t kMaxVocab = int64_t{1} << 20;

// Batches: examples per micro-batch, micro-batches per step, and tokens per
// GPT micro-batch (micro_batch x seq_len), which bounds activation memory.
inline constexpr int64_t kMaxMicroBatch = 65'536;
inline constexpr int64_t kMaxGradAccum = 4'096;
inline constexpr int64_t kMaxMicroBatchTokens = int64_t{1} << 24;

// Data.
inline constexpr int64_t kMaxTokenShards = 10'000;  // train + eval
inline constexpr int64_t kMaxHoldout = 10'000'000;  // MNIST examples

// Resources one job may ask for.
inline constexpr int64_t kMaxGpus = 1'024;
inline constexpr int64_t kMaxCpuThreads = 256;
inline constexpr int64_t kMaxCpuRanks = 64;
// resources.gpu_models: entries, and bytes per entry (NVML names are at
// most 96 bytes; a model worth naming is far shorter).
inline constexpr int kMaxGpuModels = 16;
inline constexpr int64_t kMaxGpuModelLength = 64;

// The largest products computed from accepted sizes stay far below 2^63:
// a GPT's weights (layers x 12 d^2), its attention scores for a micro-batch
// (layers x heads x tokens x seq_len, in bytes) and an MLP's activations.
static_assert(kMaxLayers * 12 * kMaxLayerWidth * kMaxLayerWidth <
              (int64_t{1} << 50));
static_assert(kMaxLayers * kMaxHeads * kMaxMicroBatchTokens * kMaxSeqLen * 4 <
              (int64_t{1} << 62));
static_assert(kMaxMicroBatch * (kMaxLayers + 2) * 2 * kMaxLayerWidth * 4 <
              (int64_t{1} << 50));
static_assert(kMaxSteps * kMaxGradAccum * kMaxMicroBatch <
              std::numeric_limits<int64_t>::max() / 2);

}  // namespace trainyard::spec

#endif  // TRAINYARD_SPEC_LIMITS_H_
