// FirstFitPolicy: the baseline, exclusive first-fit (the default of
// Kubernetes and Slurm). Jobs are taken by priority (higher first), then by
// submit order; each goes to the first worker, in snapshot order, with room
// for it, getting its lowest wholly free GPU indices. GPUs are exclusive: a
// job asking a share of a GPU still takes the whole GPU. A job without GPUs
// takes CPU slots (and its CPU and host memory).
//
// A job that does not fit now does not block smaller jobs behind it (no
// reservations), so a large job can wait while small ones keep arriving;
// its wait reason says so. Stateless and thread-safe.
#ifndef TRAINYARD_SCHEDULER_FIRST_FIT_POLICY_H_
#define TRAINYARD_SCHEDULER_FIRST_FIT_POLICY_H_

#include <string>
#include <string_view>

#include "scheduler/packing_pass.h"
#include "scheduler/placement_policy.h"

namespace trainyard::scheduler {

class FirstFitPolicy : public PackingPolicy {
 public:
  static constexpr std::string_view kName = "first-fit";

  explicit FirstFitPolicy(PassFeatures features = {})
      : PackingPolicy(kName, features) {}

  Plan Place(const ClusterSnapshot& snapshot) const override;
};

}  // namespace trainyard::scheduler

#endif  // TRAINYARD_SCHEDULER_FIRST_FIT_POLICY_H_
