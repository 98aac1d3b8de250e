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

absl::Status CublasStatus(cublasStatus_t status, const char* expr,
                          const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string message = absl::StrCat(file, ":", line, ": ", expr, ": ",
                                           cublasLtGetStatusName(status), ": ",
                                           cublasLtGetStatusString(status));
  switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::ResourceExhaustedError(message);
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return absl::UnimplementedError(message);
    case CUBLAS_STATUS_INVALID_VALUE:
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace trainyard::engine::cuda
