#include "sim/saturation.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "scheduler/node_fit.h"

namespace trainyard::sim {
namespace {

using scheduler::PendingJob;
using scheduler::WorkerCapacity;

int64_t RequestMilli(const PendingJob& j) {
  return j.gpus == 0 ? 0 : int64_t{j.gpus} * j.gpu_compute_milli;
}

absl::Status CheckInputs(int64_t capacity, const std::vector<TracePod>& pods,
                         const std::vector<double>& loads) {
  if (capacity == 0) return absl::InvalidArgumentError("cluster has no GPU");
  if (pods.empty()) return absl::InvalidArgumentError("no pods to draw from");
  bool asks_gpu = false;
  for (const TracePod& p : pods) asks_gpu |= RequestMilli(p.shape) > 0;
  if (!asks_gpu) {
    // Arrivals would never add up to any load.
    return absl::InvalidArgumentError("no pod asks for a GPU");
  }
  for (size_t i = 0; i < loads.size(); ++i) {
    if (!(loads[i] > 0 && loads[i] <= 1) ||
        (i > 0 && loads[i] <= loads[i - 1])) {
      return absl::InvalidArgumentError(
          "loads must be ascending and in (0, 1]");
    }
  }
  return absl::OkStatus();
}

// Subtracts a plan's placements from `free`; returns the GPU compute asked
// for by the placed jobs.
int64_t Apply(const scheduler::ClusterSnapshot& snapshot,
              const scheduler::Plan& plan,
              const absl::flat_hash_map<std::string, size_t>& worker_at,
              std::vector<WorkerCapacity>& free) {
  int64_t allocated = 0;
  for (const scheduler::Placement& p : plan.placements) {
    const PendingJob& job = *snapshot.FindJob(p.job_id);
    WorkerCapacity& w = free[worker_at.at(p.worker_id)];
    std::vector<size_t> positions;
    for (int32_t index : p.gpu_indices) {
      size_t pos = 0;
      while (w.devices[pos].index != index) ++pos;
      positions.push_back(pos);
    }
    scheduler::Take(w, job, scheduler::DemandOf(job, p.exclusive), positions);
    allocated += RequestMilli(job);
  }
  return allocated;
}

// Which pod arrives next: every pod of the list once, in a random order,
// then (when the list asks for less than the load) copies of pods drawn at
// random, as the FGD paper's simulator replays a trace.
class ArrivalOrder {
 public:
  ArrivalOrder(size_t pods, std::mt19937_64& rng)
      : order_(pods), draw_(0, pods - 1) {
    std::iota(order_.begin(), order_.end(), size_t{0});
    std::shuffle(order_.begin(), order_.end(), rng);
  }

  size_t Next(std::mt19937_64& rng) {
    return next_ < order_.size() ? order_[next_++] : draw_(rng);
  }

 private:
  std::vector<size_t> order_;
  size_t next_ = 0;
  std::uniform_int_distribution<size_t> draw_;
};

}  // namespace

absl::StatusOr<std::vector<LoadPoint>> RunSaturation(
    const std::vector<WorkerCapacity>& cluster,
    const std::vector<TracePod>& pods, const scheduler::PlacementPolicy& policy,
    const SaturationOptions& options) {
  int64_t capacity = 0;
  absl::flat_hash_map<std::string, size_t> worker_at;
  for (size_t i = 0; i < cluster.size(); ++i) {
    capacity += int64_t{scheduler::kWholeGpuMilli} *
                static_cast<int64_t>(cluster[i].devices.size());
    worker_at[cluster[i].id] = i;
  }
  RETURN_IF_ERROR(CheckInputs(capacity, pods, options.loads));
  std::vector<scheduler::TaskClass> workload;
  for (const TracePod& p : pods) workload.push_back({p.shape, 1.0});

  std::mt19937_64 rng(options.seed);
  ArrivalOrder arrivals(pods.size(), rng);
  std::vector<WorkerCapacity> free = cluster;
  std::vector<LoadPoint> points;
  int64_t requested = 0, allocated = 0, arrived = 0;
  LoadPoint point;
  for (double load : options.loads) {
    std::vector<PendingJob> batch;
    while (requested < load * capacity) {
      PendingJob job = pods[arrivals.Next(rng)].shape;
      job.id = absl::StrCat("t", arrived);
      job.submit_order = arrived++;
      requested += RequestMilli(job);
      batch.push_back(std::move(job));
    }
    ASSIGN_OR_RETURN(
        scheduler::ClusterSnapshot snapshot,
        scheduler::ClusterSnapshot::Create(free, std::move(batch), workload));
    const scheduler::Plan plan = policy.Place(snapshot);
    absl::Status valid = scheduler::CheckPlan(snapshot, plan);
    if (!valid.ok()) return absl::InternalError(valid.message());
    if (!plan.reservations.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          std::string(policy.name()),
          ": reserves workers, which a saturation run (no queue: a task that "
          "does not fit fails) cannot model"));
    }
    allocated += Apply(snapshot, plan, worker_at, free);
    point.load = load;
    point.arrived_tasks = arrived;
    point.failed_tasks += static_cast<int64_t>(plan.waits.size());
    for (const scheduler::JobWait& w : plan.waits) {
      if (snapshot.FindJob(w.job_id)->gpus > 0) ++point.failed_gpu_tasks;
    }
    point.unallocated_share =
        1.0 - static_cast<double>(allocated) / static_cast<double>(capacity);
    points.push_back(point);
  }
  return points;
}

}  // namespace trainyard::sim
