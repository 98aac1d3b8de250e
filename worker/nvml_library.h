// NvmlLibrary: NVIDIA's management library (NVML), opened at run time with
// dlopen so that yard-worker starts on machines without the NVIDIA driver
// and never needs a CUDA build. Open() loads the library, resolves the entry
// points the worker uses (nvml_api.h) and initialises NVML; the destructor
// shuts it down and unloads it. Devices are named by NVML's index, the one
// nvidia-smi shows (PCI bus order).
//
// Thread-safe: NVML's own calls are, and the object does not change after
// Open().
#ifndef TRAINYARD_WORKER_NVML_LIBRARY_H_
#define TRAINYARD_WORKER_NVML_LIBRARY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/device_discovery.h"
#include "worker/nvml_api.h"

namespace trainyard::worker {

inline constexpr char kNvmlLibraryName[] = "libnvidia-ml.so.1";

// What NVML says a device is.
struct NvmlDeviceInfo {
  int32_t index = 0;
  std::string name;  // "NVIDIA H100 80GB HBM3"
  std::string uuid;  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  int64_t memory_bytes = 0;
  int32_t compute_capability = 0;  // major * 10 + minor; 0 when unknown
};

class NvmlLibrary {
 public:
  // `path` is given to dlopen (a bare name searches the usual places).
  // UNAVAILABLE, saying why, when the library cannot be opened, lacks an
  // entry point we need, or nvmlInit fails (no driver loaded, ...).
  static absl::StatusOr<std::unique_ptr<NvmlLibrary>> Open(
      const std::string& path = kNvmlLibraryName);
  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  absl::StatusOr<int32_t> DeviceCount() const;
  // Just the UUID: enough to match CUDA_VISIBLE_DEVICES entries.
  absl::StatusOr<std::string> Uuid(int32_t index) const;
  // Name, UUID, memory and compute capability of device `index`; an error
  // (naming the call and NVML's reason) when one of the first three fails.
  absl::StatusOr<NvmlDeviceInfo> Describe(int32_t index) const;
  // Live figures of device `index`; those NVML cannot give stay empty.
  DeviceReading Read(int32_t index) const;

  // NVML's text for `result` ("Not Supported"), or its number.
  std::string ErrorString(nvmlReturn_t result) const;

 private:
  struct Api {
    nvmlInit_v2_fn* init = nullptr;
    nvmlShutdown_fn* shutdown = nullptr;
    nvmlErrorString_fn* error_string = nullptr;  // optional
    nvmlDeviceGetCount_v2_fn* count = nullptr;
    nvmlDeviceGetHandleByIndex_v2_fn* handle = nullptr;
    nvmlDeviceGetName_fn* name = nullptr;
    nvmlDeviceGetUUID_fn* uuid = nullptr;
    nvmlDeviceGetMemoryInfo_fn* memory = nullptr;
    // Optional: older drivers or odd devices lack them; figures stay empty.
    nvmlDeviceGetUtilizationRates_fn* utilization = nullptr;
    nvmlDeviceGetTemperature_fn* temperature = nullptr;
    nvmlDeviceGetPowerUsage_fn* power = nullptr;
    nvmlDeviceGetCudaComputeCapability_fn* compute_capability = nullptr;
  };

  NvmlLibrary(void* handle, Api api) : handle_(handle), api_(api) {}
  static absl::Status Resolve(void* handle, Api& api);
  absl::StatusOr<nvmlDevice_t> Handle(int32_t index) const;
  absl::Status Failed(const char* call, int32_t index,
                      nvmlReturn_t result) const;

  void* handle_;  // from dlopen
  Api api_;
  bool initialized_ = false;
};

}  // namespace trainyard::worker

#endif  // TRAINYARD_WORKER_NVML_LIBRARY_H_
