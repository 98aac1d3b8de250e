// The CUDA devices this process can see (after CUDA_VISIBLE_DEVICES), for
// the worker's device discovery and the engine's backend choice, and a probe
// that runs a kernel on one of them to prove the build's device code (sm_90)
// loads there. Thread-safe.
#ifndef TRAINYARD_ENGINE_CUDA_DEVICE_QUERY_H_
#define TRAINYARD_ENGINE_CUDA_DEVICE_QUERY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainyard::engine::cuda {

struct CudaDeviceInfo {
  int ordinal = 0;
  std::string name;  // "NVIDIA H100 80GB HBM3"
  std::string
      uuid;  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi
  int64_t total_memory_bytes = 0;
  int compute_major = 0;
  int compute_minor = 0;
  int multiprocessors = 0;
};

// Every visible device. An empty list, not an error, when the machine has
// no CUDA driver or no device; FAILED_PRECONDITION when the driver is too
// old for this build's CUDA runtime; an error for anything else that fails.
absl::StatusOr<std::vector<CudaDeviceInfo>> ListCudaDevices();

// Launches a small kernel on device `ordinal` and checks what it wrote.
absl::Status ProbeCudaDevice(int ordinal);

// "GPU-" + the 16 bytes as 8-4-4-4-12 lowercase hex.
std::string FormatGpuUuid(const unsigned char bytes[16]);

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_DEVICE_QUERY_H_
