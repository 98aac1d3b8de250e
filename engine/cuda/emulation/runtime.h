// The CUDA runtime as the host emulation of CUDA kernels provides it, under
// CUDA's names: the qualifiers (__global__, __device__, ...), the device
// built-ins the project's kernels use (__syncthreads, __syncwarp, the
// *_sync warp functions, __popc, __ffs, __trap) and the host API they and
// their tests call (cudaMalloc, cudaMemcpy, cudaGetLastError,
// cudaFuncSetAttribute, streams, events, devices, ...). The shim headers
// cuda_include/cuda_runtime.h and cuda_runtime_api.h include this.
//
// The emulation is a test tool: it checks the LOGIC of kernels (indexing,
// masking, synchronization, determinism, alignment), compiled as C++ for
// the host. It does not reproduce the GPU's rounding (no fused
// multiply-adds, the host's expf and logf, a fixed mma summation order)
// nor its timing. "Device" memory is host memory; every copy and launch is
// synchronous. __shared__ variables are rewritten by rewrite_kernels.py
// into BlockShared / DynamicSharedArray below; a __shared__ left in a
// source fails to compile.
//
// TRAINYARD_CUDA_EMULATION is defined for kernel sources that need to
// tell the emulation from the GPU: engine/cuda/vec16.cuh, where the
// emulation checks the alignment of 16-byte accesses, and
// engine/cuda/warp_mma.h, which emulates the tensor-core instructions;
// and for tests that look at launches (launch.h: SetLaunchObserver).
//
// Thread-safety: as launch.h.
#ifndef TRAINYARD_ENGINE_CUDA_EMULATION_RUNTIME_H_
#define TRAINYARD_ENGINE_CUDA_EMULATION_RUNTIME_H_

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <source_location>
#include <string>
#include <type_traits>

#include "engine/cuda/emulation/block_runner.h"
#include "engine/cuda/emulation/cuda_types.h"
#include "engine/cuda/emulation/launch.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

#define TRAINYARD_CUDA_EMULATION 1

namespace trainyard::cuda_emulation {

// The block's instance of a __shared__ variable of type T (an array type
// for arrays). Tag is a lambda's closure type, unique to the declaration
// and to each instantiation of the template around it.
template <typename T, typename Tag>
T& BlockShared(Tag, size_t align = alignof(T)) {
  static char key;
  return *static_cast<T*>(StaticShared(&key, sizeof(T), align));
}

// `extern __shared__ T name[];`
template <typename T>
T* DynamicSharedArray(size_t align = alignof(T)) {
  return static_cast<T*>(DynamicShared(align));
}

template <typename T>
uint64_t ToLaneBits(T v) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8,
                "warp functions move values of at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}

template <typename T>
T FromLaneBits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

template <typename T>
T Shuffle(int op, unsigned mask, T v, int param, int width,
          const std::source_location& site) {
  if (width != 32) FailKernel("warp shuffles of width other than 32");
  return FromLaneBits<T>(WarpCollective(op, mask, ToLaneBits(v), param, site));
}

// A vector access of `bytes` bytes at p from the call at `site`: fails the
// launch unless p is aligned to `bytes`, as the GPU faults on a misaligned
// vector access. `what` names the access ("16-byte load from").
inline void CheckVectorAccess(const char* what, const void* p, size_t bytes,
                              const std::source_location& site) {
  if (reinterpret_cast<uintptr_t>(p) % bytes == 0) return;
  char address[32];
  std::snprintf(address, sizeof address, "%p", p);
  FailKernel(std::string(what) + " " + address + " at " + site.file_name() +
             ":" + std::to_string(site.line()) + ": not " +
             std::to_string(bytes) + "-byte aligned");
}

}  // namespace trainyard::cuda_emulation

// ------------------------------------------------------ device built-ins

inline void __syncthreads(
    std::source_location site = std::source_location::current()) {
  ::trainyard::cuda_emulation::SyncThreads(site);
}

inline void __syncwarp(
    unsigned mask = 0xffffffffu,
    std::source_location site = std::source_location::current()) {
  ::trainyard::cuda_emulation::WarpCollective(
      ::trainyard::cuda_emulation::kWarpSync, mask, 0, 0, site);
}

template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32,
                  std::source_location site = std::source_location::current()) {
  return ::trainyard::cuda_emulation::Shuffle(
      ::trainyard::cuda_emulation::kWarpShflXor, mask, v, lane_mask, width,
      site);
}

template <typename T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32,
              std::source_location site = std::source_location::current()) {
  return ::trainyard::cuda_emulation::Shuffle(
      ::trainyard::cuda_emulation::kWarpShfl, mask, v, src_lane, width, site);
}

template <typename T>
T __shfl_down_sync(
    unsigned mask, T v, unsigned delta, int width = 32,
    std::source_location site = std::source_location::current()) {
  return ::trainyard::cuda_emulation::Shuffle(
      ::trainyard::cuda_emulation::kWarpShflDown, mask, v,
      static_cast<int>(delta), width, site);
}

template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32,
                 std::source_location site = std::source_location::current()) {
  return ::trainyard::cuda_emulation::Shuffle(
      ::trainyard::cuda_emulation::kWarpShflUp, mask, v,
      static_cast<int>(delta), width, site);
}

