// A test double of the NVIDIA driver's NVML library: a shared library with
// the same C entry points (nvml_api.h) that lists fake GPUs, so the worker's
// loader, device selection and telemetry run for real on machines without
// a GPU. Tests open it by path (or as libnvidia-ml.so.1 through
// LD_LIBRARY_PATH) and steer it with fake_nvml_set(key, value):
//   device_count        GPUs listed (default 2, at most 4)
//   init_result         what nvmlInit_v2 returns (default NVML_SUCCESS)
//   handle_result_N     what nvmlDeviceGetHandleByIndex_v2(N) returns
//   temperature_result_N, power_result_N, utilization_result_N
//   bad_uuid_N          nvmlDeviceGetUUID(N) succeeds with a bad UUID:
//                       1 an empty one, 2 one with a comma ("GPU-a0a0,1")
// and read counters with fake_nvml_get: init_calls, shutdown_calls,
// initialized (1 between a successful init and its shutdown). A process
// that cannot call fake_nvml_set (yard-worker under test) sets a key in the
// environment instead: FAKE_NVML_INIT_RESULT=9, FAKE_NVML_DEVICE_COUNT=1,
// FAKE_NVML_BAD_UUID_1=1. FAKE_NVML_NAME_N (a string, environment only)
// is the name GPU N reports instead of its own (GPUs 0-1 are H100s, 2-3
// A100s), e.g. FAKE_NVML_NAME_0="NVIDIA L4" for a worker of other models.
// GPU 1 reports no temperature unless told otherwise. Thread-safe.
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "worker/nvml_api.h"

struct nvmlDevice_st {
  const char* name;
  const char* uuid;
  unsigned long long total, used;
  unsigned int utilization, temperature, power_mw;
  int major, minor;
};

namespace {

namespace nvml = trainyard::worker::nvml;

nvmlDevice_st devices[] = {
    {"NVIDIA H100 80GB HBM3", "GPU-a0a0a0a0-0000-4000-8000-000000000000",
     85520809984ull, 1073741824ull, 75, 61, 350500, 9, 0},
    {"NVIDIA H100 80GB HBM3", "GPU-b1b1b1b1-1111-4111-8111-111111111111",
     85520809984ull, 0, 0, 33, 70250, 9, 0},
    {"NVIDIA A100-SXM4-40GB", "GPU-b1b2c3d4-2222-4222-8222-222222222222",
     42949672960ull, 0, 0, 40, 60000, 8, 0},
    {"NVIDIA A100-SXM4-40GB", "GPU-d4d4d4d4-3333-4333-8333-333333333333",
     42949672960ull, 0, 0, 41, 61000, 8, 0},
};

std::mutex mu;
std::map<std::string, long long> settings;

long long Get(const std::string& key, long long fallback) {
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = settings.find(key);
    if (it != settings.end()) return it->second;
  }
  std::string name = "FAKE_NVML_" + key;
  for (char& c : name) c = static_cast<char>(std::toupper(c));
  const char* env = std::getenv(name.c_str());
  return env != nullptr ? std::atoll(env) : fallback;
}

void Add(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu);
  ++settings[key];
}

nvmlReturn_t Result(const char* what, const nvmlDevice_st* d) {
  const long long i = d - devices;
  const long long fallback =
      (i == 1 && std::strcmp(what, "temperature_result") == 0)
          ? nvml::kErrorNotSupported
          : nvml::kSuccess;
  return static_cast<nvmlReturn_t>(
      Get(std::string(what) + "_" + std::to_string(i), fallback));
}

bool Initialized() { return Get("initialized", 0) > 0; }

unsigned int Count() {
  const long long n = Get("device_count", 2);
  return static_cast<unsigned int>(n < 0 ? 0 : n > 4 ? 4 : n);
}

