// See emulator_test_kernels.h. Written as CUDA, launched with every form
// of launch the rewrite takes: two, three and four configuration
// arguments, templates deduced and explicit, launches over several lines.
#include <cstdint>
#include <cstring>

#include "engine/cuda/emulation/emulator_test_kernels.h"
#include "engine/cuda/vec16.cuh"
#include "engine/cuda/warp_mma.h"
#include "engine/cuda/warpgroup_mma.h"

namespace trainyard::cuda_emulation::testing {
namespace {

__global__ void IndicesKernel(unsigned* out) {
  const unsigned threads = blockDim.x * blockDim.y;
  const unsigned block = blockIdx.y * gridDim.x + blockIdx.x;
  unsigned* o =
      out + 8 * (block * threads + threadIdx.y * blockDim.x + threadIdx.x);
  const unsigned v[8] = {threadIdx.x, threadIdx.y, blockIdx.x, blockIdx.y,
                         blockDim.x,  blockDim.y,  gridDim.x,  gridDim.y};
  for (int k = 0; k < 8; ++k) o[k] = v[k];
}

__global__ void RotateKernel(int* out, bool barrier) {
  __shared__ int s[256];
  const int t = threadIdx.x, n = blockDim.x;
  s[t] = t;
  if (barrier) __syncthreads();
  out[t] = s[(t + 1) % n];
}

template <typename T>
__global__ void WarpOpsKernel(T* out) {
  const int t = threadIdx.x, lane = t % 32;
  T* o = out + 8 * t;
  o[0] = static_cast<T>(__shfl_xor_sync(0xffffffffu, static_cast<float>(t), 5));
  const unsigned ballot = __ballot_sync(0xffffffffu, lane % 3 == 0);
  o[1] = ballot;
  o[2] = __any_sync(0xffffffffu, lane == 7);
  o[3] = __all_sync(0xffffffffu, lane < 40);
  o[4] = __popc(ballot);
  o[5] = __ffs(1 << (lane % 8));
  o[6] = __shfl_down_sync(0xffffffffu, t, 3);
  o[7] = static_cast<T>(__shfl_sync(0xffffffffu, static_cast<double>(t), 2));
}

__global__ void DivergentBarrierKernel() {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
}

__global__ void DeadlockKernel() {
  if (threadIdx.x < 16) {
    __shfl_xor_sync(0xffffffffu, 1, 1);
  } else {
    __syncthreads();
  }
}

__global__ void ExitedLaneKernel(float* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.f, 1);
}

// The bf16 pair at p[0], p[stride] as one register (p[0] low).
__device__ uint32_t Pair(const __nv_bfloat16* p, int stride) {
  uint16_t lo, hi;
  memcpy(&lo, p, 2);
  memcpy(&hi, p + stride, 2);
  return static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16;
}

__global__ void MmaKernel(float* c, const __nv_bfloat16* a,
                          const __nv_bfloat16* b, bool lane_dependent) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  // warp_mma.h's fragment layouts, from row-major a (16x16), b (16x8).
  const uint32_t fa[4] = {
      Pair(a + g * 16 + 2 * t, 1), Pair(a + (g + 8) * 16 + 2 * t, 1),
      Pair(a + g * 16 + 2 * t + 8, 1), Pair(a + (g + 8) * 16 + 2 * t + 8, 1)};
  const uint32_t fb[2] = {Pair(b + 2 * t * 8 + g, 8),
                          Pair(b + (2 * t + 8) * 8 + g, 8)};
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  engine::cuda::warp_mma::Mma16816(acc, fa, fb);
  if (lane_dependent && lane == 3)
    engine::cuda::warp_mma::Mma16816(acc, fa, fb);
  __syncwarp();
  for (int e = 0; e < 4; ++e) c[(g + 8 * (e / 2)) * 8 + 2 * t + e % 2] = acc[e];
}

__global__ void WarpgroupMmaKernel(float* before, float* after,
                                   WarpgroupMmaCase how) {
  namespace wg = engine::cuda::warpgroup_mma;
  extern __shared__ __align__(128) uint16_t dynamic_b[];
  __shared__ __align__(128) uint16_t static_b[32 * 16];
  uint16_t* b =
      how == WarpgroupMmaCase::kBInStaticShared ? static_b : dynamic_b;
  const int t = threadIdx.x;
  for (int i = t; i < 32 * 16; i += blockDim.x) b[i] = 0x3F80;  // 1.0
  __syncthreads();
  const int group = t / 128;
  const uint32_t value = how == WarpgroupMmaCase::kWarpgroupsApart
                             ? (group == 0 ? 0x3F803F80u : 0x40004000u)
                             : 0x3F803F80u;  // (1, 1) or (2, 2)
  uint32_t a[4] = {value, value, value, value};
  float acc[4][4];
  wg::Fence();
  if (how == WarpgroupMmaCase::kDivergentInAWarpgroup && t % 128 < 64) {
    wg::MmaAsync<32, 0>(acc, a, wg::Descriptor(b, 128, 256), 0);
  } else {
    wg::MmaAsync<32, 0>(acc, a, wg::Descriptor(b, 128, 256), 0);
  }
  before[t] = acc[0][0];
  wg::Commit();
  if (how == WarpgroupMmaCase::kWarpgroupsApart && group % 2 == 1) {
    wg::MmaAsync<32, 0>(acc, a, wg::Descriptor(b, 128, 256), 1);
    wg::Commit();
  }
  if (how == WarpgroupMmaCase::kBChangedBeforeWait) {
    __syncthreads();
    if (t == 0) b[0] = 0x4000;  // 2.0
    __syncthreads();
  }
  if (how == WarpgroupMmaCase::kAChangedBeforeWait && t == 5) {
    a[2] = 0x40004000u;  // (2.0, 2.0): the next product's A, too early
  }
  wg::Wait<0>();
  wg::FenceOperand(acc);
  after[t] = acc[0][0];
}

