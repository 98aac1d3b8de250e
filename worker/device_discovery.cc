#include "worker/device_discovery.h"

namespace trainyard::worker {

// CPU slots only for now; a CUDA build will list its GPUs here.
std::unique_ptr<DeviceDiscovery> DefaultDeviceDiscovery() {
  return std::make_unique<CpuOnlyDiscovery>();
}

}  // namespace trainyard::worker
