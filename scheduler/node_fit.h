// Resource arithmetic on one node: whether a job fits a worker's free
// capacity (or its whole capacity, for infeasibility), and taking what a
// placement uses. Shared by every policy, CheckPlan and the simulator, so
// they all count resources the same way. Free functions over plain structs;
// thread-compatible.
#ifndef TRAINYARD_SCHEDULER_NODE_FIT_H_
#define TRAINYARD_SCHEDULER_NODE_FIT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "scheduler/cluster_snapshot.h"

namespace trainyard::scheduler {

// What a job takes from each of its GPUs as placed. `whole`: the GPU must be
// wholly free and is taken whole (jobs asking whole GPUs, and every GPU job
// under an exclusive policy).
struct GpuDemand {
  int64_t memory_bytes = 0;
  int32_t compute_milli = kWholeGpuMilli;
  bool whole = true;
};

GpuDemand DemandOf(const PendingJob& job, bool exclusive);

// Inline: the innermost test of every policy.
inline bool GpuFits(const GpuCapacity& gpu, const GpuDemand& demand) {
  if (demand.whole) return gpu.wholly_free();
  return gpu.free_compute_milli >= demand.compute_milli &&
         gpu.free_memory_bytes >= demand.memory_bytes;
}
// Whether the device could hold the demand if it were idle.
bool GpuFitsWhenIdle(const GpuCapacity& gpu, const GpuDemand& demand);

// CPU slots (jobs without GPUs only), CPU and host memory free now.
bool HostFits(const WorkerCapacity& w, const PendingJob& job);
bool HostFitsWhenIdle(const WorkerCapacity& w, const PendingJob& job);

// Host fits and at least job.gpus devices fit the demand now.
bool FitsNow(const WorkerCapacity& w, const PendingJob& job,
             const GpuDemand& demand);
bool FitsWhenIdle(const WorkerCapacity& w, const PendingJob& job,
                  const GpuDemand& demand);

// Subtracts the job's host needs, and the demand from each device position.
// REQUIRES: the job fits there (FitsNow with those devices).
void Take(WorkerCapacity& w, const PendingJob& job, const GpuDemand& demand,
          const std::vector<size_t>& device_positions);

// Sum of free compute over the worker's devices, milli-GPU.
int64_t FreeGpuMilli(const WorkerCapacity& w);

// For people: "2 GPUs with 30 GiB and 500 milli-GPU free each, 4 CPUs and
// 16 GiB host memory on one node", "1 whole GPU", "a CPU slot".
std::string DescribeNeed(const PendingJob& job, const GpuDemand& demand);

}  // namespace trainyard::scheduler

#endif  // TRAINYARD_SCHEDULER_NODE_FIT_H_
