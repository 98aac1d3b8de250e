// How many bytes of device memory a training job needs, computed from its
// model and batch alone so the scheduler can pack jobs before they start:
// weights, gradients and AdamW moments (fp32; under bf16 mixed precision
// weights also count the bf16 working copy), the activations the model
// keeps for one micro-batch (and the backward's scratch; bf16 halves those
// stored in the activation dtype, while LayerNorm statistics, attention
// state and losses stay fp32), GEMM workspace,
// and a fixed overhead per process (runtime, code, loader buffers; on a GPU
// the CUDA context). The first four are exactly what the models and the
// optimizer allocate through Backend::Allocate; tests hold the estimate to
// the CPU backend's measured peak. Pure functions; thread-safe.
#ifndef TRAINYARD_ENGINE_CORE_MEMORY_ESTIMATE_H_
#define TRAINYARD_ENGINE_CORE_MEMORY_ESTIMATE_H_

#include <cstdint>

#include "engine/core/backend.h"
#include "engine/core/gpt.h"
#include "engine/core/mlp.h"

namespace trainyard::engine {

enum class DeviceKind { kCpu, kCuda };

struct MemoryEstimate {
  int64_t weights = 0;
  int64_t gradients = 0;
  int64_t optimizer = 0;    // AdamW m and v
  int64_t activations = 0;  // kept for backward, plus backward scratch
  int64_t workspace = 0;    // GEMM packing buffers (CUDA: see below)
  int64_t overhead = 0;     // fixed per process
  // What the engine allocates through its backend.
  int64_t allocated() const {
    return weights + gradients + optimizer + activations;
  }
  int64_t total() const { return allocated() + workspace + overhead; }
};

// Fixed overhead: 64 MiB on a CPU, 512 MiB on a GPU (CUDA context and
// library handles, measured on H100-class devices in the hundreds of MiB).
inline constexpr int64_t kCpuOverheadBytes = int64_t{64} << 20;
inline constexpr int64_t kCudaOverheadBytes = int64_t{512} << 20;
// The CUDA backend's own share of its arena: the cuBLASLt workspace
// (32 MiB), the embedding backward's sort keys (8 MiB), reduction scratch,
// and slack for rounding each allocation up to the arena's alignment. The
// arena a job needs is allocated() + workspace.
inline constexpr int64_t kCudaWorkspaceBytes = int64_t{43} << 20;

// Any sizes are accepted: every part saturates at 2^60 bytes, and a GPT
// config outside ValidateGptConfig's limits reads as saturated throughout,
// so a config no spec would pass reads as too big for any device rather
// than overflowing.
// `activations` is the backend's activation dtype (the spec's precision);
// `cuda_attention` what the CUDA backend's attention keeps
// (CudaAttentionState of its options; the CPU's is always kProbabilities).
MemoryEstimate EstimateGptMemory(
    const GptConfig& config, int64_t micro_batch, int threads,
    DeviceKind device, DType activations = DType::kF32,
    AttentionState cuda_attention = AttentionState::kLogSumExp);
MemoryEstimate EstimateMlpMemory(const MlpConfig& config, int64_t micro_batch,
                                 int threads, DeviceKind device,
                                 DType activations = DType::kF32);

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_MEMORY_ESTIMATE_H_
