// The emulated CUDA host API (runtime.h): device memory is host memory
// aligned as cudaMalloc's (256 bytes), one pool for every emulated device,
// every call synchronous.
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>

#include "engine/cuda/emulation/runtime.h"

struct CUstream_st {};

struct CUevent_st {
  unsigned flags;
  // When cudaEventRecord last ran (every stream is synchronous, so that
  // is when the work before it finished); unset until the first record.
  std::optional<std::chrono::steady_clock::time_point> recorded;
};

namespace {

using ::trainyard::cuda_emulation::kMaxEmulatedDevices;

struct Block {
  size_t bytes;
  int device;  // current when cudaMalloc made it
};

// cudaMalloc's blocks by address, for cudaMemGetInfo, cudaFree and
// DeviceHolding.
struct DeviceMemory {
  std::mutex mu;
  std::map<uintptr_t, Block> blocks;
  size_t in_use = 0;
};

DeviceMemory& Memory() {
  static DeviceMemory* memory = new DeviceMemory;
  return *memory;
}

// The events cudaEventCreate* made and cudaEventDestroy has not freed.
struct LiveEvents {
  std::mutex mu;
  std::unordered_set<cudaEvent_t> events;
};

LiveEvents& Events() {
  static LiveEvents* events = new LiveEvents;
  return *events;
}

bool IsLive(cudaEvent_t event) {
  LiveEvents& live = Events();
  std::lock_guard<std::mutex> lock(live.mu);
  return live.events.count(event) != 0;
}

// The setting the environment variable `name` holds, as `parse` reads it
// (parse(value, &problem)); a problem is told once, on stderr.
template <typename Parse>
auto FromEnvironment(const char* name, Parse parse) {
  std::string problem;
  const auto value = parse(std::getenv(name), &problem);
  if (!problem.empty()) {
    std::fprintf(stderr, "cuda emulation: %s\n", problem.c_str());
  }
  return value;
}

int DeviceCount() {
  static const int count =
      FromEnvironment("YARD_EMULATION_DEVICES",
                      ::trainyard::cuda_emulation::ParseEmulatedDeviceCount);
  return count;
}

// What each emulated device reports as its memory (the one shared pool).
size_t DeviceBytes() {
  static const size_t bytes =
      FromEnvironment("YARD_EMULATION_DEVICE_MIB",
                      ::trainyard::cuda_emulation::ParseEmulatedDeviceBytes);
  return bytes;
}

thread_local int current_device = 0;

}  // namespace

