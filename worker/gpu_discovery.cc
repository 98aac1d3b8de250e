#include "worker/gpu_discovery.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace trainyard::worker {
namespace {

// GPUs as NVML describes them; live figures read through NVML.
class NvmlDiscovery : public DeviceDiscovery {
 public:
  NvmlDiscovery(std::unique_ptr<NvmlLibrary> nvml,
                std::vector<trainyard::v1::Device> devices)
      : nvml_(std::move(nvml)), devices_(std::move(devices)) {}

  absl::StatusOr<std::vector<trainyard::v1::Device>> ListDevices() override {
    return devices_;
  }

  std::vector<DeviceReading> Read() override {
    std::vector<DeviceReading> out;
    out.reserve(devices_.size());
    for (const trainyard::v1::Device& d : devices_) {
      out.push_back(nvml_->Read(d.index()));
    }
    return out;
  }

 private:
  const std::unique_ptr<NvmlLibrary> nvml_;
  const std::vector<trainyard::v1::Device> devices_;
};

DeviceDiscoveryChoice CpuOnly(absl::string_view reason,
                              std::vector<std::string> notes = {}) {
  DeviceDiscoveryChoice c;
  c.discovery = std::make_unique<CpuOnlyDiscovery>();
  c.cpu_only_reason =
      absl::StrCat("no GPUs: ", reason, "; offering CPU slots only");
  c.notes = std::move(notes);
  return c;
}

// Every device NVML lists, with its UUID where NVML gives a well-formed
// one: a malformed one must not match entries of CUDA_VISIBLE_DEVICES.
std::vector<NvmlDeviceId> ListIds(const NvmlLibrary& nvml, int32_t count,
                                  std::vector<std::string>& notes) {
  std::vector<NvmlDeviceId> ids;
  for (int32_t i = 0; i < count; ++i) {
    absl::StatusOr<std::string> uuid = nvml.Uuid(i);
    if (!uuid.ok()) notes.push_back(std::string(uuid.status().message()));
    ids.push_back({i, uuid.ok() && IsGpuUuid(*uuid) ? *uuid : ""});
  }
  return ids;
}

// Jobs name their GPUs by UUID (gpu_selection.h); one without a usable UUID
// is named by index, which is wrong under an MPS server that renumbers.
void NoteUnusableUuid(const NvmlDeviceInfo& info,
                      std::vector<std::string>& notes) {
  if (IsGpuUuid(info.uuid)) return;
  notes.push_back(absl::StrCat(
      "GPU ", info.index, ": NVML gives no usable UUID (\"",
      absl::CEscape(info.uuid),
      "\"); its jobs get its index in CUDA_VISIBLE_DEVICES, which an MPS "
      "server started with a CUDA_VISIBLE_DEVICES of its own may number "
      "differently"));
}

trainyard::v1::Device ToProto(const NvmlDeviceInfo& info) {
  trainyard::v1::Device d;
  d.set_index(info.index);
  d.set_name(info.name);
  d.set_uuid(info.uuid);
  d.set_memory_bytes(info.memory_bytes);
  d.set_compute_capability(info.compute_capability);
  return d;
}

std::string NoneVisible(const GpuDiscoveryOptions& options, int32_t count) {
  if (count == 0) return "NVML lists no GPU on this machine";
  return absl::StrCat("CUDA_VISIBLE_DEVICES=\"",
                      options.cuda_visible_devices.value_or(""),
                      "\" leaves none of the ", count, " GPU(s) visible");
}

}  // namespace

absl::StatusOr<DeviceDiscoveryChoice> ChooseDeviceDiscovery(
    const GpuDiscoveryOptions& options) {
  const bool listed = options.selection.mode == GpuSelection::Mode::kList;
  if (options.selection.mode == GpuSelection::Mode::kNone) {
    return CpuOnly("--gpus none");
  }
  // With --gpus naming GPUs, not being able to look is an error.
  const auto unusable = [&](const absl::Status& s) {
    return absl::UnavailableError(
        absl::StrCat("--gpus ", absl::StrJoin(options.selection.devices, ","),
                     ": ", s.message()));
  };
  absl::StatusOr<std::unique_ptr<NvmlLibrary>> nvml =
      NvmlLibrary::Open(options.nvml_library);
  if (!nvml.ok()) {
    if (listed) return unusable(nvml.status());
    return CpuOnly(nvml.status().message());
  }
  absl::StatusOr<int32_t> count = (*nvml)->DeviceCount();
  if (!count.ok()) {
    if (listed) return unusable(count.status());
    return CpuOnly(count.status().message());
  }
  std::vector<std::string> notes;
  const std::vector<NvmlDeviceId> ids = ListIds(**nvml, *count, notes);
  absl::StatusOr<std::vector<int32_t>> chosen =
      SelectGpus(options.selection, options.cuda_visible_devices, ids, &notes);
  if (!chosen.ok()) return chosen.status();
  std::vector<trainyard::v1::Device> devices;
  for (int32_t index : *chosen) {
    absl::StatusOr<NvmlDeviceInfo> info = (*nvml)->Describe(index);
    if (!info.ok()) {
      if (listed) return unusable(info.status());
      notes.push_back(absl::StrCat("leaving GPU ", index,
                                   " out: ", info.status().message()));
      continue;
    }
    NoteUnusableUuid(*info, notes);
    devices.push_back(ToProto(*info));
  }
  if (devices.empty()) {
    return CpuOnly(chosen->empty() ? NoneVisible(options, *count)
                                   : "no GPU could be described",
                   std::move(notes));
  }
  DeviceDiscoveryChoice c;
  c.discovery =
      std::make_unique<NvmlDiscovery>(*std::move(nvml), std::move(devices));
  c.notes = std::move(notes);
  return c;
}

std::string DescribeDevice(const trainyard::v1::Device& d) {
  std::string out =
      absl::StrFormat("GPU %d: %s (%s, %.1f GiB", d.index(),
                      d.name().empty() ? "unnamed" : d.name(),
                      d.uuid().empty() ? "no UUID" : d.uuid(),
                      static_cast<double>(d.memory_bytes()) / (1 << 30));
  if (d.compute_capability() > 0) {
    absl::StrAppend(&out, ", sm_", d.compute_capability());
  }
  return out + ")";
}

}  // namespace trainyard::worker
