#include "sim/openb_trace.h"

#include <algorithm>
#include <fstream>
#include <functional>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace trainyard::sim {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kSmallestGpu = 16 * kGiB;

using Row = std::vector<std::string>;

// A file's columns, in order, and how many of them a file may have: each
// width is a prefix of `columns` (the multigpu pod lists carry only the
// first five).
struct Format {
  std::vector<std::string> columns;
  std::vector<size_t> widths;
};

const Format& NodeFormat() {
  static const Format* f =
      new Format{{"sn", "cpu_milli", "memory_mib", "gpu", "model"}, {5}};
  return *f;
}

const Format& PodFormat() {
  static const Format* f = new Format{
      {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec",
       "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time"},
      {5, 11}};
  return *f;
}

// Names the first column of `header` that is not the format's.
absl::Status CheckHeader(const Row& header, const Format& format) {
  for (size_t i = 0; i < header.size(); ++i) {
    if (i == format.columns.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "column ", i + 1, " \"", header[i], "\" is one too many (expected ",
          absl::StrJoin(format.columns, ","), ")"));
    }
    if (header[i] != format.columns[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("column ", i + 1, " is \"", header[i], "\", expected \"",
                       format.columns[i], "\""));
    }
  }
  for (size_t width : format.widths) {
    if (header.size() == width) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("column ", header.size() + 1, " \"",
                   format.columns[header.size()], "\" is missing"));
}

// Checks the header, then calls `on_row` for every data row with its line
// number; every row must have as many fields as the header. Errors carry
// file:line.
absl::Status ForEachRow(
    const std::string& path, const Format& format,
    const std::function<absl::Status(const Row&, int64_t line)>& on_row) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string line;
  int64_t number = 0;
  size_t width = 0;
  while (std::getline(in, line)) {
    ++number;
    absl::string_view text = absl::StripTrailingAsciiWhitespace(line);
    Row row = absl::StrSplit(text, ',');
    absl::Status s;
    if (number == 1) {
      s = CheckHeader(row, format);
      width = row.size();
    } else if (text.empty()) {
      continue;
    } else if (row.size() != width) {
      s = absl::InvalidArgumentError(
          absl::StrCat("expected ", width, " fields, got ", row.size()));
    } else {
      s = on_row(row, number);
    }
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", number, ": ", s.message()));
    }
  }
  if (number == 0) return absl::InvalidArgumentError(path + ": empty file");
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Field(const Row& row, size_t i, const char* name,
                              int64_t max) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(row[i], &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " \"", row[i], "\" is not an integer"));
  }
  if (v < 0 || v > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " ", v, " is out of range [0, ", max, "]"));
  }
  return v;
}

// An empty time stays -1 (a pod never scheduled has no scheduled_time).
absl::Status ReadTime(const Row& row, size_t i, const char* name,
                      int64_t& out) {
  if (row[i].empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(out, Field(row, i, name, kMaxTraceSeconds));
  return absl::OkStatus();
}

absl::Status ReadTimes(const Row& row, TracePod& pod) {
  if (row.size() < 11) return absl::OkStatus();
  RETURN_IF_ERROR(ReadTime(row, 8, "creation_time", pod.creation_time));
  RETURN_IF_ERROR(ReadTime(row, 9, "deletion_time", pod.deletion_time));
  return ReadTime(row, 10, "scheduled_time", pod.scheduled_time);
}

// Remembers the line each name was first seen on, to refuse a repeat.
class Names {
 public:
  explicit Names(const char* what) : what_(what) {}

  absl::Status Add(const std::string& name, int64_t line) {
    if (name.empty()) return absl::InvalidArgumentError(what_ + " is empty");
    auto [it, added] = lines_.emplace(name, line);
    if (added) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        what_, " \"", name, "\" repeats the one on line ", it->second));
  }

 private:
  const std::string what_;
  absl::flat_hash_map<std::string, int64_t> lines_;
};

}  // namespace

int64_t GpuMemoryBytesOf(const std::string& model) {
  if (model == "V100M32") return 32 * kGiB;
  if (model == "A10") return 24 * kGiB;
  return kSmallestGpu;
}

