// Device discovery against the real NVIDIA driver (ctest label `gpu`):
// skips on machines without one. Checks that what NVML reports is sane and
// that NVML's index of each GPU is the CUDA driver's under
// CUDA_DEVICE_ORDER=PCI_BUS_ID, and that the two agree on each GPU's UUID:
// a job placed on GPU i runs with that UUID in CUDA_VISIBLE_DEVICES, or
// with i where NVML gives no UUID.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

#include "gtest/gtest.h"
#include "worker/gpu_discovery.h"
#include "worker/nvml_library.h"

namespace trainyard::worker {
namespace {

// NVML, or a skip when this machine has no driver or no GPU.
std::unique_ptr<NvmlLibrary> OpenOrSkip(int32_t& count) {
  absl::StatusOr<std::unique_ptr<NvmlLibrary>> nvml = NvmlLibrary::Open();
  if (!nvml.ok()) return nullptr;
  absl::StatusOr<int32_t> n = (*nvml)->DeviceCount();
  if (!n.ok() || *n == 0) return nullptr;
  count = *n;
  return *std::move(nvml);
}

TEST(GpuDiscoveryGpuTest, NvmlDescribesAndReadsEveryGpu) {
  int32_t count = 0;
  std::unique_ptr<NvmlLibrary> nvml = OpenOrSkip(count);
  if (nvml == nullptr) GTEST_SKIP() << "no NVIDIA driver or no GPU here";
  for (int32_t i = 0; i < count; ++i) {
    absl::StatusOr<NvmlDeviceInfo> info = nvml->Describe(i);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_FALSE(info->name.empty());
    EXPECT_EQ(info->uuid.rfind("GPU-", 0), 0u) << info->uuid;
    EXPECT_GT(info->memory_bytes, int64_t{1} << 30);
    EXPECT_GE(info->compute_capability, 30);
    const DeviceReading r = nvml->Read(i);
    ASSERT_TRUE(r.memory_used_bytes.has_value());
    EXPECT_LE(*r.memory_used_bytes, info->memory_bytes);
    if (r.utilization_percent) {
      EXPECT_GE(*r.utilization_percent, 0);
      EXPECT_LE(*r.utilization_percent, 100);
    }
    if (r.temperature_celsius) {
      EXPECT_LT(*r.temperature_celsius, 150);
    }
    if (r.power_milliwatts) {
      EXPECT_GT(*r.power_milliwatts, 0);
    }
    trainyard::v1::Device d;
    d.set_index(i);
    d.set_name(info->name);
    d.set_uuid(info->uuid);
    d.set_memory_bytes(info->memory_bytes);
    d.set_compute_capability(info->compute_capability);
    std::printf("%s\n", DescribeDevice(d).c_str());
  }
}

TEST(GpuDiscoveryGpuTest, AutoOffersTheVisibleGpus) {
  int32_t count = 0;
  if (OpenOrSkip(count) == nullptr) GTEST_SKIP() << "no NVIDIA driver or GPU";
  GpuDiscoveryOptions options;  // auto, CUDA_VISIBLE_DEVICES unset
  absl::StatusOr<DeviceDiscoveryChoice> c = ChooseDeviceDiscovery(options);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->discovery->ListDevices()->size(), static_cast<size_t>(count));
  EXPECT_EQ(c->discovery->Read().size(), static_cast<size_t>(count));
  options.cuda_visible_devices = std::to_string(count - 1);
  c = ChooseDeviceDiscovery(options);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->discovery->ListDevices()->size(), 1u);
  EXPECT_EQ((*c->discovery->ListDevices())[0].index(), count - 1);
}

// The CUDA driver's UUID of each device, in CUDA's numbering; opened like
// NVML (dlopen), so the test needs no CUDA build. Empty when it cannot.
std::vector<std::string> CudaUuids() {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr) return {};
  using Init = int(unsigned int);
  using Count = int(int*);
  using Get = int(int*, int);
  using Uuid = int(unsigned char*, int);  // CUuuid is 16 bytes
  auto* init = reinterpret_cast<Init*>(dlsym(cuda, "cuInit"));
  auto* count = reinterpret_cast<Count*>(dlsym(cuda, "cuDeviceGetCount"));
  auto* get = reinterpret_cast<Get*>(dlsym(cuda, "cuDeviceGet"));
  auto* uuid = reinterpret_cast<Uuid*>(dlsym(cuda, "cuDeviceGetUuid"));
  std::vector<std::string> out;
  int n = 0;
  if (init == nullptr || count == nullptr || get == nullptr ||
      uuid == nullptr || init(0) != 0 || count(&n) != 0) {
    return out;
  }
  for (int ordinal = 0; ordinal < n; ++ordinal) {
    int device = 0;
    unsigned char b[16] = {};
    if (get(&device, ordinal) != 0 || uuid(b, device) != 0) return {};
    char text[64];
    std::snprintf(text, sizeof(text),
                  "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
                  "%02x%02x%02x%02x%02x%02x",
                  b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9],
                  b[10], b[11], b[12], b[13], b[14], b[15]);
    out.push_back(text);
  }
  return out;  // the library stays loaded: CUDA does not like unloading
}

TEST(GpuDiscoveryGpuTest, NvmlAndCudaNumberTheGpusAlike) {
  int32_t count = 0;
  std::unique_ptr<NvmlLibrary> nvml = OpenOrSkip(count);
  if (nvml == nullptr) GTEST_SKIP() << "no NVIDIA driver or GPU";
  // Before cuInit, which reads them; as the worker's jobs run.
  setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1);
  unsetenv("CUDA_VISIBLE_DEVICES");
  const std::vector<std::string> cuda = CudaUuids();
  ASSERT_EQ(cuda.size(), static_cast<size_t>(count))
      << "the CUDA driver sees another number of GPUs than NVML";
  for (int32_t i = 0; i < count; ++i) {
    EXPECT_EQ(*nvml->Uuid(i), cuda[i]) << "CUDA device " << i;
  }
}

}  // namespace
}  // namespace trainyard::worker
