// ClusterView: what the cluster holds and how busy it is, derived from the
// worker registry (who is there, with what) and the job store (which jobs
// hold which workers). Used by ClusterService and by the scheduler loop to
// build its snapshot, so both see capacity the same way. ListWorkers shows
// each device's capacity from the worker's hello with the live figures of
// its latest heartbeat. Safe for concurrent use (it only reads thread-safe
// sources).
#ifndef TRAINYARD_SERVER_CLUSTER_VIEW_H_
#define TRAINYARD_SERVER_CLUSTER_VIEW_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/cluster_snapshot.h"
#include "server/job_store.h"
#include "server/worker_registry.h"
#include "trainyard/v1/cluster.pb.h"

namespace trainyard::server {

// What one job takes from a worker: `gpus` whole GPUs, or CPU slots.
struct JobNeed {
  int32_t gpus = 0;
  int32_t cpu_slots = 1;
};
JobNeed NeedOf(const v1::JobSpec& spec);

// What a job holds of each GPU it was given, as scheduler::RunningJob
// counts it: memory_bytes 0 means the GPUs whole.
struct GpuHold {
  int64_t memory_bytes = 0;
  int32_t compute_milli = scheduler::kWholeGpuMilli;
};
// Tells what a job holds of its GPUs.
using GpuHoldOf = std::function<GpuHold(const JobRecord&)>;
// What the job's current attempt was granted (Job.gpu_grants): a share of
// each GPU, or its GPUs whole when it has no grants.
GpuHold RecordedHold(const JobRecord& record);
// CPU slots the job holds on its own worker: all its ranks', or for a job
// spread over several workers those before its first part.
int32_t OwnWorkerCpuSlots(const JobRecord& record);

// What the jobs on one GPU hold of it.
struct GpuUse {
  bool whole = false;  // some job holds it whole
  int64_t memory_bytes = 0;
  int32_t compute_milli = 0;
};

// What the jobs holding one worker take from it.
struct WorkerUsage {
  int32_t cpu_slots = 0;
  std::set<int32_t> gpus;  // held by some job, whole or in part
  std::map<int32_t, GpuUse> gpu_use;
  std::vector<v1::RunningJobRef> jobs;
};
// Usage per worker id, from the jobs in an active state, the parts of a
// spread job on their own workers; `hold_of` (for the job's own worker)
// unset reads RecordedHold.
std::map<std::string, WorkerUsage> UsageByWorker(
    const std::vector<JobRecord>& active_jobs, const GpuHoldOf& hold_of = {});

// The free capacity of every schedulable worker. Each GPU offers the
// memory its worker reported in its hello (0, unknown, for a worker that
// reported none: the GPU is then only ever given whole), less what jobs
// hold of it; a GPU held whole, or held at all when its memory is
// unknown, has nothing free. A GPU is shareable when its worker reported
// NVIDIA MPS on it, or with `share_without_mps`: without MPS the jobs
// sharing it would be time-sliced, which made four packed jobs slower
// together than one after another (docs/BENCHMARKS.md).
std::vector<scheduler::WorkerCapacity> SchedulableCapacity(
    const std::vector<WorkerStatus>& workers,
    const std::map<std::string, WorkerUsage>& usage, bool share_without_mps);

class ClusterView {
 public:
  ClusterView(JobStore* store, WorkerRegistry* workers, std::string version);

  absl::StatusOr<std::vector<v1::Worker>> ListWorkers() const;
  // Capacity of every worker; job counts of `tenant`'s jobs ("": all).
  absl::StatusOr<v1::ClusterStatus> Status(std::string_view tenant = "") const;

 private:
  JobStore* const store_;
  WorkerRegistry* const workers_;
  const std::string version_;
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_CLUSTER_VIEW_H_
