// Memory estimates. See memory_estimate.h; the sizes mirror the allocations
// in gpt.cc, mlp.cc and adamw.cc.
#include "engine/core/memory_estimate.h"

#include <algorithm>

namespace trainyard::engine {
namespace {

// The CPU GEMM's packing buffers (engine/cpu/gemm.cc): op(B) panels of
// 256 x 16 floats across the widest output, and one 72 x 256 block of op(A)
// per thread.
int64_t GemmWorkspace(int64_t widest_n, int threads) {
  const int64_t panels = (widest_n + 15) / 16;
  return (panels * 256 * 16 + int64_t{threads} * 72 * 256) * 4;
}

MemoryEstimate Parameters(int64_t count, int64_t overhead) {
  MemoryEstimate m;
  m.weights = m.gradients = 4 * count;
  m.optimizer = 8 * count;
  m.overhead = overhead;
  return m;
}

int64_t Overhead(DeviceKind device) {
  return device == DeviceKind::kCuda ? kCudaOverheadBytes : kCpuOverheadBytes;
}

}  // namespace

MemoryEstimate EstimateGptMemory(const GptConfig& c, int64_t micro_batch,
                                 int threads, DeviceKind device) {
  MemoryEstimate m = Parameters(GptParameterCount(c), Overhead(device));
  const GptActivationSizes a = GptActivationFloats(c, c.seq_len);
  // Activations, backward scratch, and the token and target ids; in double
  // and saturated, so a spec far beyond any device reads as huge rather
  // than wrapping around.
  const double bytes = 4.0 * static_cast<double>(micro_batch) *
                       (static_cast<double>(a.per_sequence) +
                        static_cast<double>(a.grad_per_sequence) +
                        2.0 * static_cast<double>(c.seq_len));
  m.activations =
      bytes < 0x1p60 ? static_cast<int64_t>(bytes) : int64_t{1} << 60;
  m.workspace = GemmWorkspace(
      std::max({4 * c.d_model, c.vocab_size, c.seq_len}), threads);
  return m;
}

MemoryEstimate EstimateMlpMemory(const MlpConfig& c, int64_t micro_batch,
                                 int threads, DeviceKind device) {
  int64_t params = 0, widest = c.num_classes, act = 0;
  int64_t in = c.input_dim;
  std::vector<int64_t> outs(c.hidden.begin(), c.hidden.end());
  outs.push_back(c.num_classes);
  for (int64_t out : outs) {
    params += in * out + out;
    act += 2 * out;  // output and its gradient
    widest = std::max({widest, in, out});
    in = out;
  }
  MemoryEstimate m = Parameters(params, Overhead(device));
  // Input, targets, layer outputs and gradients, probabilities, losses.
  m.activations = micro_batch * (c.input_dim + 1 + act + c.num_classes + 1) * 4;
  m.workspace = GemmWorkspace(widest, threads);
  return m;
}

}  // namespace trainyard::engine
