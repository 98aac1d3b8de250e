// Reading the Alibaba GPU-sharing trace (cluster-trace-gpu-v2023, "openb")
// into the scheduler's own types: its node list becomes WorkerCapacity (CPU,
// host memory, whole idle GPUs) and its pod lists become TracePods (a job
// shape plus the pod's times). Files are plain CSV whose header row names
// the trace's columns in the trace's order; a wrong header, a row with the
// wrong number of fields, a value out of range (the bounds below) or a
// repeated pod name or node id is an error naming the file and line.
// Thread-compatible.
#ifndef TRAINYARD_SIM_OPENB_TRACE_H_
#define TRAINYARD_SIM_OPENB_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/cluster_snapshot.h"

namespace trainyard::sim {

// Bounds on the numeric fields, far above anything in the trace (its
// largest node has 128 CPUs and 1 TiB, its times stay under 150 days) yet
// low enough that bytes, sums over a cluster and replay times never
// overflow, and a replay's hourly samples stay few.
inline constexpr int64_t kMaxCpuMilli = 10'000'000;         // 10,000 CPUs
inline constexpr int64_t kMaxMemoryMib = int64_t{1} << 24;  // 16 TiB
inline constexpr int64_t kMaxGpus = 64;                     // per node or pod
// Times are seconds from the start of the trace: 10 years (365-day).
inline constexpr int64_t kMaxTraceSeconds = 315'360'000;

// GPU memory the trace does not state, by GPU model (GiB; unknown models,
// such as the undisclosed G1/G2/G3, get the smallest: 16 GiB).
int64_t GpuMemoryBytesOf(const std::string& model);

// The name a worker would report for a GPU of the trace's `model`, as
// NVML names it ("V100M16" -> "Tesla V100-SXM2-16GB", "T4" -> "Tesla T4");
// the undisclosed G1/G2/G3 become "Alibaba G1" etc., any other model its
// own name. No name of a known model is a substring of another's, so a
// pod's gpu_spec entry, given as such a name, matches exactly its model.
std::string WorkerGpuNameOf(const std::string& model);

// Per-GPU memory a pod asking `gpu_milli` of a GPU is given: the same share
// of the smallest GPU (16 GiB), so memory binds no earlier than compute on
// any GPU — the trace models a GPU share as one number.
int64_t PodGpuMemoryBytes(int32_t gpu_milli);

struct TracePod {
  scheduler::PendingJob shape;  // id = pod name; whole GPUs at 1000 milli
  int64_t creation_time = -1;   // seconds; -1 when the file has no times
  int64_t deletion_time = -1;
  int64_t scheduled_time = -1;
  // The GPU models the pod may run on ("V100M16|V100M32"), "" for any, as
  // the trace has it; shape.gpu_models holds them as worker GPU names
  // (WorkerGpuNameOf), so that the pod goes only to nodes of those models.
  std::string gpu_spec = {};
};

// `sn,cpu_milli,memory_mib,gpu,model` -> idle workers, in file order, each
// GPU named WorkerGpuNameOf(model).
absl::StatusOr<std::vector<scheduler::WorkerCapacity>> LoadOpenbNodes(
    const std::string& path);

// `name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,pod_phase,
// creation_time,deletion_time,scheduled_time]` -> pods, in file order. A
// GPU pod's gpu_spec ('|'-separated models) becomes its shape.gpu_models
// (WorkerGpuNameOf each, repeats dropped); an empty entry is an error.
absl::StatusOr<std::vector<TracePod>> LoadOpenbPods(const std::string& path);

// How many of `pods` name GPU models (gpu_spec).
int64_t CountGpuSpecPods(const std::vector<TracePod>& pods);

}  // namespace trainyard::sim

#endif  // TRAINYARD_SIM_OPENB_TRACE_H_
