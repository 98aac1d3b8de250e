// CUDA runtime and cuBLAS errors as absl::Status. A failed call becomes a
// status that carries the call site (file:line), the expression, the
// error's name and the library's own description, so the message alone says
// what broke where; only main() decides to exit.
//
//   YARD_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr, bytes));
//   YARD_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&handle));
//
// Thread-safe (stateless).
#ifndef TRAINYARD_ENGINE_CUDA_CUDA_STATUS_H_
#define TRAINYARD_ENGINE_CUDA_CUDA_STATUS_H_

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace trainyard::engine::cuda {

// OK for cudaSuccess. Otherwise RESOURCE_EXHAUSTED for out-of-memory,
// UNAVAILABLE when no usable device or driver is present, INTERNAL else;
// the message reads "FILE:LINE: EXPR: cudaErrorName: description".
absl::Status CudaStatus(cudaError_t error, const char* expr, const char* file,
                        int line);

// OK for CUBLAS_STATUS_SUCCESS. RESOURCE_EXHAUSTED for allocation failures,
// UNIMPLEMENTED when no algorithm supports the problem, INVALID_ARGUMENT for
// bad values, INTERNAL else; the message reads
// "FILE:LINE: EXPR: CUBLAS_STATUS_...: description".
absl::Status CublasStatus(cublasStatus_t status, const char* expr,
                          const char* file, int line);

}  // namespace trainyard::engine::cuda

#define YARD_CUDA_RETURN_IF_ERROR(expr)                                     \
  do {                                                                      \
    const cudaError_t yard_cuda_error_ = (expr);                            \
    if (yard_cuda_error_ != cudaSuccess) {                                  \
      return ::trainyard::engine::cuda::CudaStatus(yard_cuda_error_, #expr, \
                                                   __FILE__, __LINE__);     \
    }                                                                       \
  } while (0)

#define YARD_CUBLAS_RETURN_IF_ERROR(expr)                  \
  do {                                                     \
    const cublasStatus_t yard_cublas_status_ = (expr);     \
    if (yard_cublas_status_ != CUBLAS_STATUS_SUCCESS) {    \
      return ::trainyard::engine::cuda::CublasStatus(      \
          yard_cublas_status_, #expr, __FILE__, __LINE__); \
    }                                                      \
  } while (0)

#endif  // TRAINYARD_ENGINE_CUDA_CUDA_STATUS_H_