namespace trainyard::cuda_emulation {

int ParseEmulatedDeviceCount(const char* value, std::string* problem) {
  if (value == nullptr) return 1;
  char* end = nullptr;
  const long n = std::strtol(value, &end, 10);
  if (*value != '\0' && *end == '\0' && n >= 1 && n <= kMaxEmulatedDevices) {
    return static_cast<int>(n);
  }
  *problem = std::string("YARD_EMULATION_DEVICES=") + value +
             " is not a device count from 1 to " +
             std::to_string(kMaxEmulatedDevices) + "; emulating 1 device";
  return 1;
}

size_t ParseEmulatedDeviceBytes(const char* value, std::string* problem) {
  if (value == nullptr) return kDefaultEmulatedDeviceBytes;
  char* end = nullptr;
  const long long mib = std::strtoll(value, &end, 10);
  if (*value != '\0' && *end == '\0' && mib >= 1 && mib <= (1 << 20)) {
    return static_cast<size_t>(mib) << 20;
  }
  *problem = std::string("YARD_EMULATION_DEVICE_MIB=") + value +
             " is not a size from 1 to 1048576 MiB; emulating " +
             std::to_string(kDefaultEmulatedDeviceBytes >> 20) + " MiB";
  return kDefaultEmulatedDeviceBytes;
}

int DeviceHolding(const void* p, size_t bytes) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  DeviceMemory& memory = Memory();
  std::lock_guard<std::mutex> lock(memory.mu);
  auto it = memory.blocks.upper_bound(begin);
  if (it == memory.blocks.begin()) return -1;
  --it;
  const uintptr_t offset = begin - it->first;
  if (offset > it->second.bytes || bytes > it->second.bytes - offset) {
    return -1;
  }
  return it->second.device;
}

}  // namespace trainyard::cuda_emulation

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
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
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
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNotReady:
      return "device not ready";
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
  if (rounded > DeviceBytes() - memory.in_use) {
    return cudaErrorMemoryAllocation;
  }
  *ptr = std::aligned_alloc(256, rounded);
  if (*ptr == nullptr) return cudaErrorMemoryAllocation;
  memory.blocks[reinterpret_cast<uintptr_t>(*ptr)] = {rounded, current_device};
  memory.in_use += rounded;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  DeviceMemory& memory = Memory();
  std::lock_guard<std::mutex> lock(memory.mu);
  auto it = memory.blocks.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == memory.blocks.end()) return cudaErrorInvalidValue;
  memory.in_use -= it->second.bytes;
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
  *free_bytes = DeviceBytes() - memory.in_use;
  *total_bytes = DeviceBytes();
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return cudaErrorInvalidValue;
  *count = DeviceCount();
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return cudaErrorInvalidValue;
  if (device < 0 || device >= DeviceCount()) return cudaErrorInvalidDevice;
  *prop = {};
  std::strncpy(prop->name, ::trainyard::cuda_emulation::kEmulatedDeviceName,
               sizeof(prop->name) - 1);
  // A fixed, well-formed UUID, one per ordinal.
  for (int i = 0; i < 16; ++i) prop->uuid.bytes[i] = static_cast<char>(i);
  prop->uuid.bytes[0] = static_cast<char>(16 * device);
  prop->totalGlobalMem = DeviceBytes();
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
  if (device < 0 || device >= DeviceCount()) return cudaErrorInvalidDevice;
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return cudaErrorInvalidValue;
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
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

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  constexpr unsigned kKnown =
      cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  // CUDA: an interprocess event must also disable timing.
  if (event == nullptr || (flags & ~kKnown) != 0 ||
      ((flags & cudaEventInterprocess) != 0 &&
       (flags & cudaEventDisableTiming) == 0)) {
    return cudaErrorInvalidValue;
  }
  *event = new CUevent_st{flags, std::nullopt};
  LiveEvents& live = Events();
  std::lock_guard<std::mutex> lock(live.mu);
  live.events.insert(*event);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  LiveEvents& live = Events();
  std::lock_guard<std::mutex> lock(live.mu);
  if (live.events.erase(event) == 0) return cudaErrorInvalidResourceHandle;
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  LiveEvents& live = Events();
  std::lock_guard<std::mutex> lock(live.mu);
  if (live.events.count(event) == 0) return cudaErrorInvalidResourceHandle;
  event->recorded = std::chrono::steady_clock::now();
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start,
                                 cudaEvent_t end) {
  if (ms == nullptr) return cudaErrorInvalidValue;
  LiveEvents& live = Events();
  std::lock_guard<std::mutex> lock(live.mu);
  // CUDA: an unknown event, one without timing, or one never recorded.
  for (cudaEvent_t e : {start, end}) {
    if (live.events.count(e) == 0 || (e->flags & cudaEventDisableTiming) ||
        !e->recorded) {
      return cudaErrorInvalidResourceHandle;
    }
  }
  *ms = std::chrono::duration<float, std::milli>(*end->recorded -
                                                 *start->recorded)
            .count();
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  return IsLive(event) ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return IsLive(event) ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t event,
                                unsigned flags) {
  if (!IsLive(event)) return cudaErrorInvalidResourceHandle;
  // cudaEventWaitDefault or cudaEventWaitExternal.
  return flags <= 1 ? cudaSuccess : cudaErrorInvalidValue;
}
