// FgdPolicy: fragmentation gradient descent (Weng et al., "Beware of
// Fragmentation", USENIX ATC'23). A node's fragmentation for a kind of task
// is the free GPU compute that task could not use there: all of it when the
// task does not fit the node at all (too few GPUs, CPU or host memory),
// otherwise the free compute of the GPUs too small for it. Weighting by how
// often each kind arrives gives the node's expected fragmentation. Each job
// goes where (worker and GPUs) that expectation grows the least; ties go to
// the tighter node, then snapshot order.
//
// The task kinds come from the snapshot's workload (the trace's or the
// cluster's history) and, when it is empty, from the pending jobs. Kinds
// without GPUs add the same amount wherever a job goes, so they are left
// out; the rarest kinds beyond 99% of the weight (or past 64 kinds) too.
// Multi-GPU jobs are gangs on one node. Stateless and thread-safe.
#ifndef TRAINYARD_SCHEDULER_FGD_POLICY_H_
#define TRAINYARD_SCHEDULER_FGD_POLICY_H_

#include <string>
#include <string_view>
#include <vector>

#include "scheduler/node_fit.h"
#include "scheduler/packing_pass.h"
#include "scheduler/placement_policy.h"

namespace trainyard::scheduler {

class FgdPolicy : public PackingPolicy {
 public:
  static constexpr std::string_view kName = "fgd";

  explicit FgdPolicy(PassFeatures features = {})
      : PackingPolicy(kName, features) {}

  Plan Place(const ClusterSnapshot& snapshot) const override;
};

// One kind of task as FGD weighs it.
struct FragClass {
  PendingJob shape;
  GpuDemand demand;
  double weight = 0;  // the kinds' weights sum to 1
};

// The task kinds FGD weighs for `snapshot` (see above).
std::vector<FragClass> FragClassesFor(const ClusterSnapshot& snapshot);

// Expected fragmentation of a node, milli-GPU.
double NodeFragmentation(const WorkerCapacity& w,
                         const std::vector<FragClass>& classes);

}  // namespace trainyard::scheduler

#endif  // TRAINYARD_SCHEDULER_FGD_POLICY_H_
