#include "worker/device_telemetry.h"

#include <utility>

namespace trainyard::worker {

DeviceTelemetry::DeviceTelemetry(Reader read, absl::Duration period)
    : read_(std::move(read)), period_(period) {}

std::unique_ptr<DeviceTelemetry> DeviceTelemetry::Start(Reader read,
                                                        absl::Duration period) {
  // Not make_unique: the constructor is private.
  std::unique_ptr<DeviceTelemetry> t(
      new DeviceTelemetry(std::move(read), period));
  t->ReadOnce();
  t->thread_ = std::thread([raw = t.get()] { raw->Loop(); });
  return t;
}

DeviceTelemetry::~DeviceTelemetry() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void DeviceTelemetry::ReadOnce() {
  // Outside the lock: readers of Latest() never wait for the driver.
  std::vector<DeviceReading> reading = read_();
  absl::MutexLock lock(&mu_);
  latest_ = std::move(reading);
  ++reads_;
}

void DeviceTelemetry::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_;
      };
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping), period_)) return;
    }
    ReadOnce();
  }
}

std::vector<DeviceReading> DeviceTelemetry::Latest() const {
  absl::MutexLock lock(&mu_);
  return latest_;
}

bool DeviceTelemetry::AwaitReads(int64_t n, absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto done = [this, n]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return reads_ >= n; };
  return mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
}

}  // namespace trainyard::worker
