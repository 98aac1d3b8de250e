// DeviceDiscovery: which accelerators this worker owns, reported in its
// WorkerHello and handed out to assignments by index. Behind an interface so
// GPU discovery (CUDA/NVML, in the engine's CUDA library) plugs in without
// touching the rest of the worker. Implementations are safe to call from
// any thread.
#ifndef TRAINYARD_WORKER_DEVICE_DISCOVERY_H_
#define TRAINYARD_WORKER_DEVICE_DISCOVERY_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "trainyard/v1/cluster.pb.h"

namespace trainyard::worker {

class DeviceDiscovery {
 public:
  virtual ~DeviceDiscovery() = default;
  virtual absl::StatusOr<std::vector<trainyard::v1::Device>> ListDevices() = 0;
};

// A worker without accelerators: jobs run on its CPU slots only.
class CpuOnlyDiscovery : public DeviceDiscovery {
 public:
  absl::StatusOr<std::vector<trainyard::v1::Device>> ListDevices() override {
    return std::vector<trainyard::v1::Device>{};
  }
};

// The discovery this build supports.
std::unique_ptr<DeviceDiscovery> DefaultDeviceDiscovery();

}  // namespace trainyard::worker

#endif  // TRAINYARD_WORKER_DEVICE_DISCOVERY_H_
