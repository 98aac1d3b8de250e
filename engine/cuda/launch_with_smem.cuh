// LaunchWithSmem: a kernel launch with dynamic shared memory past the
// default 48 KB, and all of an SM's L1 given to shared memory. Plain CUDA
// (and its emulation).
#ifndef TRAINYARD_ENGINE_CUDA_LAUNCH_WITH_SMEM_CUH_
#define TRAINYARD_ENGINE_CUDA_LAUNCH_WITH_SMEM_CUH_

#include <cuda_runtime.h>

#include <cstddef>

namespace trainyard::engine::cuda {

// Kernels above 48 KB of dynamic shared memory must opt in, per device;
// the call is cheap, so every launch makes it for the current device. All
// of an SM's L1 as shared memory: the blocks an SM is meant to hold need
// more than 200 KB of it (three or four attention key or query sides of
// 56-64 KB, five warpgroup forwards of 41 KB, two classifier rows of 100
// KB), and they read global memory past L1 (cp.async) or once.
template <typename Kernel, typename... Args>
cudaError_t LaunchWithSmem(Kernel kernel, size_t bytes, dim3 grid, int threads,
                           cudaStream_t stream, Args... args) {
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(bytes));
  if (e != cudaSuccess) return e;
  e = cudaFuncSetAttribute(kernel,
                           cudaFuncAttributePreferredSharedMemoryCarveout,
                           cudaSharedmemCarveoutMaxShared);
  if (e != cudaSuccess) return e;
  kernel<<<grid, threads, bytes, stream>>>(args...);
  return cudaGetLastError();
}

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_LAUNCH_WITH_SMEM_CUH_
