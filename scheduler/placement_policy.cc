#include "scheduler/placement_policy.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "scheduler/best_fit_policy.h"
#include "scheduler/fgd_policy.h"
#include "scheduler/first_fit_policy.h"
#include "scheduler/node_fit.h"

namespace trainyard::scheduler {

namespace {

absl::Status UnknownPolicy(std::string_view name) {
  return absl::InvalidArgumentError(
      absl::StrCat("policy: unknown placement policy \"", std::string(name),
                   "\" (known: ", absl::StrJoin(PlacementPolicyNames(), ", "),
                   ", each optionally with +drf, +backfill, +preempt)"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PlacementPolicy>> MakePlacementPolicy(
    std::string_view name) {
  std::vector<std::string> parts =
      absl::StrSplit(absl::string_view(name.data(), name.size()), '+');
  PassFeatures f;
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i] == "drf" && !f.fair_share) {
      f.fair_share = true;
    } else if (parts[i] == "backfill" && f.reservations == 0) {
      f.reservations = 1;
    } else if (parts[i] == "preempt" && !f.preemption) {
      f.preemption = true;
    } else {
      return UnknownPolicy(name);
    }
  }
  if (parts[0] == FirstFitPolicy::kName) {
    return std::make_unique<FirstFitPolicy>(f);
  }
  if (parts[0] == BestFitPolicy::kName) {
    return std::make_unique<BestFitPolicy>(f);
  }
  if (parts[0] == FgdPolicy::kName) return std::make_unique<FgdPolicy>(f);
  return UnknownPolicy(name);
}

std::vector<std::string> PlacementPolicyNames() {
  return {std::string(FirstFitPolicy::kName), std::string(BestFitPolicy::kName),
          std::string(FgdPolicy::kName)};
}

namespace {

absl::Status Invalid(const Placement& p, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(
      "plan: job ", p.job_id, " on worker ", p.worker_id, ": ", what));
}

// Subtracts one node's part of a placement (the job's `ranks` ranks given
// `gpu_indices`) from `w`, failing where it does not fit.
absl::Status TakeChecked(const PendingJob& whole_job, const Placement& p,
                         int32_t ranks, const std::vector<int32_t>& gpu_indices,
                         WorkerCapacity& w) {
  const PendingJob job = PartOf(whole_job, ranks);
  if (static_cast<int32_t>(gpu_indices.size()) != job.gpus) {
    return Invalid(p, absl::StrCat("needs ", job.gpus, " GPUs on worker ", w.id,
                                   ", got ", gpu_indices.size()));
  }
  if (!HostFits(w, job)) {
    return Invalid(p, absl::StrCat("over-committed on CPU slots, CPU or host "
                                   "memory of worker ",
                                   w.id));
  }
  const GpuDemand demand = DemandOf(job, p.exclusive);
  std::vector<size_t> positions;
  std::set<int32_t> seen;
  for (int32_t index : gpu_indices) {
    size_t pos = 0;
    while (pos < w.devices.size() && w.devices[pos].index != index) ++pos;
    if (pos == w.devices.size() || !seen.insert(index).second) {
      return Invalid(p, absl::StrCat("GPU ", index, " unknown or repeated"));
    }
    if (!GpuFits(w.devices[pos], demand)) {
      return Invalid(p, absl::StrCat("GPU ", index, " is not free enough"));
    }
    positions.push_back(pos);
  }
  Take(w, job, demand, positions);
  return absl::OkStatus();
}

// Checks and takes every node's part of `p` from `free` (snapshot order).
absl::Status TakePlacement(const ClusterSnapshot& snapshot,
                           const PendingJob& job, const Placement& p,
                           std::vector<WorkerCapacity>& free) {
  const auto worker_of =
      [&](const std::string& id) -> absl::StatusOr<WorkerCapacity*> {
    const WorkerCapacity* w = snapshot.FindWorker(id);
    if (w == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan: unknown worker ", id));
    }
    return &free[w - snapshot.workers().data()];
  };
  const int32_t ranks = RanksOf(job);
  if (p.more_nodes.empty()) {
    absl::StatusOr<WorkerCapacity*> w = worker_of(p.worker_id);
    if (!w.ok()) return w.status();
    return TakeChecked(job, p, ranks, p.gpu_indices, **w);
  }
  const int32_t first_node_ranks = p.more_nodes[0].first_rank;
  if ((job.max_nodes == 1 || ranks <= 1 ||
       (job.max_nodes > 0 &&
        static_cast<int32_t>(p.more_nodes.size()) + 1 > job.max_nodes))) {
    return Invalid(p, absl::StrCat("spread over ", p.more_nodes.size() + 1,
                                   " nodes, allowed ", job.max_nodes));
  }
  std::set<std::string> nodes = {p.worker_id};
  int32_t next_rank = first_node_ranks;
  for (const PlacementPart& part : p.more_nodes) {
    if (part.first_rank != next_rank || part.ranks <= 0 ||
        !nodes.insert(part.worker_id).second) {
      return Invalid(p, absl::StrCat("part on worker ", part.worker_id,
                                     " does not continue the ranks at ",
                                     next_rank, " on a node of its own"));
    }
    next_rank += part.ranks;
  }
  if (first_node_ranks <= 0 || next_rank != ranks) {
    return Invalid(p, absl::StrCat("its parts cover ", next_rank, " of ", ranks,
                                   " ranks"));
  }
  absl::StatusOr<WorkerCapacity*> w = worker_of(p.worker_id);
  if (!w.ok()) return w.status();
  absl::Status s = TakeChecked(job, p, first_node_ranks, p.gpu_indices, **w);
  for (size_t i = 0; s.ok() && i < p.more_nodes.size(); ++i) {
    w = worker_of(p.more_nodes[i].worker_id);
    if (!w.ok()) return w.status();
    s = TakeChecked(job, p, p.more_nodes[i].ranks, p.more_nodes[i].gpu_indices,
                    **w);
  }
  return s;
}

}  // namespace

absl::Status CheckPreemptions(const ClusterSnapshot& snapshot,
                              const Plan& plan) {
  std::set<std::string> stopped;
  for (const Preemption& p : plan.preemptions) {
    auto it =
        std::find_if(snapshot.running().begin(), snapshot.running().end(),
                     [&](const RunningJob& r) { return r.id == p.job_id; });
    if (it == snapshot.running().end() || it->worker_id != p.worker_id) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plan: preempts ", p.job_id, ", not running on ", p.worker_id));
    }
    if (snapshot.FindJob(p.for_job_id) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan: preempts ", p.job_id, " for ", p.for_job_id,
                       ", which is not pending"));
    }
    if (!stopped.insert(p.job_id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan: preempts ", p.job_id, " twice"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckPlan(const ClusterSnapshot& snapshot, const Plan& plan) {
  if (absl::Status s = CheckPreemptions(snapshot, plan); !s.ok()) return s;
  std::vector<WorkerCapacity> free = snapshot.workers();
  std::set<std::string> placed;
  for (const Placement& p : plan.placements) {
    const PendingJob* job = snapshot.FindJob(p.job_id);
    if (job == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan: job ", p.job_id, " is not pending"));
    }
    if (!placed.insert(p.job_id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan: job ", p.job_id, " placed twice"));
    }
    absl::Status s = TakePlacement(snapshot, *job, p, free);
    if (!s.ok()) return s;
  }
  for (const JobWait& w : plan.waits) {
    if (placed.contains(w.job_id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan: job ", w.job_id, " both placed and waiting"));
    }
  }
  return absl::OkStatus();
}

}  // namespace trainyard::scheduler
