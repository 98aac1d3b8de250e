// Memory estimates. See memory_estimate.h; the sizes mirror the allocations
// in gpt.cc, mlp.cc and adamw.cc.
#include "engine/core/memory_estimate.h"

#include <algorithm>

namespace trainyard::engine {
namespace {

// A size past anything a device has. Estimates saturate here instead of
// overflowing: a config no spec would pass must read as huge, never wrap
// around to small (or negative), and six saturated parts still sum below
// 2^63.
constexpr int64_t kSaturated = int64_t{1} << 60;

int64_t Mul(int64_t a, int64_t b) {
  int64_t out;
  if (a <= 0 || b <= 0) return 0;
  if (__builtin_mul_overflow(a, b, &out) || out > kSaturated) return kSaturated;
  return out;
}

// Either may be a raw size from the config (up to 2^63 - 1): each is
// clamped to [0, 2^60] before the sum, which then cannot overflow.
int64_t Add(int64_t a, int64_t b) {
  return std::min(std::clamp(a, int64_t{0}, kSaturated) +
                      std::clamp(b, int64_t{0}, kSaturated),
                  kSaturated);
}

// The CPU GEMM's packing buffers (engine/cpu/gemm.cc): op(B) panels of
// 256 x 16 floats across the widest output, and one 72 x 256 block of op(A)
// per thread.
int64_t GemmWorkspace(int64_t widest_n, int threads) {
  const int64_t panels = Add(widest_n, 15) / 16;
  return Mul(Add(Mul(panels, 256 * 16), Mul(std::max(threads, 1), 72 * 256)),
             4);
}

// fp32 masters, gradients and moments; plus the working copy in bf16.
MemoryEstimate Parameters(int64_t count, int64_t overhead, DType act) {
  MemoryEstimate m;
  m.weights = m.gradients = Mul(4, count);
  if (act != DType::kF32)
    m.weights = Add(m.weights, Mul(DTypeBytes(act), count));
  m.optimizer = Mul(8, count);
  m.overhead = overhead;
  return m;
}

int64_t Overhead(DeviceKind device) {
  return device == DeviceKind::kCuda ? kCudaOverheadBytes : kCpuOverheadBytes;
}

}  // namespace

MemoryEstimate EstimateGptMemory(const GptConfig& c, int64_t micro_batch,
                                 int threads, DeviceKind device, DType act,
                                 AttentionState cuda_attention) {
  if (!ValidateGptConfig(c).ok()) {
    // Out of the engine's limits: the model's own sizes would overflow.
    MemoryEstimate m = Parameters(kSaturated, Overhead(device), act);
    m.activations = m.workspace = kSaturated;
    return m;
  }
  MemoryEstimate m = Parameters(GptParameterCount(c), Overhead(device), act);
  // The CUDA backend's flash attention keeps one log-sum-exp per query row
  // instead of the T x T probabilities (see AttentionState).
  const GptActivationSizes a = GptActivationFloats(
      c, c.seq_len,
      device == DeviceKind::kCuda ? cuda_attention
                                  : AttentionState::kProbabilities);
  // Activations, backward scratch, and the token and target ids; in double
  // and saturated, so a spec far beyond any device reads as huge rather
  // than wrapping around.
  const double bytes =
      static_cast<double>(std::max<int64_t>(micro_batch, 0)) *
      (a.Bytes(DTypeBytes(act)) + 4.0 * 2.0 * static_cast<double>(c.seq_len));
  m.activations = bytes < 0x1p60 ? static_cast<int64_t>(bytes) : kSaturated;
  m.workspace =
      device == DeviceKind::kCuda
          ? kCudaWorkspaceBytes
          : GemmWorkspace(std::max({4 * c.d_model, c.vocab_size, c.seq_len}),
                          threads);
  return m;
}

MemoryEstimate EstimateMlpMemory(const MlpConfig& c, int64_t micro_batch,
                                 int threads, DeviceKind device, DType dtype) {
  int64_t params = 0, widest = c.num_classes, act = 0;
  int64_t in = c.input_dim;
  std::vector<int64_t> outs(c.hidden.begin(), c.hidden.end());
  outs.push_back(c.num_classes);
  for (int64_t out : outs) {
    params = Add(params, Add(Mul(in, out), out));
    act = Add(act, Mul(2, out));  // output and its gradient
    widest = std::max({widest, in, out});
    in = out;
  }
  MemoryEstimate m = Parameters(params, Overhead(device), dtype);
  // Input, layer outputs and gradients in the activation dtype; a target, a
  // loss and an argmax hit, 4 bytes each (the fused classifier keeps no
  // probabilities).
  const int64_t per_example =
      Add(Mul(Add(c.input_dim, act), DTypeBytes(dtype)), 12);
  m.activations = Mul(micro_batch, per_example);
  m.workspace = device == DeviceKind::kCuda ? kCudaWorkspaceBytes
                                            : GemmWorkspace(widest, threads);
  return m;
}

}  // namespace trainyard::engine
