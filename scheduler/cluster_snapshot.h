// ClusterSnapshot: an immutable picture of the cluster at one instant — the
// free capacity of every schedulable worker and the jobs waiting for a place —
// taken by the server and handed to a PlacementPolicy. Plain structs, no
// protobuf or gRPC, so policies and the simulator can build snapshots freely.
// A ClusterSnapshot never changes after Create(), so it is safe to share
// between threads.
#ifndef TRAINYARD_SCHEDULER_CLUSTER_SNAPSHOT_H_
#define TRAINYARD_SCHEDULER_CLUSTER_SNAPSHOT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainyard::scheduler {

// Capacity of one worker. A CPU slot runs one CPU job; a GPU is given whole to
// one job (exclusive placement; packing comes with a later policy).
struct WorkerCapacity {
  std::string id;
  int32_t cpu_slots = 0;             // total CPU slots
  int32_t free_cpu_slots = 0;        // not used by any job now
  std::vector<int32_t> gpus;         // device indices of all its GPUs
  std::vector<int32_t> free_gpus;    // device indices not used by any job now
};

// A job waiting in the queue.
struct PendingJob {
  std::string id;
  int32_t priority = 0;      // higher runs first
  int64_t submit_order = 0;  // smaller was submitted earlier
  int32_t gpus = 0;          // GPUs needed; 0 = the job runs on CPU slots
  int32_t cpu_slots = 1;     // CPU slots needed when gpus == 0
};

class ClusterSnapshot {
 public:
  // Checks the invariants policies rely on: unique non-empty worker and job
  // ids; 0 <= free_cpu_slots <= cpu_slots; gpu indices unique and
  // non-negative, free_gpus a subset of gpus; job needs non-negative and a
  // CPU job needing at least one slot. INVALID_ARGUMENT names the offender.
  // Free GPU lists are sorted ascending; worker and job order is kept.
  static absl::StatusOr<ClusterSnapshot> Create(
      std::vector<WorkerCapacity> workers, std::vector<PendingJob> pending);

  const std::vector<WorkerCapacity>& workers() const { return workers_; }
  const std::vector<PendingJob>& pending() const { return pending_; }

  // Looks a worker / job up by id; nullptr when absent.
  const WorkerCapacity* FindWorker(const std::string& id) const;
  const PendingJob* FindJob(const std::string& id) const;

 private:
  ClusterSnapshot(std::vector<WorkerCapacity> workers,
                  std::vector<PendingJob> pending)
      : workers_(std::move(workers)), pending_(std::move(pending)) {}

  std::vector<WorkerCapacity> workers_;
  std::vector<PendingJob> pending_;
};

}  // namespace trainyard::scheduler

#endif  // TRAINYARD_SCHEDULER_CLUSTER_SNAPSHOT_H_
