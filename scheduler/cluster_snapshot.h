// ClusterSnapshot: an immutable picture of the cluster at one instant — the
// free capacity of every schedulable worker and the jobs waiting for a place —
// taken by the server (or the simulator) and handed to a PlacementPolicy.
// Plain structs, no protobuf or gRPC, so policies and the simulator can build
// snapshots freely. A ClusterSnapshot never changes after Create(), so it is
// safe to share between threads.
//
// Resource model. Each GPU offers memory (bytes) and compute (milli-GPU, 1000
// = whole). A node also offers CPU (milli-CPU), host memory (bytes) and CPU
// slots (one per CPU-slot job, the skeleton's CPU jobs). A job asks `gpus` x
// (memory, compute share) plus CPU and host memory. A GPU job whose per-GPU
// memory is 0 asks for whole GPUs: each must be wholly free and is taken
// whole. A job whose per-GPU memory is the engine's estimate
// (gpu_memory_estimated) lets each GPU decide (node_fit.h, OnGpu): a GPU the
// estimate needs more than half of, or whose memory is unknown, is taken
// whole; a larger one gives the estimate and the declared compute share, or
// a share in proportion to the memory when none is declared; a GPU that is
// not `shareable` is always taken whole. A job naming gpu_models takes
// only GPUs whose name matches one of them (gpu_models.h). A worker
// described only by `gpus`/`free_gpus` (no `devices`) gets one device per
// index with unknown memory (0), wholly free or wholly taken.
#ifndef TRAINYARD_SCHEDULER_CLUSTER_SNAPSHOT_H_
#define TRAINYARD_SCHEDULER_CLUSTER_SNAPSHOT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainyard::scheduler {

inline constexpr int32_t kWholeGpuMilli = 1000;

// One GPU of a worker and what of it is not used by any job now. Trivially
// copyable and 32 bytes: policies copy every worker's GPUs while they try
// placements, so it holds no name, only which of its worker's gpu_names it
// has (docs/BENCHMARKS.md, "One scheduling pass", 2026-11-24).
struct GpuCapacity {
  int32_t index = 0;         // device index on its worker
  int64_t memory_bytes = 0;  // total; 0 = unknown
  int64_t free_memory_bytes = 0;
  int32_t free_compute_milli = kWholeGpuMilli;
  // Jobs may share it. The server clears it for a GPU whose jobs would be
  // time-sliced rather than run side by side (no NVIDIA MPS) unless told
  // to share such GPUs too: each job asking part of one then takes it whole.
  bool shareable = true;
  // Set by Create(): the bit (0-63) of PendingJob::gpu_model_mask that says
  // whether a job may use this GPU (ModelAllowed, node_fit.h).
  uint8_t model_slot = 0;
  // Its name: 0 = unknown, k = its worker's gpu_names[k - 1].
  uint16_t name_id = 0;

  bool wholly_free() const {
    return free_compute_milli == kWholeGpuMilli &&
           free_memory_bytes == memory_bytes;
  }
};
static_assert(sizeof(GpuCapacity) == 32);

// Capacity of one worker. Fields past `free_gpus` are the fine-grained
// model; a worker that leaves them at zero offers no CPU/host memory beyond
// its slots, and its devices are derived from `gpus`/`free_gpus`.
struct WorkerCapacity {
  std::string id;
  int32_t cpu_slots = 0;                  // total CPU slots
  int32_t free_cpu_slots = 0;             // not used by any job now
  std::vector<int32_t> gpus;              // device indices of all its GPUs
  std::vector<int32_t> free_gpus;         // indices of wholly free GPUs
  std::vector<GpuCapacity> devices = {};  // the truth once Create() ran
  int64_t cpu_milli = 0;                  // total CPU, milli-CPU
  int64_t free_cpu_milli = 0;
  int64_t memory_bytes = 0;  // total host memory
  int64_t free_memory_bytes = 0;
  // The names its GPUs report (NVML's, e.g. "NVIDIA H100 80GB HBM3"), each
  // once, which PendingJob::gpu_models is matched against; GpuCapacity::
  // name_id points here. Usually one, so a copy of the worker costs little.
  std::vector<std::string> gpu_names = {};