__global__ void PacksKernel(__nv_bfloat16* narrow, float* wide,
                            const __nv_bfloat16* in, char* raw_dst,
                            const char* raw_src) {
  using engine::cuda::kPack;
  const int t = threadIdx.x;
  float v[kPack<__nv_bfloat16>];
  engine::cuda::LdPack(in + 8 * t, v);
  engine::cuda::StPack(narrow + 8 * t, v);
  float lo[kPack<float>], hi[kPack<float>];
  for (int k = 0; k < 4; ++k) {
    lo[k] = v[k];
    hi[k] = v[4 + k];
  }
  engine::cuda::StPack(wide + 8 * t, lo);
  engine::cuda::StPack(wide + 8 * t + 4, hi);
  engine::cuda::Copy16(raw_dst + 16 * t, raw_src + 16 * t);
}

__global__ void TrapKernel() {
  if (threadIdx.x == 7) __trap();
  __syncthreads();
}

__global__ void DynamicSharedKernel(int* out) {
  extern __shared__ __align__(16) int buf[];
  if (threadIdx.x == 0) {
    out[0] = static_cast<int>(reinterpret_cast<uintptr_t>(buf) % 64);
    out[1] = buf[0];
    buf[0] = 5;
  }
  __syncthreads();
  if (threadIdx.x == 31) out[2] = buf[0];
}

__global__ void SharedPerBlockKernel(int* out) {
  __shared__ int value;
  if (blockIdx.x == 0 && threadIdx.x == 0) value = 42;
  __syncthreads();
  if (threadIdx.x == 0) out[blockIdx.x] = value;
}

__global__ void EmptyKernel() {}

__global__ void NestedLaunchKernel() {
  if (threadIdx.x == 0) EmptyKernel<<<1, 32>>>();
}

}  // namespace

cudaError_t LaunchIndices(unsigned* out, dim3 grid, dim3 block) {
  IndicesKernel<<<grid, block>>>(out);
  return cudaGetLastError();
}

cudaError_t LaunchRotate(int* out, int threads, bool barrier) {
  RotateKernel<<<1, threads, 0>>>(out, barrier);
  return cudaGetLastError();
}

cudaError_t LaunchWarpOps(int64_t* out) {
  WarpOpsKernel<<<1, 64, 0, nullptr>>>(out);
  return cudaGetLastError();
}

cudaError_t LaunchDivergentBarrier() {
  DivergentBarrierKernel<<<1, 64>>>();
  return cudaGetLastError();
}

cudaError_t LaunchDeadlock() {
  DeadlockKernel<<<1, 32>>>();
  return cudaGetLastError();
}

cudaError_t LaunchExitedLane(float* out) {
  ExitedLaneKernel<<<1, 32>>>(out);
  return cudaGetLastError();
}

cudaError_t LaunchMma(float* c, const __nv_bfloat16* a, const __nv_bfloat16* b,
                      int threads, bool lane_dependent) {
  MmaKernel<<<dim3(1), dim3(threads), 0, nullptr>>>(c, a, b, lane_dependent);
  return cudaGetLastError();
}

cudaError_t LaunchWarpgroupMma(float* before, float* after, int threads,
                               WarpgroupMmaCase how) {
  WarpgroupMmaKernel<<<1, threads, 32 * 16 * 2>>>(before, after, how);
  return cudaGetLastError();
}

cudaError_t LaunchPacks(__nv_bfloat16* narrow, int narrow_offset, float* wide,
                        const __nv_bfloat16* in, int in_offset, void* raw_dst,
                        const void* raw_src) {
  PacksKernel<<<1, 32>>>(narrow + narrow_offset, wide, in + in_offset,
                         static_cast<char*>(raw_dst),
                         static_cast<const char*>(raw_src));
  return cudaGetLastError();
}

cudaError_t LaunchTrap() {
  TrapKernel<<<2, 32>>>();
  return cudaGetLastError();
}

cudaError_t LaunchDynamicShared(int* out, size_t bytes, bool opt_in,
                                int carveout) {
  cudaError_t e = cudaFuncSetAttribute(
      DynamicSharedKernel, cudaFuncAttributePreferredSharedMemoryCarveout,
      carveout);
  if (e != cudaSuccess) return e;
  if (opt_in) {
    e = cudaFuncSetAttribute(DynamicSharedKernel,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(bytes));
    if (e != cudaSuccess) return e;
  }
  DynamicSharedKernel<<<1, 32, bytes>>>(out);
  return cudaGetLastError();
}

cudaError_t LaunchSharedPerBlock(int* out, int blocks) {
  SharedPerBlockKernel<<<blocks, 32>>>(out);
  return cudaGetLastError();
}

cudaError_t LaunchEmpty(dim3 grid, dim3 block) {
  ::trainyard::cuda_emulation::testing::EmptyKernel<<<grid, block>>>();
  return cudaGetLastError();
}

cudaError_t LaunchNested() {
  NestedLaunchKernel<<<1, 32>>>();
  return cudaGetLastError();
}

}  // namespace trainyard::cuda_emulation::testing
