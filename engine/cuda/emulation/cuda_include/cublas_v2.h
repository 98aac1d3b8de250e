// Shim: the CUDA emulation's stand-in for cuBLAS's cublas_v2.h: the plain
// names of the classic calls, mapped onto their _v2 entry points as the
// real header maps them (cublas_api.h declares those). On the include path
// of emulation targets only, ahead of any real CUDA include directory.
#ifndef TRAINYARD_EMULATION_SHIM_CUBLAS_V2_H_
#define TRAINYARD_EMULATION_SHIM_CUBLAS_V2_H_

#if defined(CUBLAS_API_H_) || defined(CUBLAS_V2_H_) || defined(CUBLAS_H_)
#error "a real cuBLAS header is included beside the CUDA emulation's"
#endif

#include <cublas_api.h>

#define cublasCreate cublasCreate_v2
#define cublasDestroy cublasDestroy_v2
#define cublasSetStream cublasSetStream_v2
#define cublasSetWorkspace cublasSetWorkspace_v2
#define cublasSgemm cublasSgemm_v2

#endif  // TRAINYARD_EMULATION_SHIM_CUBLAS_V2_H_