  // The name of `gpu`, one of its devices; "" when unknown.
  const std::string& GpuName(const GpuCapacity& gpu) const;
  // The name_id that stands for `name` here, adding it to gpu_names when it
  // is new; 0 for "".
  uint16_t GpuNameId(absl::string_view name);
};

// A job waiting in the queue.
struct PendingJob {
  std::string id;
  int32_t priority = 0;          // higher runs first
  int64_t submit_order = 0;      // smaller was submitted earlier
  int32_t gpus = 0;              // GPUs needed; 0 = the job needs no GPU
  int32_t cpu_slots = 1;         // CPU slots needed when gpus == 0
  int64_t gpu_memory_bytes = 0;  // per GPU; 0 = whole GPUs
  int32_t gpu_compute_milli = kWholeGpuMilli;  // per GPU share of compute
  int64_t cpu_milli = 0;                       // CPU on its node, milli-CPU
  int64_t memory_bytes = 0;                    // host memory on its node
  std::string tenant = {};
  // gpu_memory_bytes (> 0) is the engine's estimate and each GPU decides
  // the share (see above); gpu_compute_milli is then the declared share,
  // or 0 for one in proportion to the memory.
  bool gpu_memory_estimated = false;
  // Nodes the job's ranks may be spread over when no single node has room
  // for all of them (a rank: one GPU, or one CPU slot for a job without
  // GPUs); 1 = one node only, 0 = any number. Each node then gives its ranks'
  // share of cpu_milli and memory_bytes (PartOf, node_fit.h).
  int32_t max_nodes = 1;
  // GPU models the job may run on, matched as gpu_models.h says; empty =
  // any GPU. Every GPU of the job, on every node, must match.
  std::vector<std::string> gpu_models = {};
  // Set by Create() from gpu_models: bit k set when the job may use GPUs of
  // model_slot k (all bits when gpu_models is empty).
  uint64_t gpu_model_mask = ~uint64_t{0};

  bool whole_gpus() const { return gpu_memory_bytes == 0; }
};

// What a running job spread over several nodes holds on one node other than
// its own worker, as RunningJob holds there.
struct RunningPart {
  std::string worker_id;
  std::vector<int32_t> gpu_indices = {};
  int64_t gpu_memory_bytes = 0;  // per GPU; 0 = the GPUs are held whole
  int32_t gpu_compute_milli = kWholeGpuMilli;
  int32_t cpu_slots = 0;
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
};

// A job holding resources now, as preemption and fair share see it. What it
// holds on its worker: `gpu_indices` x (memory, compute), or those GPUs
// whole, plus CPU slots, CPU and host memory. A job whose ranks are spread
// over several nodes holds that on its own worker (rank 0's) and the rest in
// `more_parts`: stopping it frees every part, and all count as its tenant's.
struct RunningJob {
  std::string id;
  std::string worker_id;
  std::string tenant = {};
  int32_t priority = 0;
  std::vector<int32_t> gpu_indices = {};
  int64_t gpu_memory_bytes = 0;  // per GPU; 0 = the GPUs are held whole
  int32_t gpu_compute_milli = kWholeGpuMilli;
  int32_t cpu_slots = 0;
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  bool preemptible = true;
  // Work lost if it were stopped now: GPU-seconds (CPU-slot seconds for a
  // job without GPUs) since its last checkpoint.
  double work_since_checkpoint = 0;
  std::vector<RunningPart> more_parts = {};  // empty for a job on one node
};

// A kind of task and how often it arrives: the workload FGD packs for.
struct TaskClass {
  PendingJob shape;   // only the resource fields matter
  double weight = 0;  // relative frequency, > 0
};

// By pending job id: the workers its earlier attempts failed on (a job
// restarted after a crash). It goes elsewhere when any other worker has room
// now, and there only when none has. Kept beside the jobs rather than in
// PendingJob, which a pass reads for every queued job, so that PendingJob
// stays 128 bytes (the A/B runs are in docs/BENCHMARKS.md).
using AvoidedWorkers =
    absl::flat_hash_map<std::string, std::vector<std::string>>;

