// CUDA's runtime types (dim3, uint3, cudaError_t, cudaStream_t, ...) and
// the per-thread built-in variables (threadIdx, blockIdx, blockDim,
// gridDim) for the host emulation of CUDA kernels, under their CUDA names
// in the global namespace so kernel sources compile unchanged. The
// built-ins are thread_local: the emulation sets them on the OS thread
// running a block before it resumes each emulated thread (block_runner.h).
// Error codes keep CUDA's numeric values. Streams and events are handles
// the emulated host API (runtime.h) makes; work on a stream is done before
// the call that queues it returns.
#ifndef TRAINYARD_ENGINE_CUDA_EMULATION_CUDA_TYPES_H_
#define TRAINYARD_ENGINE_CUDA_EMULATION_CUDA_TYPES_H_

#if defined(__CUDA_RUNTIME_H__) || defined(__CUDA_RUNTIME_API_H__) || \
    defined(__DRIVER_TYPES_H__)
#error "a real CUDA header is included beside the CUDA emulation's headers"
#endif

struct uint3 {
  unsigned x, y, z;
};

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1)
      : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;

enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorStubLibrary = 34,
  cudaErrorInsufficientDriver = 35,
  cudaErrorDevicesUnavailable = 46,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorLaunchFailure = 719,
};
using cudaError_t = cudaError;

struct CUstream_st;
using cudaStream_t = CUstream_st*;

inline constexpr unsigned cudaStreamDefault = 0x00;
inline constexpr unsigned cudaStreamNonBlocking = 0x01;

struct CUevent_st;
using cudaEvent_t = CUevent_st*;

inline constexpr unsigned cudaEventDefault = 0x00;
inline constexpr unsigned cudaEventBlockingSync = 0x01;
inline constexpr unsigned cudaEventDisableTiming = 0x02;
inline constexpr unsigned cudaEventInterprocess = 0x04;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};

// Values of cudaFuncAttributePreferredSharedMemoryCarveout besides a
// percentage.
enum cudaSharedCarveout {
  cudaSharedmemCarveoutDefault = -1,
  cudaSharedmemCarveoutMaxShared = 100,
  cudaSharedmemCarveoutMaxL1 = 0,
};

struct CUuuid_st {
  char bytes[16];
};
using cudaUUID_t = CUuuid_st;

// The fields of cudaDeviceProp the project reads.
struct cudaDeviceProp {
  char name[256];
  cudaUUID_t uuid;
  size_t totalGlobalMem;
  int major;
  int minor;
  int multiProcessorCount;
};

#endif  // TRAINYARD_ENGINE_CUDA_EMULATION_CUDA_TYPES_H_
