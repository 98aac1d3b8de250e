// DeviceTelemetry: a reading is there as soon as Start returns, readings go
// on in the background, and a reader that blocks never blocks Latest().
#include "worker/device_telemetry.h"

#include <atomic>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace trainyard::worker {
namespace {

TEST(DeviceTelemetryTest, FirstReadingBeforeStartReturnsThenMore) {
  std::atomic<int> calls = 0;
  auto telemetry = DeviceTelemetry::Start(
      [&calls] {
        DeviceReading r;
        r.utilization_percent = ++calls;
        return std::vector<DeviceReading>{r};
      },
      absl::Milliseconds(1));
  std::vector<DeviceReading> first = telemetry->Latest();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_GE(first[0].utilization_percent.value_or(0), 1);
  ASSERT_TRUE(telemetry->AwaitReads(3, absl::Now() + absl::Seconds(20)));
  EXPECT_GE(telemetry->Latest()[0].utilization_percent.value_or(0), 3);
}

TEST(DeviceTelemetryTest, ASlowReadDoesNotHoldUpLatest) {
  absl::Notification release;
  std::atomic<int> calls = 0;
  auto telemetry = DeviceTelemetry::Start(
      [&] {
        if (++calls == 2) release.WaitForNotification();  // a stalled driver
        DeviceReading r;
        r.index = 4;
        return std::vector<DeviceReading>{r};
      },
      absl::Milliseconds(1));
  // The second read is stuck; the first reading is still served.
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(telemetry->Latest().size(), 1u);
    EXPECT_EQ(telemetry->Latest()[0].index, 4);
  }
  EXPECT_FALSE(telemetry->AwaitReads(2, absl::Now() + absl::Milliseconds(20)));
  release.Notify();
  EXPECT_TRUE(telemetry->AwaitReads(2, absl::Now() + absl::Seconds(20)));
}

TEST(DeviceTelemetryTest, StopsWithoutWaitingForThePeriod) {
  auto telemetry = DeviceTelemetry::Start(
      [] { return std::vector<DeviceReading>{}; }, absl::Hours(1));
  EXPECT_TRUE(telemetry->Latest().empty());
  telemetry.reset();  // must not wait an hour
}

}  // namespace
}  // namespace trainyard::worker
