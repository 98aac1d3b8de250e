#include "worker/nvml_library.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace trainyard::worker {
namespace {

std::string DlError() {
  const char* e = dlerror();
  return e != nullptr ? e : "unknown dlopen error";
}

// A C string NVML wrote into `buf`, cut at the buffer's end if it was not
// terminated.
std::string FromBuffer(const char* buf, size_t size) {
  return std::string(buf, strnlen(buf, size));
}

// NVML's unsigned figures as our int32 fields; no real figure is near the
// limit, a broken library's garbage is cut there.
int32_t ToInt32(unsigned int value) {
  return static_cast<int32_t>(std::min<unsigned int>(value, INT32_MAX));
}

template <typename Fn>
bool Bind(void* handle, const char* name, Fn*& out) {
  out = reinterpret_cast<Fn*>(dlsym(handle, name));
  return out != nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<NvmlLibrary>> NvmlLibrary::Open(
    const std::string& path) {
  dlerror();  // clear any stale error
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot load ", path, ": ", DlError()));
  }
  Api api;
  if (absl::Status s = Resolve(handle, api); !s.ok()) {
    dlclose(handle);
    return absl::UnavailableError(absl::StrCat(path, ": ", s.message()));
  }
  // Not make_unique: the constructor is private.
  std::unique_ptr<NvmlLibrary> nvml(new NvmlLibrary(handle, api));
  const nvmlReturn_t init = api.init();
  if (init != nvml::kSuccess) {
    // The destructor unloads the library; nothing to shut down.
    return absl::UnavailableError(absl::StrCat(
        "nvmlInit failed: ", nvml->ErrorString(init),
        init == nvml::kErrorDriverNotLoaded ? " (is the NVIDIA driver loaded?)"
                                            : ""));
  }
  nvml->initialized_ = true;
  return nvml;
}

absl::Status NvmlLibrary::Resolve(void* handle, Api& api) {
  struct Required {
    const char* name;
    bool found;
  };
  const Required required[] = {
      {"nvmlInit_v2", Bind(handle, "nvmlInit_v2", api.init)},
      {"nvmlShutdown", Bind(handle, "nvmlShutdown", api.shutdown)},
      {"nvmlDeviceGetCount_v2",
       Bind(handle, "nvmlDeviceGetCount_v2", api.count)},
      {"nvmlDeviceGetHandleByIndex_v2",
       Bind(handle, "nvmlDeviceGetHandleByIndex_v2", api.handle)},
      {"nvmlDeviceGetName", Bind(handle, "nvmlDeviceGetName", api.name)},
      {"nvmlDeviceGetUUID", Bind(handle, "nvmlDeviceGetUUID", api.uuid)},
      {"nvmlDeviceGetMemoryInfo",
       Bind(handle, "nvmlDeviceGetMemoryInfo", api.memory)},
  };
  for (const Required& r : required) {
    if (!r.found) {
      return absl::UnavailableError(
          absl::StrCat("not an NVML library: it has no ", r.name));
    }
  }
  Bind(handle, "nvmlErrorString", api.error_string);
  Bind(handle, "nvmlDeviceGetUtilizationRates", api.utilization);
  Bind(handle, "nvmlDeviceGetTemperature", api.temperature);
  Bind(handle, "nvmlDeviceGetPowerUsage", api.power);
  Bind(handle, "nvmlDeviceGetCudaComputeCapability", api.compute_capability);
  return absl::OkStatus();
}

NvmlLibrary::~NvmlLibrary() {
  if (initialized_) {
    if (nvmlReturn_t r = api_.shutdown(); r != nvml::kSuccess) {
      YARD_LOG(WARNING) << "nvmlShutdown failed: " << ErrorString(r);
    }
  }
  dlclose(handle_);
}

std::string NvmlLibrary::ErrorString(nvmlReturn_t result) const {
  const char* text =
      api_.error_string != nullptr ? api_.error_string(result) : nullptr;
  if (text == nullptr || *text == '\0') {
    return absl::StrCat("NVML error ", result);
  }
  return text;
}

absl::Status NvmlLibrary::Failed(const char* call, int32_t index,
                                 nvmlReturn_t result) const {
  return absl::UnavailableError(
      absl::StrCat(call, " of GPU ", index, " failed: ", ErrorString(result)));
}

absl::StatusOr<int32_t> NvmlLibrary::DeviceCount() const {
  unsigned int count = 0;
  if (nvmlReturn_t r = api_.count(&count); r != nvml::kSuccess) {
    return absl::UnavailableError(
        absl::StrCat("nvmlDeviceGetCount failed: ", ErrorString(r)));
  }
  // No node has this many; a bigger number is a broken library.
  constexpr unsigned int kMaxDevices = 1024;
  if (count > kMaxDevices) {
    return absl::UnavailableError(absl::StrCat("nvmlDeviceGetCount says ",
                                               count, " GPUs (at most ",
                                               kMaxDevices, " expected)"));
  }
  return static_cast<int32_t>(count);
}

absl::StatusOr<nvmlDevice_t> NvmlLibrary::Handle(int32_t index) const {
  nvmlDevice_t device = nullptr;
  if (nvmlReturn_t r = api_.handle(static_cast<unsigned int>(index), &device);
      r != nvml::kSuccess) {
    return Failed("nvmlDeviceGetHandleByIndex", index, r);
  }
  return device;
}

absl::StatusOr<std::string> NvmlLibrary::Uuid(int32_t index) const {
  absl::StatusOr<nvmlDevice_t> device = Handle(index);
  if (!device.ok()) return device.status();
  char uuid[nvml::kUuidBufferSize] = {};
  if (nvmlReturn_t r = api_.uuid(*device, uuid, sizeof(uuid));
      r != nvml::kSuccess) {
    return Failed("nvmlDeviceGetUUID", index, r);
  }
  return FromBuffer(uuid, sizeof(uuid));
}

absl::StatusOr<NvmlDeviceInfo> NvmlLibrary::Describe(int32_t index) const {
  absl::StatusOr<nvmlDevice_t> device = Handle(index);
  if (!device.ok()) return device.status();
  NvmlDeviceInfo info;
  info.index = index;
  char name[nvml::kNameBufferSize] = {};
  if (nvmlReturn_t r = api_.name(*device, name, sizeof(name));
      r != nvml::kSuccess) {
    return Failed("nvmlDeviceGetName", index, r);
  }
  info.name = FromBuffer(name, sizeof(name));
  absl::StatusOr<std::string> uuid = Uuid(index);
  if (!uuid.ok()) return uuid.status();
  info.uuid = *std::move(uuid);
  nvmlMemory_t memory = {};
  if (nvmlReturn_t r = api_.memory(*device, &memory); r != nvml::kSuccess) {
    return Failed("nvmlDeviceGetMemoryInfo", index, r);
  }
  info.memory_bytes = static_cast<int64_t>(memory.total);
  int major = 0, minor = 0;
  if (api_.compute_capability != nullptr &&
      api_.compute_capability(*device, &major, &minor) == nvml::kSuccess &&
      major >= 0 && minor >= 0 && minor < 10) {
    info.compute_capability = major * 10 + minor;
  }
  return info;
}

DeviceReading NvmlLibrary::Read(int32_t index) const {
  DeviceReading out;
  out.index = index;
  absl::StatusOr<nvmlDevice_t> device = Handle(index);
  if (!device.ok()) return out;  // a lost GPU reads as unknown figures
  nvmlMemory_t memory = {};
  if (api_.memory(*device, &memory) == nvml::kSuccess) {
    out.memory_used_bytes = static_cast<int64_t>(memory.used);
  }
  nvmlUtilization_t utilization = {};
  if (api_.utilization != nullptr &&
      api_.utilization(*device, &utilization) == nvml::kSuccess) {
    out.utilization_percent = ToInt32(utilization.gpu);
  }
  unsigned int value = 0;
  if (api_.temperature != nullptr &&
      api_.temperature(*device, nvml::kTemperatureGpu, &value) ==
          nvml::kSuccess) {
    out.temperature_celsius = ToInt32(value);
  }
  if (api_.power != nullptr && api_.power(*device, &value) == nvml::kSuccess) {
    out.power_milliwatts = ToInt32(value);
  }
  return out;
}

}  // namespace trainyard::worker