inline unsigned __ballot_sync(
    unsigned mask, int predicate,
    std::source_location site = std::source_location::current()) {
  return static_cast<unsigned>(::trainyard::cuda_emulation::WarpCollective(
      ::trainyard::cuda_emulation::kWarpBallot, mask, predicate != 0, 0, site));
}

inline int __any_sync(
    unsigned mask, int predicate,
    std::source_location site = std::source_location::current()) {
  return static_cast<int>(::trainyard::cuda_emulation::WarpCollective(
      ::trainyard::cuda_emulation::kWarpAny, mask, predicate != 0, 0, site));
}

inline int __all_sync(
    unsigned mask, int predicate,
    std::source_location site = std::source_location::current()) {
  return static_cast<int>(::trainyard::cuda_emulation::WarpCollective(
      ::trainyard::cuda_emulation::kWarpAll, mask, predicate != 0, 0, site));
}

// The intrinsics that fix a float operation's rounding (the compiler never
// fuses them into or out of a multiply-add); the host rounds the same.
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) {
  return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x));
}

[[noreturn]] inline void __trap() {
  ::trainyard::cuda_emulation::FailKernel("__trap()");
}

// Blocks may run concurrently on different OS threads.
inline void __threadfence() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

// ------------------------------------------------------------- host API

inline cudaError_t cudaGetLastError() {
  return ::trainyard::cuda_emulation::TakeLastError();
}

inline cudaError_t cudaPeekAtLastError() {
  return ::trainyard::cuda_emulation::PeekLastError();
}

const char* cudaGetErrorName(cudaError_t e);
const char* cudaGetErrorString(cudaError_t e);

template <typename T>
cudaError_t cudaFuncSetAttribute(T* kernel, cudaFuncAttribute attr, int value) {
  return ::trainyard::cuda_emulation::SetKernelAttribute(
      reinterpret_cast<const void*>(kernel), attr, value);
}

cudaError_t cudaMalloc(void** ptr, size_t bytes);
// cuda_runtime.h's C++ overload, for typed pointers.
template <typename T>
cudaError_t cudaMalloc(T** ptr, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes,
                       cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes,
                            cudaMemcpyKind kind, cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* ptr, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes,
                            cudaStream_t stream = nullptr);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);

// Events. Every stream is synchronous (its work is done when the call that
// queued it returns), so an event is complete as soon as it is recorded:
// cudaEventQuery never answers cudaErrorNotReady, cudaEventSynchronize
// and cudaStreamWaitEvent return at once. What is checked: the flags, and
// that the event is one cudaEventCreate* made and cudaEventDestroy has not
// freed (else cudaErrorInvalidResourceHandle, as CUDA says for a null
// one). cudaEventElapsedTime gives the host time between the two records
// (the emulated work's own time: not a GPU figure), with CUDA's errors for
// an event without timing or never recorded.
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
// cuda_runtime.h's C++ overload.
inline cudaError_t cudaEventCreate(cudaEvent_t* event, unsigned flags) {
  return cudaEventCreateWithFlags(event, flags);
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                unsigned flags = 0);

// The emulated devices: ordinals 0 .. N-1, N from the environment variable
// YARD_EMULATION_DEVICES (1 to 8, default 1; any other value counts as 1,
// with one line on stderr), so that tests can run several GPU ranks in one
// process. They differ in their ordinal and UUID only: memory is ONE pool
// that cudaMemGetInfo reports for every device, of
// YARD_EMULATION_DEVICE_MIB MiB (1 to 2^20, default 16 GiB; any other
// value counts as the default, with one line on stderr) so that tests can
// give a program a small device,
// though each block remembers the device current when cudaMalloc made it
// (DeviceHolding, for the NCCL stand-in). The current device is per host
// thread, as in CUDA. The driver reads as this runtime's version.
#define CUDART_VERSION 13000
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDriverGetVersion(int* version);
cudaError_t cudaRuntimeGetVersion(int* version);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);

namespace trainyard::cuda_emulation {
inline constexpr size_t kDefaultEmulatedDeviceBytes = size_t{16} << 30;
inline constexpr const char* kEmulatedDeviceName = "CUDA host emulation";
inline constexpr int kMaxEmulatedDevices = 8;

// The device count YARD_EMULATION_DEVICES=`value` asks for: 1 when value
// is null; else 1 to kMaxEmulatedDevices, or 1 with `*problem` saying why
// the value is not one.
int ParseEmulatedDeviceCount(const char* value, std::string* problem);

// The device bytes YARD_EMULATION_DEVICE_MIB=`value` asks for: the
// default when value is null; else 1 to 2^20 MiB, or the default with
// `*problem` saying why the value is not one.
size_t ParseEmulatedDeviceBytes(const char* value, std::string* problem);

// The device whose cudaMalloc block holds all of [p, p + bytes), or -1
// when no live block does.
int DeviceHolding(const void* p, size_t bytes);
}  // namespace trainyard::cuda_emulation

#endif  // TRAINYARD_ENGINE_CUDA_EMULATION_RUNTIME_H_
