// BestFitPolicy: packing baseline. GPUs are shared: a job asking a share of a
// GPU takes only that share. Each job goes to the worker it fits with the
// least free GPU compute (then the least free CPU; then snapshot order), and
// there to the fitting GPUs with the least free compute, so partly used
// GPUs fill up before idle ones are touched. Jobs without GPUs go to the
// worker with the least free CPU they fit. Multi-GPU jobs are gangs: all
// their GPUs on one node, or they wait. Stateless and thread-safe.
#ifndef TRAINYARD_SCHEDULER_BEST_FIT_POLICY_H_
#define TRAINYARD_SCHEDULER_BEST_FIT_POLICY_H_

#include <string>
#include <string_view>

#include "scheduler/packing_pass.h"
#include "scheduler/placement_policy.h"

namespace trainyard::scheduler {

class BestFitPolicy : public PackingPolicy {
 public:
  static constexpr std::string_view kName = "best-fit";

  explicit BestFitPolicy(PassFeatures features = {})
      : PackingPolicy(kName, features) {}

  Plan Place(const ClusterSnapshot& snapshot) const override;
};

}  // namespace trainyard::scheduler

#endif  // TRAINYARD_SCHEDULER_BEST_FIT_POLICY_H_
