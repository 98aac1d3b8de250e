// DeviceDiscovery: which accelerators this worker owns, reported in its
// WorkerHello and handed out to assignments by index, and their live
// figures (memory in use, utilisation, temperature, power), sent with each
// heartbeat and exported as metrics. Behind an interface so that the worker
// runs the same with GPUs (gpu_discovery.h, NVML) or without. Implementations
// are safe to call from any thread.
#ifndef TRAINYARD_WORKER_DEVICE_DISCOVERY_H_
#define TRAINYARD_WORKER_DEVICE_DISCOVERY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "trainyard/v1/cluster.pb.h"

namespace trainyard::worker {

// One reading of one device's live figures. A figure the device cannot
// report (not supported, no permission) stays empty.
struct DeviceReading {
  int32_t index = 0;  // as in ListDevices
  std::optional<int64_t> memory_used_bytes;
  std::optional<int32_t> utilization_percent;
  std::optional<int32_t> temperature_celsius;
  std::optional<int32_t> power_milliwatts;
};

class DeviceDiscovery {
 public:
  virtual ~DeviceDiscovery() = default;
  // The devices and their capacity (index, name, uuid, memory_bytes,
  // compute_capability); the same list for the life of the object.
  virtual absl::StatusOr<std::vector<trainyard::v1::Device>> ListDevices() = 0;
  // Reads the live figures of those devices now. May take a few
  // milliseconds per device (driver calls): call it off latency-sensitive
  // paths (DeviceTelemetry does).
  virtual std::vector<DeviceReading> Read() { return {}; }
};

// A worker without accelerators: jobs run on its CPU slots only.
class CpuOnlyDiscovery : public DeviceDiscovery {
 public:
  absl::StatusOr<std::vector<trainyard::v1::Device>> ListDevices() override {
    return std::vector<trainyard::v1::Device>{};
  }
};

// The live figures of `reading` as a heartbeat carries them: the index and
// the figures, 0 where a figure is unknown.
trainyard::v1::Device LiveFiguresOf(const DeviceReading& reading);

}  // namespace trainyard::worker

#endif  // TRAINYARD_WORKER_DEVICE_DISCOVERY_H_
