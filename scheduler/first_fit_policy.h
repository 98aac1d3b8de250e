// FirstFitPolicy: the baseline placement policy. Jobs are taken by priority
// (higher first), then by submit order; each goes to the first worker, in
// snapshot order, with room for it, getting its lowest free GPU indices.
// GPUs are exclusive (one job per GPU) and a CPU job takes whole CPU slots.
//
// A job that does not fit now does not block smaller jobs behind it (no
// reservations: backfill with reservations comes with a later policy), so a
// large job can wait while small ones keep arriving; its wait reason says so.
// Stateless and thread-safe.
#ifndef TRAINYARD_SCHEDULER_FIRST_FIT_POLICY_H_
#define TRAINYARD_SCHEDULER_FIRST_FIT_POLICY_H_

#include <string_view>

#include "scheduler/placement_policy.h"

namespace trainyard::scheduler {

class FirstFitPolicy : public PlacementPolicy {
 public:
  static constexpr std::string_view kName = "first-fit";

  std::string_view name() const override { return kName; }
  Plan Place(const ClusterSnapshot& snapshot) const override;
};

}  // namespace trainyard::scheduler

#endif  // TRAINYARD_SCHEDULER_FIRST_FIT_POLICY_H_
