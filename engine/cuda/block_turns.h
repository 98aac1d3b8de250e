// Turns between the blocks of one kernel launch, for sums that several
// blocks add to in a fixed order (deterministic: an add's order is the
// turns'): a counter in global memory says whose turn it is; a block waits
// until it reads its own number, adds, and passes the turn on by counting
// up. Also the loads, stores and adds of the sums themselves, which go
// through L2 only (an SM's L1 is not coherent with other SMs' writes).
//
// Progress needs every block a waiter waits for to be running or done:
// the kernels using turns wait only on blocks of a lower linear index,
// which the GPU dispatches first (the same assumption as FlashAttention-3's
// deterministic backward; CUDA does not promise it, but every GPU we run
// on dispatches in index order). The host emulation runs blocks in index
// order too, on several OS threads (launch.h); a wait there that lasts
// kEmulatedWaitLimitSeconds (a block before it failed) fails the kernel
// instead of hanging.
//
// A .h, not a .cuh: the kernel rewriter refuses inline PTX, and the
// preprocessor keeps the PTX from the emulation build. Pure device
// functions; thread-safe as their memory-model comments say.
#ifndef TRAINYARD_ENGINE_CUDA_BLOCK_TURNS_H_
#define TRAINYARD_ENGINE_CUDA_BLOCK_TURNS_H_

#include <cuda_runtime.h>

#include <cstring>
#if defined(TRAINYARD_CUDA_EMULATION)
#include <atomic>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#endif

namespace trainyard::engine::cuda::block_turns {

#if defined(TRAINYARD_CUDA_EMULATION)

inline constexpr int kEmulatedWaitLimitSeconds = 300;

// One thread of the block: returns once *turn == mine (acquire).
inline void WaitForTurn(const int* turn, int mine) {
  std::atomic_ref<int> t(*const_cast<int*>(turn));
  const auto start = std::chrono::steady_clock::now();
  while (t.load(std::memory_order_acquire) != mine) {
    if (std::chrono::steady_clock::now() - start >
        std::chrono::seconds(kEmulatedWaitLimitSeconds)) {
      ::trainyard::cuda_emulation::FailKernel(
          "waited " + std::to_string(kEmulatedWaitLimitSeconds) +
          " s for turn " + std::to_string(mine) + " (the counter reads " +
          std::to_string(t.load()) + "): a block before it never passed it");
    }
    std::this_thread::yield();
  }
}

// One thread of the block, after the block's writes and a __syncthreads:
// *turn += 1 (release).
inline void PassTurn(int* turn) {
  std::atomic_ref<int>(*turn).fetch_add(1, std::memory_order_release);
}

inline void LoadPairL2(const float* p, float (&v)[2]) { memcpy(v, p, 8); }
inline void StorePairL2(float* p, float a, float b) {
  const float v[2] = {a, b};
  memcpy(p, v, 8);
}

// red.global.add.f32's arithmetic: subnormal inputs and results flushed to
// zero of their sign. In a turn, no other block touches the pair.
inline float FlushSubnormal(float x) {
  return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.f, x) : x;
}
inline void AddPairL2(float* p, float a, float b) {
  float v[2];
  memcpy(v, p, 8);
  v[0] = FlushSubnormal(FlushSubnormal(v[0]) + FlushSubnormal(a));
  v[1] = FlushSubnormal(FlushSubnormal(v[1]) + FlushSubnormal(b));
  memcpy(p, v, 8);
}

#else  // the GPU

__device__ __forceinline__ void WaitForTurn(const int* turn, int mine) {
  int now;
  do {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];"
                 : "=r"(now)
                 : "l"(turn)
                 : "memory");
  } while (now != mine);
}

__device__ __forceinline__ void PassTurn(int* turn) {
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;"
               :
               : "l"(turn)
               : "memory");
}

// 8 bytes (8-byte aligned) through L2 only.
__device__ __forceinline__ void LoadPairL2(const float* p, float (&v)[2]) {
  const float2 x = __ldcg(reinterpret_cast<const float2*>(p));
  v[0] = x.x;
  v[1] = x.y;
}
__device__ __forceinline__ void StorePairL2(float* p, float a, float b) {
  __stcg(reinterpret_cast<float2*>(p), make_float2(a, b));
}

// *p += (a, b) at L2, 8 bytes (8-byte aligned), without the round trip of
// a load: a reduction the SM issues and moves on from. Round to nearest
// even, subnormal inputs and results flushed to zero (the PTX ISA's
// atom/red .add.f32 on global memory). Ordered after the adds of earlier
// turns by the turn's acquire, and before the next turn's by the fence
// before PassTurn.
__device__ __forceinline__ void AddPairL2(float* p, float a, float b) {
  asm volatile("red.relaxed.gpu.global.add.v2.f32 [%0], {%1, %2};"
               :
               : "l"(p), "f"(a), "f"(b)
               : "memory");
}

#endif

}  // namespace trainyard::engine::cuda::block_turns

#endif  // TRAINYARD_ENGINE_CUDA_BLOCK_TURNS_H_
