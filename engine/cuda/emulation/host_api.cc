// The emulated CUDA host API (runtime.h): device memory is host memory
// aligned as cudaMalloc's (256 bytes), every call synchronous, one device.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "engine/cuda/emulation/runtime.h"

struct CUstream_st {};

namespace {

using ::trainyard::cuda_emulation::kEmulatedDeviceBytes;

// cudaMalloc's blocks and their sizes, for cudaMemGetInfo and cudaFree.
struct DeviceMemory {
  std::mutex mu;
  std::unordered_map<void*, size_t> blocks;
  size_t in_use = 0;
};

DeviceMemory& Memory() {
  static DeviceMemory* memory = new DeviceMemory;
  return *memory;
}

thread_local int current_device = 0;

}  // namespace

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidMemcpyDirection:
      return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorStubLibrary:
      return "cudaErrorStubLibrary";
    case cudaErrorInsufficientDriver:
      return "cudaErrorInsufficientDriver";
    case cudaErrorDevicesUnavailable:
      return "cudaErrorDevicesUnavailable";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
  }
  return "unknown cudaError_t";
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidMemcpyDirection:
      return "invalid copy direction for memcpy";
    case cudaErrorStubLibrary:
      return "CUDA driver is a stub library";
    case cudaErrorInsufficientDriver:
      return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorDevicesUnavailable:
      return "CUDA-capable device(s) is/are busy or unavailable";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure (see the emulation's message)";
  }
  return "unrecognized error code";
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  *ptr = nullptr;
  const size_t rounded = bytes == 0 ? 256 : (bytes + 255) / 256 * 256;
  DeviceMemory& memory = Memory();
  std::lock_guard<std::mutex> lock(memory.mu);
  if (rounded > kEmulatedDeviceBytes - memory.in_use) {
    return cudaErrorMemoryAllocation;
  }
  *ptr = std::aligned_alloc(256, rounded);
  if (*ptr == nullptr) return cudaErrorMemoryAllocation;
  memory.blocks[*ptr] = rounded;
  memory.in_use += rounded;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  DeviceMemory& memory = Memory();
  std::lock_guard<std::mutex> lock(memory.mu);
  auto it = memory.blocks.find(ptr);
  if (it == memory.blocks.end()) return cudaErrorInvalidValue;
  memory.in_use -= it->second;
  memory.blocks.erase(it);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) {
    return cudaErrorInvalidValue;
  }
  DeviceMemory& memory = Memory();
  std::lock_guard<std::mutex> lock(memory.mu);
  *free_bytes = kEmulatedDeviceBytes - memory.in_use;
  *total_bytes = kEmulatedDeviceBytes;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return cudaErrorInvalidValue;
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return cudaErrorInvalidValue;
  if (device != 0) return cudaErrorInvalidDevice;
  *prop = {};
  std::strncpy(prop->name, ::trainyard::cuda_emulation::kEmulatedDeviceName,
               sizeof(prop->name) - 1);
  // A fixed, well-formed UUID.
  for (int i = 0; i < 16; ++i) prop->uuid.bytes[i] = static_cast<char>(i);
  prop->totalGlobalMem = kEmulatedDeviceBytes;
  prop->major = 9;  // the sm_90 the kernels are built for
  prop->minor = 0;
  prop->multiProcessorCount = 4;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  if (version == nullptr) return cudaErrorInvalidValue;
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  return cudaDriverGetVersion(version);
}

cudaError_t cudaSetDevice(int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return cudaErrorInvalidValue;
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (stream == nullptr || flags > cudaStreamNonBlocking) {
    return cudaErrorInvalidValue;
  }
  *stream = new CUstream_st;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr) return cudaErrorInvalidValue;
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes,
                       cudaMemcpyKind kind) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) {
    return cudaErrorInvalidMemcpyDirection;
  }
  if (bytes > 0 && (dst == nullptr || src == nullptr)) {
    return cudaErrorInvalidValue;
  }
  if (bytes > 0) std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes,
                            cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}

cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  if (bytes > 0 && ptr == nullptr) return cudaErrorInvalidValue;
  if (bytes > 0) std::memset(ptr, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t) {
  return cudaMemset(ptr, value, bytes);
}

cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
