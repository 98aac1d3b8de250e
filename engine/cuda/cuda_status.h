// CUDA runtime errors as absl::Status. A failed call becomes a status that
// carries the call site (file:line), the expression, the error's name and
// cudaGetErrorString's text, so the message alone says what broke where;
// only main() decides to exit.
//
//   YARD_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr, bytes));
//
// Thread-safe (stateless).
#ifndef TRAINYARD_ENGINE_CUDA_CUDA_STATUS_H_
#define TRAINYARD_ENGINE_CUDA_CUDA_STATUS_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace trainyard::engine::cuda {

// OK for cudaSuccess. Otherwise RESOURCE_EXHAUSTED for out-of-memory,
// UNAVAILABLE when no usable device or driver is present, INTERNAL else;
// the message reads "FILE:LINE: EXPR: cudaErrorName: description".
absl::Status CudaStatus(cudaError_t error, const char* expr, const char* file,
                        int line);

}  // namespace trainyard::engine::cuda

#define YARD_CUDA_RETURN_IF_ERROR(expr)                                     \
  do {                                                                      \
    const cudaError_t yard_cuda_error_ = (expr);                            \
    if (yard_cuda_error_ != cudaSuccess) {                                  \
      return ::trainyard::engine::cuda::CudaStatus(yard_cuda_error_, #expr, \
                                                   __FILE__, __LINE__);     \
    }                                                                       \
  } while (0)

#endif  // TRAINYARD_ENGINE_CUDA_CUDA_STATUS_H_
