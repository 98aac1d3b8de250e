// See cuda_status.h.
#include "engine/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace trainyard::engine::cuda {

absl::Status CudaStatus(cudaError_t error, const char* expr, const char* file,
                        int line) {
  if (error == cudaSuccess) return absl::OkStatus();
  const std::string message =
      absl::StrCat(file, ":", line, ": ", expr, ": ", cudaGetErrorName(error),
                   ": ", cudaGetErrorString(error));
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace trainyard::engine::cuda