// By pending job id: the workers an earlier pass preempted jobs to make
// room on for it (Preemption::room_on), while some of those jobs are still
// stopping. The pass holds them for it (RunPackingPass): the room the first
// victims leave is not taken by a job the preemption was not for before the
// last has stopped.
using PreemptionHolds =
    absl::flat_hash_map<std::string, std::vector<std::string>>;

class ClusterSnapshot {
 public:
  // Checks the invariants policies rely on: unique non-empty worker and job
  // ids; free amounts within [0, total]; gpu indices unique and non-negative,
  // free_gpus a subset of gpus; job needs non-negative, compute share in
  // [1, 1000] ([0, 1000] with an estimate, which must be > 0), a job without
  // GPUs needing a CPU slot or CPU. INVALID_ARGUMENT
  // names the offender. Devices are filled in from gpus/free_gpus when
  // absent and sorted by index, then gpus/free_gpus are re-derived from
  // them; worker and job order is kept. `workload` is optional (FGD falls
  // back to the pending jobs). Running jobs, and each of their parts, name
  // a known worker and GPUs of it; their resources are already taken out of
  // the workers' free capacity. Tenant weights are > 0. A GPU's name_id is
  // 0 or one of its worker's gpu_names. When a pending job or task class
  // names gpu_models, each GPU's model_slot and each job's gpu_model_mask
  // are derived from them. GPUs whose names every list of models in the
  // snapshot treats alike (allows all or none of them) are of one kind and
  // share a slot, so matching by slot is exact for up to 64 kinds, however
  // many names there are. Past that, the kinds from the 64th on (in worker
  // and device order) share slot 63, and a job may use their GPUs only if
  // its models allow every one of those kinds: never too lax (a job never
  // gets a GPU its models do not allow), but a job allowing only some of
  // them cannot use any, and waits as infeasible saying why (packing_pass).
  static absl::StatusOr<ClusterSnapshot> Create(
      std::vector<WorkerCapacity> workers, std::vector<PendingJob> pending,
      std::vector<TaskClass> workload = {},
      std::vector<RunningJob> running = {},
      absl::flat_hash_map<std::string, double> tenant_weights = {},
      AvoidedWorkers avoided = {}, PreemptionHolds holds = {});

  const std::vector<WorkerCapacity>& workers() const { return workers_; }
  const std::vector<PendingJob>& pending() const { return pending_; }
  const std::vector<TaskClass>& workload() const { return workload_; }
  const std::vector<RunningJob>& running() const { return running_; }
  // The workers pending job `job_id` should avoid; nullptr when none.
  const std::vector<std::string>* AvoidedBy(const std::string& job_id) const {
    if (avoided_.empty()) return nullptr;
    auto it = avoided_.find(job_id);
    return it == avoided_.end() ? nullptr : &it->second;
  }
  // The workers held for pending job `job_id`; nullptr when none.
  const std::vector<std::string>* HeldFor(const std::string& job_id) const {
    if (holds_.empty()) return nullptr;
    auto it = holds_.find(job_id);
    return it == holds_.end() ? nullptr : &it->second;
  }
  // Fair-share weight of a tenant (1 unless set).
  double TenantWeight(const std::string& tenant) const;

  // Looks a worker / job up by id; nullptr when absent.
  const WorkerCapacity* FindWorker(const std::string& id) const;
  const PendingJob* FindJob(const std::string& id) const;

 private:
  ClusterSnapshot() = default;

  std::vector<WorkerCapacity> workers_;
  std::vector<PendingJob> pending_;
  std::vector<TaskClass> workload_;
  std::vector<RunningJob> running_;
  absl::flat_hash_map<std::string, double> tenant_weights_;
  AvoidedWorkers avoided_;
  PreemptionHolds holds_;
  absl::flat_hash_map<std::string, size_t> worker_at_;  // id -> position
  absl::flat_hash_map<std::string, size_t> job_at_;
};

}  // namespace trainyard::scheduler

#endif  // TRAINYARD_SCHEDULER_CLUSTER_SNAPSHOT_H_