nvmlReturn_t CopyString(const char* value, char* out, unsigned int length) {
  if (out == nullptr) return nvml::kErrorInvalidArgument;
  if (std::strlen(value) + 1 > length) return nvml::kErrorInsufficientSize;
  std::snprintf(out, length, "%s", value);
  return nvml::kSuccess;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void fake_nvml_set(const char* key,
                                                          long long value) {
  std::lock_guard<std::mutex> lock(mu);
  settings[key] = value;
}

__attribute__((visibility("default"))) long long fake_nvml_get(
    const char* key) {
  return Get(key, 0);
}

__attribute__((visibility("default"))) void fake_nvml_reset() {
  std::lock_guard<std::mutex> lock(mu);
  settings.clear();
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlInit_v2() {
  Add("init_calls");
  const nvmlReturn_t r = static_cast<nvmlReturn_t>(Get("init_result", 0));
  if (r == nvml::kSuccess) Add("initialized");
  return r;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlShutdown() {
  Add("shutdown_calls");
  std::lock_guard<std::mutex> lock(mu);
  if (settings["initialized"] > 0) --settings["initialized"];
  return nvml::kSuccess;
}

__attribute__((visibility("default"))) const char* nvmlErrorString(
    nvmlReturn_t result) {
  switch (result) {
    case 0:
      return "Success";
    case 3:
      return "Not Supported";
    case 4:
      return "Insufficient Permissions";
    case 9:
      return "Driver Not Loaded";
    default:
      return "Unknown Error";
  }
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetCount_v2(
    unsigned int* count) {
  if (!Initialized()) return 1;  // NVML_ERROR_UNINITIALIZED
  *count = Count();
  return nvml::kSuccess;
}

__attribute__((visibility("default"))) nvmlReturn_t
nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (!Initialized()) return 1;
  if (index >= Count()) return nvml::kErrorInvalidArgument;
  const nvmlReturn_t r = static_cast<nvmlReturn_t>(
      Get("handle_result_" + std::to_string(index), nvml::kSuccess));
  if (r != nvml::kSuccess) return r;
  *device = &devices[index];
  return nvml::kSuccess;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetName(
    nvmlDevice_t device, char* name, unsigned int length) {
  const std::string key = "FAKE_NVML_NAME_" + std::to_string(device - devices);
  if (const char* env = std::getenv(key.c_str()); env != nullptr) {
    return CopyString(env, name, length);
  }
  return CopyString(device->name, name, length);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetUUID(
    nvmlDevice_t device, char* uuid, unsigned int length) {
  switch (Get("bad_uuid_" + std::to_string(device - devices), 0)) {
    case 1:
      return CopyString("", uuid, length);
    case 2:
      return CopyString("GPU-a0a0,1", uuid, length);
    default:
      return CopyString(device->uuid, uuid, length);
  }
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMemoryInfo(
    nvmlDevice_t device, nvmlMemory_t* memory) {
  memory->total = device->total;
  memory->used = device->used;
  memory->free = device->total - device->used;
  return nvml::kSuccess;
}

__attribute__((visibility("default"))) nvmlReturn_t
nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                              nvmlUtilization_t* utilization) {
  if (nvmlReturn_t r = Result("utilization_result", device); r != 0) return r;
  utilization->gpu = device->utilization;
  utilization->memory = device->utilization / 2;
  return nvml::kSuccess;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetTemperature(
    nvmlDevice_t device, nvmlTemperatureSensors_t sensor, unsigned int* temp) {
  if (sensor != nvml::kTemperatureGpu) return nvml::kErrorInvalidArgument;
  if (nvmlReturn_t r = Result("temperature_result", device); r != 0) return r;
  *temp = device->temperature;
  return nvml::kSuccess;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetPowerUsage(
    nvmlDevice_t device, unsigned int* milliwatts) {
  if (nvmlReturn_t r = Result("power_result", device); r != 0) return r;
  *milliwatts = device->power_mw;
  return nvml::kSuccess;
}

__attribute__((visibility("default"))) nvmlReturn_t
nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major,
                                   int* minor) {
  *major = device->major;
  *minor = device->minor;
  return nvml::kSuccess;
}

}  // extern "C"
