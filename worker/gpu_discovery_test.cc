// The NVML loader and ChooseDeviceDiscovery against fake_nvml, a shared
// library with NVML's C entry points and fake GPUs (built beside this
// test), and against no library at all: the paths a GPU-less machine, a
// machine without the driver and a GPU node take.
#include "worker/gpu_discovery.h"

#include <dlfcn.h>

#include <cstdlib>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/nvml_library.h"

namespace trainyard::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kMissing[] = "/nonexistent/libnvidia-ml.so.1";
constexpr int64_t kH100Bytes = 85520809984;

// The fake library's controls, through a handle of our own (the loader
// under test opens and closes its own).
class FakeNvml {
 public:
  FakeNvml() {
    handle_ = dlopen(FAKE_NVML_PATH, RTLD_NOW | RTLD_LOCAL);
    EXPECT_NE(handle_, nullptr) << dlerror();
    set_ = reinterpret_cast<void (*)(const char*, long long)>(
        dlsym(handle_, "fake_nvml_set"));
    get_ = reinterpret_cast<long long (*)(const char*)>(
        dlsym(handle_, "fake_nvml_get"));
    reinterpret_cast<void (*)()>(dlsym(handle_, "fake_nvml_reset"))();
  }
  ~FakeNvml() { dlclose(handle_); }
  void Set(const char* key, long long value) { set_(key, value); }
  long long Get(const char* key) { return get_(key); }

 private:
  void* handle_;
  void (*set_)(const char*, long long);
  long long (*get_)(const char*);
};

class GpuDiscoveryTest : public ::testing::Test {
 protected:
  // ChooseDeviceDiscovery with the fake library.
  absl::StatusOr<DeviceDiscoveryChoice> Choose(
      const std::string& gpus = "auto",
      std::optional<std::string> visible = std::nullopt,
      const std::string& library = FAKE_NVML_PATH) {
    GpuDiscoveryOptions options;
    options.selection = *ParseGpuSelection(gpus);
    options.cuda_visible_devices = std::move(visible);
    options.nvml_library = library;
    return ChooseDeviceDiscovery(options);
  }

  // The indices the chosen discovery offers.
  static std::vector<int32_t> Indices(const DeviceDiscoveryChoice& c) {
    std::vector<int32_t> out;
    const absl::StatusOr<std::vector<trainyard::v1::Device>> devices =
        c.discovery->ListDevices();
    EXPECT_TRUE(devices.ok()) << devices.status();
    if (!devices.ok()) return out;
    for (const auto& d : *devices) out.push_back(d.index());
    return out;
  }

  FakeNvml fake_;
};

