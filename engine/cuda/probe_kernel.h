// The device probe's kernel launcher, kept free of Abseil so nvcc compiles
// only plain CUDA. Thread-safe.
#ifndef TRAINYARD_ENGINE_CUDA_PROBE_KERNEL_H_
#define TRAINYARD_ENGINE_CUDA_PROBE_KERNEL_H_

#include <cuda_runtime_api.h>

namespace trainyard::engine::cuda {

// Writes out[i] = i * i + 1 for i < n on the current device (`out` is device
// memory) and returns the launch error, if any; launches nothing for n <= 0.
cudaError_t LaunchProbeKernel(int* out, int n);

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_PROBE_KERNEL_H_
