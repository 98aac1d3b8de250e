// The emulated CUDA events and devices the NCCL glue needs (runtime.h):
// events complete once recorded and are checked as handles; the device
// count comes from YARD_EMULATION_DEVICES (ctest sets 3 for this test),
// devices differ in ordinal and UUID, and cudaMalloc's blocks remember
// their device.
#include <cstring>
#include <string>

#include "engine/cuda/emulation/runtime.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::cuda_emulation {
namespace {

using ::testing::HasSubstr;

TEST(EmulatedEventsTest, CompleteOnceRecordedOnASynchronousStream) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cudaEvent_t plain = nullptr, untimed = nullptr;
  ASSERT_EQ(cudaEventCreate(&plain), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming),
            cudaSuccess);
  EXPECT_EQ(cudaEventQuery(untimed), cudaSuccess);  // never recorded
  EXPECT_EQ(cudaEventRecord(untimed, stream), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(untimed), cudaSuccess);
  EXPECT_EQ(cudaEventSynchronize(untimed), cudaSuccess);
  EXPECT_EQ(cudaStreamWaitEvent(nullptr, untimed, 0), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(plain), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(plain), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(untimed), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

// The time between two records; CUDA's errors for an event that keeps no
// time or was never recorded.
TEST(EmulatedEventsTest, ElapsedTimeIsBetweenTheRecords) {
  cudaEvent_t start = nullptr, end = nullptr, untimed = nullptr;
  ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&end), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming),
            cudaSuccess);
  float ms = -1.f;
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, end),
            cudaErrorInvalidResourceHandle);  // neither recorded
  ASSERT_EQ(cudaEventRecord(start), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(end), cudaSuccess);
  ASSERT_EQ(cudaEventElapsedTime(&ms, start, end), cudaSuccess);
  EXPECT_GE(ms, 0.f);
  float back = 1.f;
  ASSERT_EQ(cudaEventElapsedTime(&back, end, start), cudaSuccess);
  EXPECT_EQ(back, -ms);
  ASSERT_EQ(cudaEventRecord(untimed), cudaSuccess);
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, untimed),
            cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventElapsedTime(nullptr, start, end), cudaErrorInvalidValue);
  ASSERT_EQ(cudaEventDestroy(end), cudaSuccess);
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, end),
            cudaErrorInvalidResourceHandle);
  ASSERT_EQ(cudaEventDestroy(start), cudaSuccess);
  ASSERT_EQ(cudaEventDestroy(untimed), cudaSuccess);
}

TEST(EmulatedEventsTest, RefuseBadFlagsAndHandles) {
  cudaEvent_t event = nullptr;
  EXPECT_EQ(cudaEventCreateWithFlags(&event, 0x80), cudaErrorInvalidValue);
  // CUDA: an interprocess event must also disable timing.
  EXPECT_EQ(cudaEventCreateWithFlags(&event, cudaEventInterprocess),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaEventCreateWithFlags(nullptr, 0), cudaErrorInvalidValue);
  EXPECT_EQ(cudaEventRecord(nullptr), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventQuery(nullptr), cudaErrorInvalidResourceHandle);
  ASSERT_EQ(cudaEventCreate(&event), cudaSuccess);
  EXPECT_EQ(cudaStreamWaitEvent(nullptr, event, 7), cudaErrorInvalidValue);
  ASSERT_EQ(cudaEventDestroy(event), cudaSuccess);
  // Destroyed: no longer an event.
  EXPECT_EQ(cudaEventQuery(event), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamWaitEvent(nullptr, event, 0),
            cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventDestroy(event), cudaErrorInvalidResourceHandle);
  EXPECT_STREQ(cudaGetErrorName(cudaErrorNotReady), "cudaErrorNotReady");
  EXPECT_EQ(static_cast<int>(cudaErrorNotReady), 600);
  EXPECT_STREQ(cudaGetErrorString(cudaErrorInvalidResourceHandle),
               "invalid resource handle");
}

TEST(EmulatedDevicesTest, CountComesFromTheEnvironment) {
  std::string problem;
  EXPECT_EQ(ParseEmulatedDeviceCount(nullptr, &problem), 1);
  EXPECT_EQ(ParseEmulatedDeviceCount("2", &problem), 2);
  EXPECT_EQ(ParseEmulatedDeviceCount("8", &problem), 8);
  EXPECT_EQ(problem, "");
  for (const char* bad : {"0", "9", "-1", "two", "2x", ""}) {
    problem.clear();
    EXPECT_EQ(ParseEmulatedDeviceCount(bad, &problem), 1) << bad;
    EXPECT_THAT(problem, HasSubstr("YARD_EMULATION_DEVICES=")) << bad;
  }
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  ASSERT_EQ(count, 3) << "run with YARD_EMULATION_DEVICES=3 (ctest sets it)";
}

TEST(EmulatedDevicesTest, MemoryComesFromTheEnvironment) {
  std::string problem;
  EXPECT_EQ(ParseEmulatedDeviceBytes(nullptr, &problem),
            kDefaultEmulatedDeviceBytes);
  EXPECT_EQ(ParseEmulatedDeviceBytes("64", &problem), size_t{64} << 20);
  EXPECT_EQ(ParseEmulatedDeviceBytes("1048576", &problem), size_t{1} << 40);
  EXPECT_EQ(problem, "");
  for (const char* bad : {"0", "1048577", "-5", "lots", "64M", ""}) {
    problem.clear();
    EXPECT_EQ(ParseEmulatedDeviceBytes(bad, &problem),
              kDefaultEmulatedDeviceBytes)
        << bad;
    EXPECT_THAT(problem, HasSubstr("YARD_EMULATION_DEVICE_MIB=")) << bad;
  }
}

TEST(EmulatedDevicesTest, DifferInOrdinalAndUuidAndShareOnePool) {
  cudaDeviceProp zero{}, two{};
  ASSERT_EQ(cudaGetDeviceProperties(&zero, 0), cudaSuccess);
  ASSERT_EQ(cudaGetDeviceProperties(&two, 2), cudaSuccess);
  EXPECT_NE(std::memcmp(zero.uuid.bytes, two.uuid.bytes, 16), 0);
  EXPECT_STREQ(zero.name, two.name);
  EXPECT_EQ(cudaGetDeviceProperties(&two, 3), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaSetDevice(3), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaSetDevice(-1), cudaErrorInvalidDevice);

  size_t free_before = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(2), cudaSuccess);
  void* on_two = nullptr;
  ASSERT_EQ(cudaMalloc(&on_two, 1000), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  size_t free_after = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  EXPECT_EQ(free_before - free_after, 1024u);  // one pool, seen from 0
  char* p = static_cast<char*>(on_two);
  EXPECT_EQ(DeviceHolding(p, 1000), 2);
  EXPECT_EQ(DeviceHolding(p + 24, 1000), 2);   // within the rounded block
  EXPECT_EQ(DeviceHolding(p + 24, 1001), -1);  // past it
  EXPECT_EQ(DeviceHolding(&free_after, 8), -1);
  ASSERT_EQ(cudaFree(on_two), cudaSuccess);
  EXPECT_EQ(DeviceHolding(p, 1), -1);
}

}  // namespace
}  // namespace trainyard::cuda_emulation
