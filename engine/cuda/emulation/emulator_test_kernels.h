// Small kernels for the emulator's own tests (emulator_test.cc), each
// built to exercise one of its features or to break one of its checks on
// purpose. They exist only in emulation: emulator_test_kernels.cu goes
// through rewrite_kernels.py like the project's kernels. Device pointers
// are host memory there. Thread-safe.
#ifndef TRAINYARD_ENGINE_CUDA_EMULATION_EMULATOR_TEST_KERNELS_H_
#define TRAINYARD_ENGINE_CUDA_EMULATION_EMULATOR_TEST_KERNELS_H_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace trainyard::cuda_emulation::testing {

// out[8 * t + k] for each thread t (x fastest, then y, then blocks): its
// threadIdx.x/y, blockIdx.x/y, blockDim.x/y, gridDim.x/y.
cudaError_t LaunchIndices(unsigned* out, dim3 grid, dim3 block);

// threads threads: out[t] = what thread t reads at s[(t + 1) % threads]
// after every thread t stored t into s[t]; with or without a barrier
// between. threads <= 256.
cudaError_t LaunchRotate(int* out, int threads, bool barrier);

// 64 threads, per thread t (lane l) out[8 t ..]: the xor-5 shuffle of
// float(t), a ballot of l % 3 == 0, any(l == 7), all(l < 40),
// __popc of the ballot, __ffs(1 << (l % 8)), shfl_down by 3 of t, and the
// double shuffle from lane 2 of its warp (as unsigned).
cudaError_t LaunchWarpOps(int64_t* out);

// Each breaks a check: __syncthreads in both branches of a divergent if;
// half a warp in a shuffle while the other half waits at __syncthreads;
// a lane that ends while the rest of its warp shuffles with it.
cudaError_t LaunchDivergentBarrier();
cudaError_t LaunchDeadlock();
cudaError_t LaunchExitedLane(float* out);

// `threads` threads (32: one warp): c (16x8, row-major) = a b through
// engine/cuda/warp_mma.h's Mma16816, a (16x16) and b (16x8) row-major,
// each lane building its fragments from them. lane_dependent: lane 3 runs
// one more mma than the others.
cudaError_t LaunchMma(float* c, const __nv_bfloat16* a, const __nv_bfloat16* b,
                      int threads, bool lane_dependent);

// How LaunchWarpgroupMma's kernel breaks the contract, if it does: B in
// static shared memory, or B changed between the issue and the Wait; or
// kWarpgroupsApart: warpgroup w's A is all w + 1, and the odd warpgroups
// run a second product accumulating onto the first (so 16 (w + 1), or
// twice that), while the even ones wait at no barrier of theirs; or
// kDivergentInAWarpgroup: the first two warps of a warpgroup issue the
// product from another line than the last two.
enum class WarpgroupMmaCase {
  kPlain,
  kBInStaticShared,
  kBChangedBeforeWait,
  kAChangedBeforeWait,
  kWarpgroupsApart,
  kDivergentInAWarpgroup
};

// `threads` threads (128: one warpgroup; up to 256) through
// engine/cuda/warpgroup_mma.h: one 64 x 32 x 16 product of all-ones bf16
// operands (B, K-major, in dynamic shared memory, but as `how` says)
// committed and waited for. Thread t writes its first accumulator to
// before[t] right after the issue and to after[t] after the wait (16
// each).
cudaError_t LaunchWarpgroupMma(float* before, float* after, int threads,
                               WarpgroupMmaCase how);

// 32 threads, each moving one pack through engine/cuda/vec16.cuh: thread t
// loads the 8 bf16 at in + in_offset + 8 t (LdPack), stores them as bf16 at
// narrow + narrow_offset + 8 t and as fp32 at wide + 8 t (StPack), and
// copies the 16 bytes at raw_src + 16 t to raw_dst + 16 t (Copy16).
cudaError_t LaunchPacks(__nv_bfloat16* narrow, int narrow_offset, float* wide,
                        const __nv_bfloat16* in, int in_offset, void* raw_dst,
                        const void* raw_src);

// Thread 7 calls __trap().
cudaError_t LaunchTrap();

// One block of 32 threads with `bytes` of dynamic shared memory (opting
// in first when opt_in): out[0] = the base address modulo 64, out[1] =
// the first int read before any write, out[2] = the last int after thread
// 0 wrote it. The kernel's shared-memory carveout preference is set to
// `carveout` first (its error returned).
cudaError_t LaunchDynamicShared(int* out, size_t bytes, bool opt_in,
                                int carveout = cudaSharedmemCarveoutDefault);

// blocks blocks of 32: block 0 stores 42 into a __shared__ int, then every
// block's thread 0 writes it to out[block].
cudaError_t LaunchSharedPerBlock(int* out, int blocks);

// A launch of grid x block threads doing nothing.
cudaError_t LaunchEmpty(dim3 grid, dim3 block);

// A kernel whose thread 0 launches another (not emulated).
cudaError_t LaunchNested();

}  // namespace trainyard::cuda_emulation::testing

#endif  // TRAINYARD_ENGINE_CUDA_EMULATION_EMULATOR_TEST_KERNELS_H_
