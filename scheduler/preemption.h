// Preemption planning: after a pass has placed what fits, a waiting job may
// stop running jobs of lower priority to make room. For each such job (in
// placement order) every worker is tried: its preemptible lower-priority
// jobs are freed in order of the work they would lose (GPU-seconds since
// their last checkpoint) until the waiting job fits, then any victim not
// needed is spared; the worker losing the least work wins (then fewer
// victims, then snapshot order). The waiting job does not start in this
// pass — the victims must stop first — but what it will take there is held
// for it, so no other waiting job counts on the same freed room.
// Thread-compatible; part of one pass.
#ifndef TRAINYARD_SCHEDULER_PREEMPTION_H_
#define TRAINYARD_SCHEDULER_PREEMPTION_H_

#include "scheduler/cluster_snapshot.h"
#include "scheduler/packing_pass.h"
#include "scheduler/placement_policy.h"

namespace trainyard::scheduler {

// Gives a running job's holdings back to its worker's free capacity.
void GiveBack(WorkerCapacity& w, const RunningJob& job);

// Adds preemptions to `plan` for its waiting jobs (retry-later ones only),
// updating their wait reasons, and takes the room they will get out of
// `free`. `exclusive`: GPU jobs take whole GPUs (as the pass did).
void PlanPreemptions(const ClusterSnapshot& snapshot, bool exclusive,
                     FreeCapacity& free, Plan& plan);

}  // namespace trainyard::scheduler

#endif  // TRAINYARD_SCHEDULER_PREEMPTION_H_