TEST_F(GpuDiscoveryTest, LoaderDescribesAndReadsTheFakeGpus) {
  absl::StatusOr<std::unique_ptr<NvmlLibrary>> nvml =
      NvmlLibrary::Open(FAKE_NVML_PATH);
  ASSERT_TRUE(nvml.ok()) << nvml.status();
  EXPECT_EQ(*(*nvml)->DeviceCount(), 2);
  absl::StatusOr<NvmlDeviceInfo> d0 = (*nvml)->Describe(0);
  ASSERT_TRUE(d0.ok()) << d0.status();
  EXPECT_EQ(d0->index, 0);
  EXPECT_EQ(d0->name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(d0->uuid, "GPU-a0a0a0a0-0000-4000-8000-000000000000");
  EXPECT_EQ(d0->memory_bytes, kH100Bytes);
  EXPECT_EQ(d0->compute_capability, 90);

  const DeviceReading r0 = (*nvml)->Read(0);
  EXPECT_EQ(r0.index, 0);
  EXPECT_EQ(r0.memory_used_bytes, int64_t{1} << 30);
  EXPECT_EQ(r0.utilization_percent, 75);
  EXPECT_EQ(r0.temperature_celsius, 61);
  EXPECT_EQ(r0.power_milliwatts, 350500);
  // A chosen name, for tests of clusters of other GPU models.
  ASSERT_EQ(::setenv("FAKE_NVML_NAME_1", "NVIDIA L4", 1), 0);
  absl::StatusOr<NvmlDeviceInfo> d1 = (*nvml)->Describe(1);
  ASSERT_EQ(::unsetenv("FAKE_NVML_NAME_1"), 0);
  ASSERT_TRUE(d1.ok()) << d1.status();
  EXPECT_EQ(d1->name, "NVIDIA L4");

  // GPU 1 cannot tell its temperature: that figure stays unknown.
  const DeviceReading r1 = (*nvml)->Read(1);
  EXPECT_EQ(r1.temperature_celsius, std::nullopt);
  EXPECT_EQ(r1.power_milliwatts, 70250);
  // A device that is gone reads as all unknown, not as zeros.
  const DeviceReading gone = (*nvml)->Read(7);
  EXPECT_EQ(gone.index, 7);
  EXPECT_EQ(gone.memory_used_bytes, std::nullopt);
  EXPECT_EQ(gone.utilization_percent, std::nullopt);
  EXPECT_FALSE((*nvml)->Describe(7).ok());
}

TEST_F(GpuDiscoveryTest, LoaderShutsNvmlDownWhenDestroyed) {
  {
    auto nvml = NvmlLibrary::Open(FAKE_NVML_PATH);
    ASSERT_TRUE(nvml.ok()) << nvml.status();
    EXPECT_EQ(fake_.Get("initialized"), 1);
  }
  EXPECT_EQ(fake_.Get("init_calls"), 1);
  EXPECT_EQ(fake_.Get("shutdown_calls"), 1);
  EXPECT_EQ(fake_.Get("initialized"), 0);
}

TEST_F(GpuDiscoveryTest, LoaderErrorsSayWhy) {
  absl::StatusOr<std::unique_ptr<NvmlLibrary>> missing =
      NvmlLibrary::Open(kMissing);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(missing.status().message(),
              HasSubstr(std::string("cannot load ") + kMissing));
  // A library that loads but is not NVML.
  absl::StatusOr<std::unique_ptr<NvmlLibrary>> not_nvml =
      NvmlLibrary::Open("libm.so.6");
  EXPECT_EQ(not_nvml.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(not_nvml.status().message(),
              HasSubstr("not an NVML library: it has no nvmlInit_v2"));
  fake_.Set("init_result", 9);  // NVML_ERROR_DRIVER_NOT_LOADED
  absl::StatusOr<std::unique_ptr<NvmlLibrary>> no_driver =
      NvmlLibrary::Open(FAKE_NVML_PATH);
  EXPECT_THAT(no_driver.status().message(),
              HasSubstr("nvmlInit failed: Driver Not Loaded (is the NVIDIA "
                        "driver loaded?)"));
  EXPECT_EQ(fake_.Get("shutdown_calls"), 0);  // nothing to shut down
}

TEST_F(GpuDiscoveryTest, NoLibraryMeansCpuSlotsOnlyAndSaysWhy) {
  absl::StatusOr<DeviceDiscoveryChoice> c =
      Choose("auto", std::nullopt, kMissing);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(Indices(*c), IsEmpty());
  EXPECT_THAT(c->discovery->Read(), IsEmpty());
  EXPECT_THAT(c->cpu_only_reason,
              HasSubstr(std::string("no GPUs: cannot load ") + kMissing));
  EXPECT_THAT(c->cpu_only_reason, HasSubstr("offering CPU slots only"));
  EXPECT_EQ(c->cpu_only_reason.find('\n'), std::string::npos);  // one line
}

TEST_F(GpuDiscoveryTest, NoDriverMeansCpuSlotsOnly) {
  fake_.Set("init_result", 9);
  absl::StatusOr<DeviceDiscoveryChoice> c = Choose();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(Indices(*c), IsEmpty());
  EXPECT_THAT(c->cpu_only_reason,
              HasSubstr("nvmlInit failed: Driver Not Loaded"));
}

TEST_F(GpuDiscoveryTest, NoDeviceMeansCpuSlotsOnly) {
  fake_.Set("device_count", 0);
  absl::StatusOr<DeviceDiscoveryChoice> c = Choose();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(Indices(*c), IsEmpty());
  EXPECT_THAT(c->cpu_only_reason, HasSubstr("NVML lists no GPU"));
  EXPECT_EQ(fake_.Get("initialized"), 0);  // NVML let go again
}

TEST_F(GpuDiscoveryTest, AutoOffersEveryGpuWithItsCapacity) {
  absl::StatusOr<DeviceDiscoveryChoice> c = Choose();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->cpu_only_reason, "");
  const std::vector<trainyard::v1::Device> devices =
      *c->discovery->ListDevices();
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[1].index(), 1);
  EXPECT_EQ(devices[1].name(), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(devices[1].uuid(), "GPU-b1b1b1b1-1111-4111-8111-111111111111");
  EXPECT_EQ(devices[1].memory_bytes(), kH100Bytes);
  EXPECT_EQ(devices[1].compute_capability(), 90);
  // Capacity only: live figures go with the heartbeats.
  EXPECT_EQ(devices[0].memory_used_bytes(), 0);
  EXPECT_EQ(DescribeDevice(devices[0]),
            "GPU 0: NVIDIA H100 80GB HBM3 "
            "(GPU-a0a0a0a0-0000-4000-8000-000000000000, 79.6 GiB, sm_90)");

  const std::vector<DeviceReading> readings = c->discovery->Read();
  ASSERT_EQ(readings.size(), 2u);
  EXPECT_EQ(readings[0].utilization_percent, 75);
  EXPECT_EQ(readings[1].index, 1);
  const trainyard::v1::Device live = LiveFiguresOf(readings[1]);
  EXPECT_EQ(live.index(), 1);
  EXPECT_EQ(live.temperature_celsius(), 0);  // unknown
  EXPECT_EQ(live.power_milliwatts(), 70250);
}

TEST_F(GpuDiscoveryTest, CudaVisibleDevicesNarrowsAndKeepsPhysicalIndices) {
  fake_.Set("device_count", 4);
  auto offered = [&](const std::string& visible) {
    absl::StatusOr<DeviceDiscoveryChoice> c = Choose("auto", visible);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? Indices(*c) : std::vector<int32_t>{};
  };
  EXPECT_THAT(offered("3,1"), ElementsAre(1, 3));
  EXPECT_THAT(offered("GPU-d4d4,GPU-b1b2"), ElementsAre(2, 3));
  EXPECT_THAT(offered("2,5,0"), ElementsAre(2));

  absl::StatusOr<DeviceDiscoveryChoice> c = Choose("auto", "2,5,0");
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->notes.size(), 1u);
  EXPECT_THAT(c->notes[0], HasSubstr("ignoring \"5,0\""));

  c = Choose("auto", "");
  ASSERT_TRUE(c.ok());
  EXPECT_THAT(Indices(*c), IsEmpty());
  EXPECT_THAT(c->cpu_only_reason,
              HasSubstr("CUDA_VISIBLE_DEVICES=\"\" leaves none of the 4 GPU(s) "
                        "visible"));
}

