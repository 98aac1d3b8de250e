// Preemption planning: after a pass has placed what fits, a waiting job may
// stop running jobs of lower priority to make room. For each such job (in
// placement order) every worker is tried first: the preemptible
// lower-priority jobs holding something there are stopped in order of the
// work they would lose (GPU-seconds since their last checkpoint) until the
// waiting job fits, then every victim not needed is spared, the costliest
// first; the worker losing the least work wins (then fewer victims, then
// snapshot order). A job that may spread its ranks over several nodes and
// that no single node can be freed for does the same over the whole cluster:
// victims anywhere, least work first, until its ranks fit at most max_nodes
// nodes (as the pass would spread them), then the unneeded ones are spared.
// So no victim of a plan could be spared, and stopping a job spread over
// several nodes counts as freeing every part of it. The waiting job does not
// start in this pass — the victims must stop first — but what it will take
// is held for it, so no other waiting job counts on the same freed room.
// Thread-compatible; part of one pass.
#ifndef TRAINYARD_SCHEDULER_PREEMPTION_H_
#define TRAINYARD_SCHEDULER_PREEMPTION_H_

#include "scheduler/cluster_snapshot.h"
#include "scheduler/packing_pass.h"
#include "scheduler/placement_policy.h"

namespace trainyard::scheduler {

// Gives back to `w`'s free capacity what a running job holds on it: its own
// holdings when `w` is its worker, and those of its parts on `w`.
void GiveBack(WorkerCapacity& w, const RunningJob& job);

// Adds preemptions to `plan` for its waiting jobs (retry-later ones only),
// updating their wait reasons, and takes the room they will get out of
// `free`. `exclusive`: GPU jobs take whole GPUs (as the pass did).
void PlanPreemptions(const ClusterSnapshot& snapshot, bool exclusive,
                     FreeCapacity& free, Plan& plan);

}  // namespace trainyard::scheduler

#endif  // TRAINYARD_SCHEDULER_PREEMPTION_H_