std::string WorkerGpuNameOf(const std::string& model) {
  static const auto* const kNames =
      new absl::flat_hash_map<std::string, std::string>{
          {"A10", "NVIDIA A10"},
          {"T4", "Tesla T4"},
          {"P100", "Tesla P100-PCIE-16GB"},
          {"V100M16", "Tesla V100-SXM2-16GB"},
          {"V100M32", "Tesla V100-SXM2-32GB"},
          {"G1", "Alibaba G1"},
          {"G2", "Alibaba G2"},
          {"G3", "Alibaba G3"},
      };
  auto it = kNames->find(model);
  return it == kNames->end() ? model : it->second;
}

int64_t PodGpuMemoryBytes(int32_t gpu_milli) {
  return kSmallestGpu * gpu_milli / scheduler::kWholeGpuMilli;
}

absl::StatusOr<std::vector<scheduler::WorkerCapacity>> LoadOpenbNodes(
    const std::string& path) {
  std::vector<scheduler::WorkerCapacity> nodes;
  Names ids("sn");
  RETURN_IF_ERROR(ForEachRow(
      path, NodeFormat(), [&](const Row& row, int64_t line) -> absl::Status {
        scheduler::WorkerCapacity w;
        w.id = row[0];
        RETURN_IF_ERROR(ids.Add(w.id, line));
        ASSIGN_OR_RETURN(w.cpu_milli, Field(row, 1, "cpu_milli", kMaxCpuMilli));
        ASSIGN_OR_RETURN(int64_t mib,
                         Field(row, 2, "memory_mib", kMaxMemoryMib));
        ASSIGN_OR_RETURN(int64_t gpus, Field(row, 3, "gpu", kMaxGpus));
        w.free_cpu_milli = w.cpu_milli;
        w.memory_bytes = w.free_memory_bytes = mib * kMiB;
        const int64_t mem = GpuMemoryBytesOf(row[4]);
        const uint16_t name_id = w.GpuNameId(WorkerGpuNameOf(row[4]));
        for (int32_t g = 0; g < gpus; ++g) {
          w.devices.push_back({g, mem, mem});
          w.devices.back().name_id = name_id;
        }
        nodes.push_back(std::move(w));
        return absl::OkStatus();
      }));
  return nodes;
}

absl::StatusOr<std::vector<TracePod>> LoadOpenbPods(const std::string& path) {
  std::vector<TracePod> pods;
  Names names("name");
  RETURN_IF_ERROR(ForEachRow(
      path, PodFormat(), [&](const Row& row, int64_t line) -> absl::Status {
        TracePod pod;
        scheduler::PendingJob& j = pod.shape;
        j.id = row[0];
        RETURN_IF_ERROR(names.Add(j.id, line));
        j.submit_order = static_cast<int64_t>(pods.size());
        ASSIGN_OR_RETURN(j.cpu_milli, Field(row, 1, "cpu_milli", kMaxCpuMilli));
        ASSIGN_OR_RETURN(int64_t mib,
                         Field(row, 2, "memory_mib", kMaxMemoryMib));
        ASSIGN_OR_RETURN(int64_t gpus, Field(row, 3, "num_gpu", kMaxGpus));
        ASSIGN_OR_RETURN(int64_t milli,
                         Field(row, 4, "gpu_milli", scheduler::kWholeGpuMilli));
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
        if (row.size() > 5) pod.gpu_spec = row[5];
        if (!pod.gpu_spec.empty() && gpus > 0) {
          for (absl::string_view m : absl::StrSplit(pod.gpu_spec, '|')) {
            if (m.empty()) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "gpu_spec \"", pod.gpu_spec, "\" has an empty model"));
            }
            std::string name = WorkerGpuNameOf(std::string(m));
            if (std::find(j.gpu_models.begin(), j.gpu_models.end(), name) ==
                j.gpu_models.end()) {
              j.gpu_models.push_back(std::move(name));
            }
          }
        }
        RETURN_IF_ERROR(ReadTimes(row, pod));
        pods.push_back(std::move(pod));
        return absl::OkStatus();
      }));
  return pods;
}

int64_t CountGpuSpecPods(const std::vector<TracePod>& pods) {
  int64_t n = 0;
  for (const TracePod& p : pods) n += p.gpu_spec.empty() ? 0 : 1;
  return n;
}

}  // namespace trainyard::sim
