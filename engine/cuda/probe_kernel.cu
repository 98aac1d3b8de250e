// The probe kernel: trivial work whose result depends on every thread, so a
// missing or mismatched device image (e.g. not built for this GPU's
// architecture) shows up as a launch error or wrong values.
#include "engine/cuda/probe_kernel.h"

namespace trainyard::engine::cuda {
namespace {

__global__ void ProbeKernel(int* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i * i + 1;
}

}  // namespace

cudaError_t LaunchProbeKernel(int* out, int n) {
  if (n <= 0) return cudaSuccess;  // nothing to write, as other launchers
  constexpr int kThreads = 128;
  ProbeKernel<<<(n + kThreads - 1) / kThreads, kThreads>>>(out, n);
  return cudaGetLastError();
}

}  // namespace trainyard::engine::cuda
