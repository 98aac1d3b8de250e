// Activation storage for the kernels: fp32 or bf16 (the backend's
// activation dtype, engine/core/backend.h). Kernels are templates over the
// storage type T and touch activations only through Ld (widen to fp32) and
// St (round to nearest even on store), so all math is fp32 whatever T is,
// and a bf16 value is rounded exactly once, where it is stored.
// DispatchAct turns a launcher's runtime `bf16` flag into T.
#ifndef TRAINYARD_ENGINE_CUDA_ACT_TYPE_CUH_
#define TRAINYARD_ENGINE_CUDA_ACT_TYPE_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace trainyard::engine::cuda {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float Ld(const float* p) { return *p; }
__device__ __forceinline__ float Ld(const bf16* p) {
  return __bfloat162float(*p);
}
__device__ __forceinline__ void St(float* p, float x) { *p = x; }
__device__ __forceinline__ void St(bf16* p, float x) {
  *p = __float2bfloat16_rn(x);
}

// Calls fn(T{}) with T = bf16 or float; fn returns the launch error.
template <typename Fn>
cudaError_t DispatchAct(bool is_bf16, Fn&& fn) {
  return is_bf16 ? fn(bf16{}) : fn(float{});
}

template <typename T>
T* As(void* p) {
  return static_cast<T*>(p);
}
template <typename T>
const T* As(const void* p) {
  return static_cast<const T*>(p);
}

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_ACT_TYPE_CUH_
