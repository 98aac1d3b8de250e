// Choosing the worker's DeviceDiscovery at start-up: its GPUs as NVML
// (loaded at run time, nvml_library.h) lists them, narrowed by --gpus and
// $CUDA_VISIBLE_DEVICES (gpu_selection.h), or CPU slots only when the
// machine has no usable NVIDIA driver. The chosen discovery describes each
// GPU once (name, UUID, memory, compute capability) and reads its live
// figures through NVML on each Read().
//
// ChooseDeviceDiscovery is thread-safe; the discovery it returns is too.
#ifndef TRAINYARD_WORKER_GPU_DISCOVERY_H_
#define TRAINYARD_WORKER_GPU_DISCOVERY_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/device_discovery.h"
#include "worker/gpu_selection.h"
#include "worker/nvml_library.h"

namespace trainyard::worker {

struct GpuDiscoveryOptions {
  GpuSelection selection;  // --gpus
  // $CUDA_VISIBLE_DEVICES; nullopt when it is unset.
  std::optional<std::string> cuda_visible_devices;
  std::string nvml_library = kNvmlLibraryName;  // given to dlopen
};

struct DeviceDiscoveryChoice {
  std::unique_ptr<DeviceDiscovery> discovery;
  // Why the worker offers no GPU, when it offers none: one line for the
  // log ("no GPUs: cannot load libnvidia-ml.so.1: ...").
  std::string cpu_only_reason;
  // Other things a person should know (CUDA_VISIBLE_DEVICES entries
  // ignored, a GPU NVML could not describe), one line each.
  std::vector<std::string> notes;
};

// The discovery `options` ask for. With --gpus auto every failure to find
// GPUs (no library, no driver, no device) gives CPU-only and a reason;
// with --gpus naming GPUs, not finding each of them is an error naming
// --gpus (INVALID_ARGUMENT when the list is wrong for this machine,
// UNAVAILABLE when NVML cannot be used).
absl::StatusOr<DeviceDiscoveryChoice> ChooseDeviceDiscovery(
    const GpuDiscoveryOptions& options);

// "GPU 0: NVIDIA H100 80GB HBM3 (GPU-..., 79.6 GiB, sm_90)", for the log.
std::string DescribeDevice(const trainyard::v1::Device& device);

}  // namespace trainyard::worker

#endif  // TRAINYARD_WORKER_GPU_DISCOVERY_H_
