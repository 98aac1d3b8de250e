#include "worker/gpu_selection.h"

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace trainyard::worker {
namespace {

constexpr absl::string_view kUuidPrefix = "GPU-";

std::vector<std::string> Entries(absl::string_view value) {
  std::vector<std::string> out;
  for (absl::string_view e : absl::StrSplit(value, ',')) {
    out.emplace_back(absl::StripAsciiWhitespace(e));
  }
  return out;
}

bool IsIndex(absl::string_view entry) {
  return !entry.empty() && std::all_of(entry.begin(), entry.end(), [](char c) {
    return absl::ascii_isdigit(c);
  });
}

// The index of the device `entry` names: an index NVML lists, or a UUID or
// unique UUID prefix (case-insensitive). Nullopt when it names none, or
// more than one.
std::optional<int32_t> Find(absl::string_view entry,
                            const std::vector<NvmlDeviceId>& devices) {
  if (IsIndex(entry)) {
    int32_t index;
    if (!absl::SimpleAtoi(entry, &index)) return std::nullopt;
    for (const NvmlDeviceId& d : devices) {
      if (d.index == index) return index;
    }
    return std::nullopt;
  }
  if (!absl::StartsWithIgnoreCase(entry, kUuidPrefix) ||
      entry.size() == kUuidPrefix.size()) {
    return std::nullopt;
  }
  std::optional<int32_t> found;
  for (const NvmlDeviceId& d : devices) {
    if (d.uuid.empty() || !absl::StartsWithIgnoreCase(d.uuid, entry)) continue;
    if (found.has_value()) return std::nullopt;  // ambiguous
    found = d.index;
  }
  return found;
}

std::string Known(const std::vector<NvmlDeviceId>& devices) {
  if (devices.empty()) return "this machine has no GPU";
  return absl::StrCat(
      "this machine has ",
      absl::StrJoin(devices, ", ", [](std::string* out, const NvmlDeviceId& d) {
        absl::StrAppend(out, d.index,
                        d.uuid.empty() ? "" : " (" + d.uuid + ")");
      }));
}

absl::StatusOr<std::vector<int32_t>> SelectListed(
    const GpuSelection& selection,
    const std::optional<std::string>& cuda_visible_devices,
    const std::vector<NvmlDeviceId>& devices, const VisibleDevices& visible) {
  std::set<int32_t> chosen;
  for (const std::string& entry : selection.devices) {
    const std::optional<int32_t> index = Find(entry, devices);
    if (!index.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--gpus: \"", entry,
                       "\" names no GPU (or more than one): ", Known(devices)));
    }
    if (cuda_visible_devices.has_value() &&
        std::find(visible.indices.begin(), visible.indices.end(), *index) ==
            visible.indices.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--gpus: GPU ", *index, " is hidden by CUDA_VISIBLE_DEVICES=\"",
          *cuda_visible_devices, "\""));
    }
    if (!chosen.insert(*index).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--gpus: GPU ", *index, " is named twice"));
    }
  }
  return std::vector<int32_t>(chosen.begin(), chosen.end());
}

}  // namespace

absl::StatusOr<GpuSelection> ParseGpuSelection(absl::string_view value) {
  GpuSelection s;
  const std::string v =
      absl::AsciiStrToLower(absl::StripAsciiWhitespace(value));
  if (v == "auto") return s;
  if (v == "none") {
    s.mode = GpuSelection::Mode::kNone;
    return s;
  }
  s.mode = GpuSelection::Mode::kList;
  for (std::string& entry : Entries(value)) {
    const bool uuid = absl::StartsWithIgnoreCase(entry, kUuidPrefix) &&
                      entry.size() > kUuidPrefix.size();
    int32_t index;
    if (!uuid && !(IsIndex(entry) && absl::SimpleAtoi(entry, &index))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--gpus must be auto, none, or a comma-separated list of GPU "
          "indices and UUIDs (e.g. 0,1 or GPU-8f2e...), got \"",
          value, "\""));
    }
    s.devices.push_back(std::move(entry));
  }
  return s;
}

VisibleDevices ResolveCudaVisibleDevices(
    absl::string_view value, const std::vector<NvmlDeviceId>& devices) {
  VisibleDevices out;
  if (absl::StripAsciiWhitespace(value).empty()) return out;
  const std::vector<std::string> entries = Entries(value);
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::optional<int32_t> index = Find(entries[i], devices);
    if (!index.has_value() || std::find(out.indices.begin(), out.indices.end(),
                                        *index) != out.indices.end()) {
      out.ignored.assign(entries.begin() + static_cast<ptrdiff_t>(i),
                         entries.end());
      break;
    }
    out.indices.push_back(*index);
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> SelectGpus(
    const GpuSelection& selection,
    const std::optional<std::string>& cuda_visible_devices,
    const std::vector<NvmlDeviceId>& devices, std::vector<std::string>* notes) {
  if (selection.mode == GpuSelection::Mode::kNone)
    return std::vector<int32_t>{};
  VisibleDevices visible;
  if (cuda_visible_devices.has_value()) {
    visible = ResolveCudaVisibleDevices(*cuda_visible_devices, devices);
    if (notes != nullptr && !visible.ignored.empty()) {
      notes->push_back(absl::StrCat(
          "CUDA_VISIBLE_DEVICES=\"", *cuda_visible_devices, "\": ignoring \"",
          absl::StrJoin(visible.ignored, ","),
          "\" (as CUDA does, from the first entry that names no GPU of ",
          "this machine, or one named before)"));
    }
  } else {
    for (const NvmlDeviceId& d : devices) visible.indices.push_back(d.index);
  }
  if (selection.mode == GpuSelection::Mode::kList) {
    return SelectListed(selection, cuda_visible_devices, devices, visible);
  }
  std::vector<int32_t> out = visible.indices;
  std::sort(out.begin(), out.end());
  return out;
}

bool IsGpuUuid(absl::string_view uuid) {
  if (!absl::StartsWith(uuid, kUuidPrefix) ||
      uuid.size() == kUuidPrefix.size()) {
    return false;
  }
  uuid.remove_prefix(kUuidPrefix.size());
  return std::all_of(uuid.begin(), uuid.end(), [](char c) {
    return absl::ascii_isxdigit(c) || c == '-';
  });
}

std::string CudaVisibleDevicesFor(const std::vector<int32_t>& indices,
                                  const std::map<int32_t, std::string>& uuids) {
  return absl::StrJoin(indices, ",", [&](std::string* out, int32_t index) {
    auto uuid = uuids.find(index);
    if (uuid != uuids.end() && IsGpuUuid(uuid->second)) {
      absl::StrAppend(out, uuid->second);
    } else {
      absl::StrAppend(out, index);
    }
  });
}

}  // namespace trainyard::worker
