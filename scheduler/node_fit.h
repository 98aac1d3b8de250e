// Resource arithmetic on one node: whether a job fits a worker's free
// capacity (or its whole capacity, for infeasibility), and taking what a
// placement uses. Shared by every policy, CheckPlan and the simulator, so
// they all count resources the same way. Free functions over plain structs;
// thread-compatible.
#ifndef TRAINYARD_SCHEDULER_NODE_FIT_H_
#define TRAINYARD_SCHEDULER_NODE_FIT_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/numeric/int128.h"
#include "scheduler/cluster_snapshot.h"

namespace trainyard::scheduler {

// What a job takes from each of its GPUs as placed.
//  - `whole`: the GPU must be wholly free, and hold memory_bytes when its
//    size is known, and is taken whole (jobs asking whole GPUs, and every
//    GPU job under an exclusive policy);
//  - `estimated`: memory_bytes is the engine's estimate of what the job
//    uses of each GPU, and each GPU decides what it gives (OnGpu);
//  - otherwise the fixed share: memory_bytes and compute_milli of each GPU.
struct GpuDemand {
  int64_t memory_bytes = 0;
  int32_t compute_milli = kWholeGpuMilli;
  bool whole = true;
  bool estimated = false;
  // Bit k: the job may use GPUs of GpuCapacity::model_slot k at all.
  uint64_t models = ~uint64_t{0};
};

inline GpuDemand DemandOf(const PendingJob& job, bool exclusive) {
  const uint64_t m = job.gpu_model_mask;
  if (job.gpu_memory_estimated && job.gpus > 0) {
    if (exclusive) {
      return {job.gpu_memory_bytes, kWholeGpuMilli, true, false, m};
    }
    return {job.gpu_memory_bytes, job.gpu_compute_milli, false, true, m};
  }
  if (exclusive || job.whole_gpus()) {
    return {0, kWholeGpuMilli, true, false, m};
  }
  return {job.gpu_memory_bytes, job.gpu_compute_milli, false, false, m};
}

// Whether the job the demand is for may use `gpu` at all (its model).
inline bool ModelAllowed(const GpuCapacity& gpu, const GpuDemand& demand) {
  return ((demand.models >> gpu.model_slot) & 1) != 0;
}

// The compute share of a GPU with `gpu_memory` bytes for a job using
// `memory` bytes of it: the same fraction, rounded up to a tenth of a GPU.
// REQUIRES: 0 < memory <= gpu_memory.
inline int32_t ProportionalShare(int64_t memory, int64_t gpu_memory) {
  uint64_t tenths;
  if (memory < (int64_t{1} << 59) && gpu_memory < (int64_t{1} << 59)) {
    tenths = static_cast<uint64_t>((memory * 10 + gpu_memory - 1) / gpu_memory);
  } else {  // sizes no GPU has, but no overflow either
    const absl::uint128 m = static_cast<uint64_t>(memory);
    const absl::uint128 g = static_cast<uint64_t>(gpu_memory);
    tenths = absl::Uint128Low64((m * 10 + g - 1) / g);
  }
  return static_cast<int32_t>(std::clamp<uint64_t>(tenths, 1, 10) * 100);
}

// What a demand takes from `gpu`. A GPU that is not shareable is taken
// whole by every demand. Otherwise a fixed demand (whole, or a share) is
// what it takes; for an estimated one a GPU of unknown memory (0), or one
// the estimate needs more than half of, is taken whole, and any other
// gives the estimate and the declared compute share, or when none is
// declared (compute_milli 0) the ProportionalShare.
inline GpuDemand OnGpu(const GpuCapacity& gpu, const GpuDemand& demand) {
  if (demand.whole) return demand;
  if (!gpu.shareable) {
    return {demand.memory_bytes, kWholeGpuMilli, true, false, demand.models};
  }
  if (!demand.estimated) return demand;
  if (gpu.memory_bytes == 0 || demand.memory_bytes > gpu.memory_bytes / 2) {
    return {demand.memory_bytes, kWholeGpuMilli, true, false, demand.models};
  }
  const int32_t share =
      demand.compute_milli > 0
          ? demand.compute_milli
          : ProportionalShare(demand.memory_bytes, gpu.memory_bytes);
  return {demand.memory_bytes, share, false, false, demand.models};
}

// Inline: the innermost test of every policy.
inline bool GpuFits(const GpuCapacity& gpu, const GpuDemand& demand) {
  if (!ModelAllowed(gpu, demand)) return false;
  const GpuDemand d = OnGpu(gpu, demand);
  if (d.whole) {
    return gpu.wholly_free() &&
           (gpu.memory_bytes == 0 || gpu.memory_bytes >= d.memory_bytes);
  }
  return gpu.free_compute_milli >= d.compute_milli &&
         gpu.free_memory_bytes >= d.memory_bytes;
}
// Whether the device could hold the demand if it were idle (and is of a
// model the job may use).
bool GpuFitsWhenIdle(const GpuCapacity& gpu, const GpuDemand& demand);

// CPU slots (jobs without GPUs only), CPU and host memory free now.
inline bool HostFits(const WorkerCapacity& w, const PendingJob& job) {
  if (job.gpus == 0 && w.free_cpu_slots < job.cpu_slots) return false;
  return w.free_cpu_milli >= job.cpu_milli &&
         w.free_memory_bytes >= job.memory_bytes;
}
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

// Ranks of a data-parallel job: one per GPU, or per CPU slot without GPUs.
inline int32_t RanksOf(const PendingJob& job) {
  return job.gpus > 0 ? job.gpus : job.cpu_slots;
}
// What `ranks` of the job's ranks ask of the node they run on: as many GPUs
// (or CPU slots) and that share of the job's CPU and host memory, rounded
// up. PartOf(job, RanksOf(job)) is the job itself.
PendingJob PartOf(const PendingJob& job, int32_t ranks);
// How many of the job's ranks (at most `limit`) fit `w` now, or when
// `when_idle`, on the idle node.
int32_t RanksFitting(const WorkerCapacity& w, const PendingJob& job,
                     const GpuDemand& demand, int32_t limit, bool when_idle);

// Sum of free compute over the worker's devices, milli-GPU.
int64_t FreeGpuMilli(const WorkerCapacity& w);

// For people: "2 GPUs with 30 GiB and 500 milli-GPU free each, 4 CPUs and
// 16 GiB host memory on one node", "1 whole GPU", "a CPU slot".
std::string DescribeNeed(const PendingJob& job, const GpuDemand& demand);

}  // namespace trainyard::scheduler

#endif  // TRAINYARD_SCHEDULER_NODE_FIT_H_
