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

// What a placed job holds of a GPU it shares with other jobs.
struct GpuShare {
  int32_t index = 0;  // the GPU's device index on its worker
  int64_t memory_bytes = 0;
  int32_t compute_milli = 0;
  bool operator==(const GpuShare&) const = default;
};

// Some ranks of a job spread over several nodes, on one node other than the
// placement's own worker.
struct PlacementPart {
  std::string worker_id;
  int32_t first_rank = 0;
  int32_t ranks = 0;
  std::vector<int32_t> gpu_indices = {};  // one per rank; empty for CPU ranks
  std::vector<GpuShare> shares = {};      // as Placement::shares
  bool operator==(const PlacementPart&) const = default;
};

struct Placement {
  std::string job_id;
  std::string worker_id;
  std::vector<int32_t> gpu_indices;  // empty for a job without GPUs
  // The GPUs are taken whole although the job asks only a share of each
  // (exclusive policies).
  bool exclusive = false;
  // The GPUs of gpu_indices the job shares, with its share of each; the
  // others it holds whole.
  std::vector<GpuShare> shares = {};
  // A job whose ranks did not fit on one node: the other nodes' parts, in
  // rank order. The placement's own worker runs ranks 0 up to the first
  // part's first_rank. Empty for a job on one node.
  std::vector<PlacementPart> more_nodes = {};
};

enum class WaitKind {
  kRetryLater,  // fits the cluster, but not its free capacity now
  kInfeasible,  // no worker of the cluster could ever fit it
};

// A wait's reason when the snapshot has no worker at all.
inline constexpr char kNoWorkerReason[] = "infeasible: no worker is connected";

struct JobWait {
  std::string job_id;
  WaitKind kind = WaitKind::kRetryLater;
  std::string reason;  // for people: shown as the job's state_reason
  // 1-based place among the waiting jobs in the order they would start as
  // room frees (priority, then submit order or fair share: see
  // JobOrder::NumberWaits): its queue position.
  int64_t position = 0;
};

// Stop a running job (it resumes later from its checkpoint) to make room
// for a waiting job of higher priority.
struct Preemption {
  std::string job_id;  // the running job to stop
  std::string worker_id;
  std::string for_job_id;  // the pending job it makes room for
  // The workers that job is to run on once its victims have stopped (one,
  // or the nodes of a spread), for the next passes to hold for it
  // (PreemptionHolds).
  std::vector<std::string> room_on = {};
};

// A worker held for a waiting job: later jobs of this pass were not put on
// it, so it fills up for that job as its running jobs end (backfill never
// takes a reserved worker).
struct Reservation {
  std::string job_id;
  std::string worker_id;
};

struct Plan {
  // In the order they should be carried out.
  std::vector<Placement> placements = {};
  std::vector<JobWait> waits = {};  // one per pending job not placed
  std::vector<Preemption> preemptions = {};
  std::vector<Reservation> reservations = {};
};

class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;
  virtual std::string_view name() const = 0;
  // Same snapshot, same plan: policies are deterministic.
  virtual Plan Place(const ClusterSnapshot& snapshot) const = 0;
};

// The policy registered under `name`: a base policy ("first-fit",
// "best-fit", "fgd") optionally followed by features joined with '+':
// "preempt" (priorities with preemption), "drf" (weighted dominant-resource
// fair share between tenants within a priority), "backfill" (the first
// blocked job reserves a worker; the others backfill the rest), e.g.
// "fgd+drf+preempt". INVALID_ARGUMENT naming the known names otherwise.
absl::StatusOr<std::unique_ptr<PlacementPolicy>> MakePlacementPolicy(
    std::string_view name);

// Base names MakePlacementPolicy accepts (features may be added to each).
std::vector<std::string> PlacementPolicyNames();

// Checks a plan against its snapshot: every preemption names a running job
// (at most once) on its own worker; every placement names a pending job
// (at most once) and a known worker, gives it exactly `gpus` distinct devices
// of that worker (or, spread over at most max_nodes distinct workers, parts
// covering every rank once, each with its ranks' devices), and no worker is
// given more CPU slots, CPU, host memory, GPU memory or GPU compute than it has
// free. The dispatcher checks every plan with this before acting on it; tests
// use it to prove a policy never over-commits.
absl::Status CheckPlan(const ClusterSnapshot& snapshot, const Plan& plan);

}  // namespace trainyard::scheduler

#endif  // TRAINYARD_SCHEDULER_PLACEMENT_POLICY_H_
