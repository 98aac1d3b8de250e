// Reading the Alibaba GPU-sharing trace (cluster-trace-gpu-v2023, "openb")
// into the scheduler's own types: its node list becomes WorkerCapacity (CPU,
// host memory, whole idle GPUs) and its pod lists become TracePods (a job
// shape plus the pod's times). Files are plain CSV with a header row; any
// malformed line is an error naming the file and line. Thread-compatible.
#ifndef TRAINYARD_SIM_OPENB_TRACE_H_
#define TRAINYARD_SIM_OPENB_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/cluster_snapshot.h"

namespace trainyard::sim {

// GPU memory the trace does not state, by GPU model (GiB; unknown models,
// such as the undisclosed G1/G2/G3, get the smallest: 16 GiB).
int64_t GpuMemoryBytesOf(const std::string& model);

// Per-GPU memory a pod asking `gpu_milli` of a GPU is given: the same share
// of the smallest GPU (16 GiB), so memory binds no earlier than compute on
// any GPU — the trace models a GPU share as one number.
int64_t PodGpuMemoryBytes(int32_t gpu_milli);

struct TracePod {
  scheduler::PendingJob shape;  // id = pod name; whole GPUs at 1000 milli
  int64_t creation_time = -1;   // seconds; -1 when the file has no times
  int64_t deletion_time = -1;
  int64_t scheduled_time = -1;
};

// `sn,cpu_milli,memory_mib,gpu,model` -> idle workers, in file order.
absl::StatusOr<std::vector<scheduler::WorkerCapacity>> LoadOpenbNodes(
    const std::string& path);

// `name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,pod_phase,
// creation_time,deletion_time,scheduled_time]` -> pods, in file order.
absl::StatusOr<std::vector<TracePod>> LoadOpenbPods(const std::string& path);

}  // namespace trainyard::sim

#endif  // TRAINYARD_SIM_OPENB_TRACE_H_
