// PlacementPolicy: decides where queued jobs run. A policy is a pure function
// of an immutable ClusterSnapshot: it returns a Plan describing the work and
// never touches live state; the server's dispatcher carries the plan out
// ("policy decides, mechanism acts"). Policies hold no mutable state, so one
// instance may be used from several threads.
//
// A job the plan does not place gets a JobWait that separates "retry later"
// (the cluster could run it, just not now) from "infeasible" (no worker in
// the cluster could ever fit it), so users learn at once that a job can
// never start instead of waiting forever.
#ifndef TRAINYARD_SCHEDULER_PLACEMENT_POLICY_H_
#define TRAINYARD_SCHEDULER_PLACEMENT_POLICY_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "scheduler/cluster_snapshot.h"

namespace trainyard::scheduler {

struct Placement {
  std::string job_id;
  std::string worker_id;
  std::vector<int32_t> gpu_indices;  // empty for a CPU job
};

enum class WaitKind {
  kRetryLater,  // fits the cluster, but not its free capacity now
  kInfeasible,  // no worker of the cluster could ever fit it
};

struct JobWait {
  std::string job_id;
  WaitKind kind = WaitKind::kRetryLater;
  std::string reason;  // for people: shown as the job's state_reason
};

struct Plan {
  std::vector<Placement> placements;  // in the order they should be carried out
  std::vector<JobWait> waits;         // one per pending job not placed
};

class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;
  virtual std::string_view name() const = 0;
  // Same snapshot, same plan: policies are deterministic.
  virtual Plan Place(const ClusterSnapshot& snapshot) const = 0;
};

// The policy registered under `name` ("first-fit"). INVALID_ARGUMENT naming
// the known policies for any other name.
absl::StatusOr<std::unique_ptr<PlacementPolicy>> MakePlacementPolicy(
    std::string_view name);

// Names MakePlacementPolicy accepts.
std::vector<std::string> PlacementPolicyNames();

// Checks a plan against its snapshot: every placement names a pending job
// (at most once) and a known worker, and no worker is given more CPU slots
// or GPUs than it has free. The dispatcher checks every plan with this before
// acting on it; tests use it to prove a policy never over-commits.
absl::Status CheckPlan(const ClusterSnapshot& snapshot, const Plan& plan);

}  // namespace trainyard::scheduler

#endif  // TRAINYARD_SCHEDULER_PLACEMENT_POLICY_H_
