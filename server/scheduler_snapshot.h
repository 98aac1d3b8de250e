// How the scheduler loop sees the jobs of the store: a queued job as a
// scheduler::PendingJob, a job holding a worker as a scheduler::RunningJob
// with its tenant, priority, holdings and the work it would lose if stopped
// now (so fair share counts what tenants already use, and preemption picks
// the victims that lose the least).
//
// A queued GPU job asks, per GPU, the memory the engine estimates for its
// spec (weights, gradients, optimizer state, activations of a micro-batch,
// workspace and the CUDA context: every GPU of a data-parallel job holds a
// replica), and each GPU decides what it gives (scheduler/node_fit.h,
// OnGpu): the whole GPU when the estimate is over half its memory or its
// memory is unknown, else the estimate and a compute share in proportion to
// it (the spec declares no share yet). A job without GPUs takes a CPU slot.
// Functions are pure; PendingJobCache is thread-compatible.
#ifndef TRAINYARD_SERVER_SCHEDULER_SNAPSHOT_H_
#define TRAINYARD_SERVER_SCHEDULER_SNAPSHOT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "scheduler/cluster_snapshot.h"
#include "server/job_store.h"
#include "trainyard/v1/spec.pb.h"

namespace trainyard::server {

// The engine's estimate of what a job with `spec` uses of each of its GPUs,
// in bytes; 0 for a job without GPUs. REQUIRES: a stored spec (defaults
// applied and valid); any other still gets a number, saturated when huge.
int64_t GpuMemoryEstimate(const v1::JobSpec& spec);

// `gpu_memory_estimate`: GpuMemoryEstimate of the job's spec, or 0 to ask
// for whole GPUs without an estimate.
scheduler::PendingJob PendingJobOf(const JobRecord& record,
                                   int64_t gpu_memory_estimate = 0);

// For each of `queued` with FAILED attempts (each restarted under
// max_restarts): the workers those attempts ran on, for the policy to try
// the others first. Jobs without any are left out.
scheduler::AvoidedWorkers AvoidedWorkersOf(
    const std::vector<JobRecord>& queued);

// The queued jobs of each pass as PendingJobs, each with its memory
// estimate. A spec never changes once submitted, so the estimate is made
// once, the first time a job id is seen, and kept while the job stays
// queued: a pass over a long queue looks estimates up instead of making
// them again.
class PendingJobCache {
 public:
  using Estimator = std::function<int64_t(const v1::JobSpec&)>;
  explicit PendingJobCache(Estimator estimate = GpuMemoryEstimate)
      : estimate_(std::move(estimate)) {}

  // The jobs of `queued` in the same order. Estimates of jobs no longer
  // queued are dropped once they outnumber the queued jobs.
  std::vector<scheduler::PendingJob> Of(const std::vector<JobRecord>& queued);

  // Estimates kept (for tests).
  size_t size() const { return estimates_.size(); }

 private:
  struct Estimate {
    int64_t bytes = 0;
    uint64_t pass = 0;  // the last pass whose queue held the job
  };
  Estimator estimate_;
  uint64_t pass_ = 0;
  absl::flat_hash_map<std::string, Estimate> estimates_;  // by job id
};

// The work a running job would lose if stopped at `now`, in GPU-seconds
// (CPU-slot seconds for a job without GPUs): the steps since its last
// checkpoint (or the step its attempt resumed from) at its reported
// throughput; before any throughput is known, the whole attempt so far.
double WorkSinceCheckpoint(const v1::Job& job, absl::Time now);

// The jobs in `active` (SCHEDULED, RUNNING, PREEMPTING) held by one of
// `workers`; jobs of other workers (not schedulable now) are left out, as
// the snapshot would refuse them. A job spread over several workers carries
// its parts (RunningJob::more_parts) on those of `workers` that still run
// them, so fair share counts them and preempting it frees them. Only RUNNING
// jobs without a pending cancel may be preempted. A PREEMPTING job is already
// stopping: it is offered as a victim at the lowest priority that loses
// nothing, so the job it makes room for keeps counting on it in later passes
// instead of stopping another job while it winds down.
std::vector<scheduler::RunningJob> RunningJobsOf(
    const std::vector<JobRecord>& active,
    const std::vector<scheduler::WorkerCapacity>& workers, absl::Time now);

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_SCHEDULER_SNAPSHOT_H_