TEST_F(GpuDiscoveryTest, GpusNoneNeverLoadsNvml) {
  absl::StatusOr<DeviceDiscoveryChoice> c = Choose("none");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(Indices(*c), IsEmpty());
  EXPECT_THAT(c->cpu_only_reason, HasSubstr("--gpus none"));
  EXPECT_EQ(fake_.Get("init_calls"), 0);
}

TEST_F(GpuDiscoveryTest, GpusListTakesExactlyThose) {
  fake_.Set("device_count", 4);
  absl::StatusOr<DeviceDiscoveryChoice> c = Choose("GPU-d4d4,1");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(Indices(*c), ElementsAre(1, 3));
  c = Choose("2", "2,3");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(Indices(*c), ElementsAre(2));
}

TEST_F(GpuDiscoveryTest, GpusListThatCannotBeHadIsAnError) {
  absl::StatusOr<DeviceDiscoveryChoice> c = Choose("0", std::nullopt, kMissing);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(c.status().message(), HasSubstr("--gpus 0: cannot load"));
  c = Choose("5");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("--gpus: \"5\" names no GPU"));
  c = Choose("0", "1");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(),
              HasSubstr("hidden by CUDA_VISIBLE_DEVICES"));
  fake_.Set("init_result", 9);
  c = Choose("1");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(c.status().message(), HasSubstr("--gpus 1: nvmlInit failed"));
}

TEST_F(GpuDiscoveryTest, AGpuNvmlCannotOpenIsLeftOutOrRefused) {
  fake_.Set("handle_result_0", 4);  // NVML_ERROR_NO_PERMISSION
  absl::StatusOr<DeviceDiscoveryChoice> c = Choose();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(Indices(*c), ElementsAre(1));
  ASSERT_FALSE(c->notes.empty());
  EXPECT_THAT(
      c->notes.back(),
      HasSubstr("leaving GPU 0 out: nvmlDeviceGetHandleByIndex of GPU 0 "
                "failed: Insufficient Permissions"));
  c = Choose("0");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(c.status().message(), HasSubstr("Insufficient Permissions"));
}

// A GPU whose UUID NVML gives empty or malformed is still offered (its
// jobs go by index), with a note; the bad UUID never matches an entry of
// CUDA_VISIBLE_DEVICES.
TEST_F(GpuDiscoveryTest, AnUnusableUuidIsNotedAndNeverMatched) {
  fake_.Set("bad_uuid_1", 1);  // empty
  absl::StatusOr<DeviceDiscoveryChoice> c = Choose();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(Indices(*c), ElementsAre(0, 1));
  EXPECT_EQ((*c->discovery->ListDevices())[1].uuid(), "");
  ASSERT_EQ(c->notes.size(), 1u);
  EXPECT_THAT(c->notes[0],
              HasSubstr("GPU 1: NVML gives no usable UUID (\"\")"));
  EXPECT_THAT(c->notes[0], HasSubstr("its index in CUDA_VISIBLE_DEVICES"));

  fake_.Set("bad_uuid_1", 2);      // "GPU-a0a0,1"
  c = Choose("auto", "GPU-a0a0");  // would be ambiguous if it matched
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(Indices(*c), ElementsAre(0));
  c = Choose();
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->notes.size(), 1u);
  EXPECT_THAT(c->notes[0], HasSubstr("no usable UUID (\"GPU-a0a0,1\")"));
}

}  // namespace
}  // namespace trainyard::worker
