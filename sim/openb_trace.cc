#include "sim/openb_trace.h"

#include <fstream>
#include <functional>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace trainyard::sim {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kSmallestGpu = 16 * kGiB;

using Row = std::vector<std::string>;

// Calls `on_row` for every data row; errors carry file:line.
absl::Status ForEachRow(const std::string& path, size_t min_fields,
                        const std::function<absl::Status(const Row&)>& on_row) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    absl::string_view text = absl::StripTrailingAsciiWhitespace(line);
    if (number == 1 || text.empty()) continue;  // header
    Row row = absl::StrSplit(text, ',');
    absl::Status s = row.size() < min_fields
                         ? absl::InvalidArgumentError(absl::StrCat(
                               "expected at least ", min_fields, " fields"))
                         : on_row(row);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", number, ": ", s.message()));
    }
  }
  if (number == 0) return absl::InvalidArgumentError(path + ": empty file");
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Field(const Row& row, size_t i, const char* name) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(row[i], &v) || v < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " \"", row[i], "\" is not a non-negative integer"));
  }
  return v;
}

// An empty time stays -1 (a pod never scheduled has no scheduled_time).
absl::Status ReadTime(const Row& row, size_t i, const char* name,
                      int64_t& out) {
  if (row[i].empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(out, Field(row, i, name));
  return absl::OkStatus();
}

absl::Status ReadTimes(const Row& row, TracePod& pod) {
  if (row.size() < 11) return absl::OkStatus();
  RETURN_IF_ERROR(ReadTime(row, 8, "creation_time", pod.creation_time));
  RETURN_IF_ERROR(ReadTime(row, 9, "deletion_time", pod.deletion_time));
  return ReadTime(row, 10, "scheduled_time", pod.scheduled_time);
}

}  // namespace

int64_t GpuMemoryBytesOf(const std::string& model) {
  if (model == "V100M32") return 32 * kGiB;
  if (model == "A10") return 24 * kGiB;
  return kSmallestGpu;
}

int64_t PodGpuMemoryBytes(int32_t gpu_milli) {
  return kSmallestGpu * gpu_milli / scheduler::kWholeGpuMilli;
}

absl::StatusOr<std::vector<scheduler::WorkerCapacity>> LoadOpenbNodes(
    const std::string& path) {
  std::vector<scheduler::WorkerCapacity> nodes;
  RETURN_IF_ERROR(ForEachRow(path, 5, [&](const Row& row) -> absl::Status {
    scheduler::WorkerCapacity w;
    w.id = row[0];
    ASSIGN_OR_RETURN(w.cpu_milli, Field(row, 1, "cpu_milli"));
    ASSIGN_OR_RETURN(int64_t mib, Field(row, 2, "memory_mib"));
    ASSIGN_OR_RETURN(int64_t gpus, Field(row, 3, "gpu"));
    if (gpus > 64) return absl::InvalidArgumentError("more than 64 GPUs");
    w.free_cpu_milli = w.cpu_milli;
    w.memory_bytes = w.free_memory_bytes = mib * kMiB;
    const int64_t mem = GpuMemoryBytesOf(row[4]);
    for (int32_t g = 0; g < gpus; ++g) w.devices.push_back({g, mem, mem});
    nodes.push_back(std::move(w));
    return absl::OkStatus();
  }));
  return nodes;
}

absl::StatusOr<std::vector<TracePod>> LoadOpenbPods(const std::string& path) {
  std::vector<TracePod> pods;
  RETURN_IF_ERROR(ForEachRow(path, 5, [&](const Row& row) -> absl::Status {
    TracePod pod;
    scheduler::PendingJob& j = pod.shape;
    j.id = row[0];
    j.submit_order = static_cast<int64_t>(pods.size());
    ASSIGN_OR_RETURN(j.cpu_milli, Field(row, 1, "cpu_milli"));
    ASSIGN_OR_RETURN(int64_t mib, Field(row, 2, "memory_mib"));
    ASSIGN_OR_RETURN(int64_t gpus, Field(row, 3, "num_gpu"));
    ASSIGN_OR_RETURN(int64_t milli, Field(row, 4, "gpu_milli"));
    if (gpus > 64 || milli > scheduler::kWholeGpuMilli) {
      return absl::InvalidArgumentError("num_gpu or gpu_milli out of range");
    }
    if (gpus > 0 && milli == 0) {
      return absl::InvalidArgumentError("a GPU pod with gpu_milli 0");
    }
    j.memory_bytes = mib * kMiB;
    j.gpus = static_cast<int32_t>(gpus);
    j.cpu_slots = 0;
    if (gpus == 0 && j.cpu_milli == 0) j.cpu_milli = 1;  // asks nothing
    j.gpu_compute_milli =
        gpus > 0 ? static_cast<int32_t>(milli) : scheduler::kWholeGpuMilli;
    j.gpu_memory_bytes =
        milli >= scheduler::kWholeGpuMilli ? 0 : PodGpuMemoryBytes(milli);
    RETURN_IF_ERROR(ReadTimes(row, pod));
    pods.push_back(std::move(pod));
    return absl::OkStatus();
  }));
  return pods;
}

}  // namespace trainyard::sim
