// Which of a node's GPUs this worker offers: the --gpus flag (auto, none or
// a list) and $CUDA_VISIBLE_DEVICES, applied to the devices NVML lists.
//
// A GPU is named by its NVML index (nvidia-smi's, PCI bus order); the
// worker runs its jobs with CUDA_DEVICE_ORDER=PCI_BUS_ID, under which CUDA
// numbers the devices as NVML does. A worker started with
// CUDA_VISIBLE_DEVICES=2,3 thus offers GPUs 2 and 3. A job placed on GPU 3
// gets that GPU's UUID in its own CUDA_VISIBLE_DEVICES, not the index: an
// MPS server started with CUDA_VISIBLE_DEVICES of its own numbers the
// devices it shows its clients afresh, so an index could name another GPU
// or none, while a UUID names the same GPU everywhere.
//
// Pure functions; thread-safe.
#ifndef TRAINYARD_WORKER_GPU_SELECTION_H_
#define TRAINYARD_WORKER_GPU_SELECTION_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainyard::worker {

// The --gpus flag.
struct GpuSelection {
  enum class Mode {
    kAuto,  // every GPU NVML lists that CUDA_VISIBLE_DEVICES leaves visible
    kNone,  // none: CPU slots only, NVML is not even loaded
    kList,  // exactly these, each of which must exist and be visible
  };
  Mode mode = Mode::kAuto;
  // kList: NVML indices ("0") or UUIDs ("GPU-8f2e...", a unique prefix is
  // enough), in the order given.
  std::vector<std::string> devices;
};

// "auto", "none", or a comma-separated list of indices and UUIDs.
// INVALID_ARGUMENT naming --gpus otherwise.
absl::StatusOr<GpuSelection> ParseGpuSelection(absl::string_view value);

// A device as NVML lists it; an empty uuid when NVML could not read it.
struct NvmlDeviceId {
  int32_t index = 0;
  std::string uuid;
};

// What CUDA_VISIBLE_DEVICES leaves visible, read as CUDA reads it: entries
// are indices or UUIDs ("GPU-" and a unique prefix of the rest); the first
// entry that names no device, or one already named, ends the list, and the
// entries from there on are `ignored`. An empty value hides every device.
struct VisibleDevices {
  std::vector<int32_t> indices;  // in the order listed
  std::vector<std::string> ignored;
};
VisibleDevices ResolveCudaVisibleDevices(
    absl::string_view value, const std::vector<NvmlDeviceId>& devices);

// The indices of the GPUs to offer, ascending. `cuda_visible_devices` is
// the variable's value, nullopt when it is unset. For kList, an entry that
// names no device, a hidden one, or one named twice is INVALID_ARGUMENT
// naming --gpus. `notes` (if not null) gets one line per thing a person
// should know (entries CUDA_VISIBLE_DEVICES drops).
absl::StatusOr<std::vector<int32_t>> SelectGpus(
    const GpuSelection& selection,
    const std::optional<std::string>& cuda_visible_devices,
    const std::vector<NvmlDeviceId>& devices,
    std::vector<std::string>* notes = nullptr);

// Whether `uuid` can stand for its GPU in CUDA_VISIBLE_DEVICES: "GPU-" and
// hex digits and dashes, as NVML and nvidia-smi write it. Anything else
// (empty, or with a comma that would split the list) is not used.
bool IsGpuUuid(absl::string_view uuid);

// The CUDA_VISIBLE_DEVICES that shows a process exactly the GPUs `indices`
// (NVML indices), in that order: each one's UUID from `uuids`, or its index
// where the UUID is missing or not IsGpuUuid. Empty for no GPU (which hides
// them all). ResolveCudaVisibleDevices reads it back to `indices`.
std::string CudaVisibleDevicesFor(const std::vector<int32_t>& indices,
                                  const std::map<int32_t, std::string>& uuids);

}  // namespace trainyard::worker

#endif  // TRAINYARD_WORKER_GPU_SELECTION_H_
