// The few parts of NVIDIA's NVML C API (nvml.h, the driver's
// libnvidia-ml.so.1) that the worker uses, declared here so that the worker
// builds without the CUDA toolkit and never links the driver library: it is
// opened at run time (nvml_library.h). Names, values and layouts follow the
// public NVML API reference; only what we call is declared. The test double
// of the library (fake_nvml.cc) implements these same declarations.
#ifndef TRAINYARD_WORKER_NVML_API_H_
#define TRAINYARD_WORKER_NVML_API_H_

extern "C" {

typedef int nvmlReturn_t;  // nvmlReturn_enum in nvml.h

typedef struct nvmlDevice_st* nvmlDevice_t;

typedef struct nvmlMemory_st {
  unsigned long long total;  // bytes
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlUtilization_st {
  unsigned int gpu;     // percent of the sample period a kernel ran
  unsigned int memory;  // percent of it device memory was read or written
} nvmlUtilization_t;

typedef int nvmlTemperatureSensors_t;  // nvmlTemperatureSensors_enum

// The entry points, as function types for dlsym.
using nvmlInit_v2_fn = nvmlReturn_t();
using nvmlShutdown_fn = nvmlReturn_t();
using nvmlErrorString_fn = const char*(nvmlReturn_t);
using nvmlDeviceGetCount_v2_fn = nvmlReturn_t(unsigned int* count);
using nvmlDeviceGetHandleByIndex_v2_fn = nvmlReturn_t(unsigned int index,
                                                      nvmlDevice_t* device);
using nvmlDeviceGetName_fn = nvmlReturn_t(nvmlDevice_t device, char* name,
                                          unsigned int length);
using nvmlDeviceGetUUID_fn = nvmlReturn_t(nvmlDevice_t device, char* uuid,
                                          unsigned int length);
using nvmlDeviceGetMemoryInfo_fn = nvmlReturn_t(nvmlDevice_t device,
                                                nvmlMemory_t* memory);
using nvmlDeviceGetUtilizationRates_fn =
    nvmlReturn_t(nvmlDevice_t device, nvmlUtilization_t* utilization);
using nvmlDeviceGetTemperature_fn = nvmlReturn_t(
    nvmlDevice_t device, nvmlTemperatureSensors_t sensor, unsigned int* temp);
using nvmlDeviceGetPowerUsage_fn = nvmlReturn_t(nvmlDevice_t device,
                                                unsigned int* milliwatts);
using nvmlDeviceGetCudaComputeCapability_fn = nvmlReturn_t(nvmlDevice_t device,
                                                           int* major,
                                                           int* minor);

}  // extern "C"

// nvml.h's constants, in our namespace so that they never clash with the
// real header's enumerators.
namespace trainyard::worker::nvml {

inline constexpr nvmlReturn_t kSuccess = 0;                // NVML_SUCCESS
inline constexpr nvmlReturn_t kErrorInvalidArgument = 2;   // _INVALID_ARGUMENT
inline constexpr nvmlReturn_t kErrorNotSupported = 3;      // _NOT_SUPPORTED
inline constexpr nvmlReturn_t kErrorNoPermission = 4;      // _NO_PERMISSION
inline constexpr nvmlReturn_t kErrorInsufficientSize = 7;  // _INSUFFICIENT_SIZE
inline constexpr nvmlReturn_t kErrorDriverNotLoaded = 9;   // _DRIVER_NOT_LOADED
inline constexpr nvmlReturn_t kErrorGpuIsLost = 15;        // _GPU_IS_LOST
inline constexpr nvmlReturn_t kErrorUnknown = 999;         // _UNKNOWN

inline constexpr nvmlTemperatureSensors_t kTemperatureGpu = 0;

// Buffer sizes nvml.h recommends (NVML_DEVICE_NAME_V2_BUFFER_SIZE,
// NVML_DEVICE_UUID_V2_BUFFER_SIZE).
inline constexpr unsigned int kNameBufferSize = 96;
inline constexpr unsigned int kUuidBufferSize = 96;

}  // namespace trainyard::worker::nvml

#endif  // TRAINYARD_WORKER_NVML_API_H_
