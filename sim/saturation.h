// The saturation experiment of the FGD paper (Weng et al., ATC'23, §6):
// the pods of a trace's pod list arrive one after another on an initially
// idle cluster, each once in a random (seeded) order and then, should the
// list ask for less, copies of pods drawn at random, as the paper's own
// simulator replays a list; each is placed at once or fails (no queueing,
// nothing ends), until the GPU compute the arrived tasks asked for reaches
// 100% of the cluster's. At each arrived load (e.g. 80/90/95/100%) it
// records the share of the cluster's GPU compute left unallocated
// (asked-for shares count as allocated; the rest of a GPU an exclusive
// policy gives whole counts as unallocated) and the failed tasks.
//
// Arrivals between two recorded loads go to the policy as one pending queue
// in arrival order: a pass considers them in that order and free capacity
// only shrinks, so this is the same as one pass per arrival, only faster.
// That holds only for a policy that reserves nothing: a reservation
// (+backfill) would hold a node for a task that, with no queue, has already
// failed, and keep the batch's later tasks off it, which one pass per
// arrival never does. So a plan with a reservation is an error. Preemption
// and fair share have nothing to act on either (no running job, one
// tenant, one priority). Thread-compatible.
#ifndef TRAINYARD_SIM_SATURATION_H_
#define TRAINYARD_SIM_SATURATION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/cluster_snapshot.h"
#include "scheduler/placement_policy.h"
#include "sim/openb_trace.h"

namespace trainyard::sim {

struct SaturationOptions {
  std::vector<double> loads = {0.8, 0.9, 0.95, 1.0};  // ascending, in (0, 1]
  uint64_t seed = 1;
};

struct LoadPoint {
  double load = 0;               // arrived GPU request / GPU capacity
  double unallocated_share = 0;  // of the cluster's GPU compute
  int64_t arrived_tasks = 0;
  int64_t failed_tasks = 0;      // so far
  int64_t failed_gpu_tasks = 0;  // of which asked for GPUs
};

// INVALID_ARGUMENT when the cluster has no GPU, no pod asks for a GPU, the
// loads are not ascending in (0, 1], or the policy reserves a worker (see
// above); INTERNAL when the policy over-commits.
absl::StatusOr<std::vector<LoadPoint>> RunSaturation(
    const std::vector<scheduler::WorkerCapacity>& cluster,
    const std::vector<TracePod>& pods, const scheduler::PlacementPolicy& policy,
    const SaturationOptions& options);

}  // namespace trainyard::sim

#endif  // TRAINYARD_SIM_SATURATION_H_
