// DeviceTelemetry: the latest live figures of this worker's devices, read
// on a thread of its own every `period`. Heartbeats and /metrics scrapes
// take the cached reading, so a slow driver call (NVML can stall while a
// GPU resets) never holds up a heartbeat, whose lateness would cost the
// worker its lease.
//
// Thread-safe. The destructor stops the thread (waiting for a read under
// way to finish).
#ifndef TRAINYARD_WORKER_DEVICE_TELEMETRY_H_
#define TRAINYARD_WORKER_DEVICE_TELEMETRY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/device_discovery.h"

namespace trainyard::worker {

class DeviceTelemetry {
 public:
  using Reader = std::function<std::vector<DeviceReading>()>;

  // Reads once before returning (so the first heartbeat has figures), then
  // every `period` on the telemetry thread.
  static std::unique_ptr<DeviceTelemetry> Start(Reader read,
                                                absl::Duration period);
  ~DeviceTelemetry();
  DeviceTelemetry(const DeviceTelemetry&) = delete;
  DeviceTelemetry& operator=(const DeviceTelemetry&) = delete;

  // The last reading; empty before the first.
  std::vector<DeviceReading> Latest() const;
  // Waits until `n` readings were taken in all, or `deadline`; true when
  // they were.
  bool AwaitReads(int64_t n, absl::Time deadline) const;

 private:
  DeviceTelemetry(Reader read, absl::Duration period);
  void ReadOnce();
  void Loop();

  const Reader read_;
  const absl::Duration period_;
  mutable absl::Mutex mu_;
  std::vector<DeviceReading> latest_ ABSL_GUARDED_BY(mu_);
  int64_t reads_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace trainyard::worker

#endif  // TRAINYARD_WORKER_DEVICE_TELEMETRY_H_
