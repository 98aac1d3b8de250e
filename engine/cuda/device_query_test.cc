// Device listing and the kernel probe on a real GPU; skipped without one.
#include "engine/cuda/device_query.h"

#include "gtest/gtest.h"

namespace trainyard::engine::cuda {
namespace {

TEST(FormatGpuUuidTest, MatchesNvidiaSmi) {
  const unsigned char b[16] = {0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0,
                               0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef};
  EXPECT_EQ(FormatGpuUuid(b), "GPU-12345678-9abc-def0-0123-456789abcdef");
}

TEST(DeviceQueryTest, ListsDevicesAndRunsAKernelOnEach) {
  absl::StatusOr<std::vector<CudaDeviceInfo>> devices = ListCudaDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  if (devices->empty())
    GTEST_SKIP() << "no CUDA device or driver on this machine";
  for (const CudaDeviceInfo& d : *devices) {
    EXPECT_FALSE(d.name.empty());
    EXPECT_EQ(d.uuid.size(), 40u) << d.uuid;
    EXPECT_GT(d.total_memory_bytes, 0);
    EXPECT_GE(d.compute_major, 1);
    EXPECT_TRUE(ProbeCudaDevice(d.ordinal).ok())
        << d.name << ": " << ProbeCudaDevice(d.ordinal);
  }
}

}  // namespace
}  // namespace trainyard::engine::cuda
