// ClusterView: what the cluster holds and how busy it is, derived from the
// worker registry (who is there, with what) and the job store (which jobs
// hold which workers). Used by ClusterService and by the scheduler loop to
// build its snapshot, so both see capacity the same way. Safe for
// concurrent use (it only reads thread-safe sources).
#ifndef TRAINYARD_SERVER_CLUSTER_VIEW_H_
#define TRAINYARD_SERVER_CLUSTER_VIEW_H_

#include <cstdint>
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

// What the jobs holding one worker take from it.
struct WorkerUsage {
  int32_t cpu_slots = 0;
  std::set<int32_t> gpus;
  std::vector<v1::RunningJobRef> jobs;
};
// Usage per worker id, from the jobs in an active state.
std::map<std::string, WorkerUsage> UsageByWorker(
    const std::vector<JobRecord>& active_jobs);

// The free capacity of every schedulable worker.
std::vector<scheduler::WorkerCapacity> SchedulableCapacity(
    const std::vector<WorkerStatus>& workers,
    const std::map<std::string, WorkerUsage>& usage);

class ClusterView {
 public:
  ClusterView(JobStore* store, WorkerRegistry* workers, std::string version);

  absl::StatusOr<std::vector<v1::Worker>> ListWorkers() const;
  absl::StatusOr<v1::ClusterStatus> Status() const;

 private:
  JobStore* const store_;
  WorkerRegistry* const workers_;
  const std::string version_;
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_CLUSTER_VIEW_H_
