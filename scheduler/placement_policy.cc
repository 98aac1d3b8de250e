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

// Subtracts one placement from `w`, failing where it does not fit.
absl::Status TakeChecked(const PendingJob& job, const Placement& p,
                         WorkerCapacity& w) {
  if (static_cast<int32_t>(p.gpu_indices.size()) != job.gpus) {
    return Invalid(p, absl::StrCat("needs ", job.gpus, " GPUs, got ",
                                   p.gpu_indices.size()));
  }
  if (!HostFits(w, job)) {
    return Invalid(p, "over-committed on CPU slots, CPU or host memory");
  }
  const GpuDemand demand = DemandOf(job, p.exclusive);
  std::vector<size_t> positions;
  std::set<int32_t> seen;
  for (int32_t index : p.gpu_indices) {
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
    const WorkerCapacity* w = snapshot.FindWorker(p.worker_id);
    if (w == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan: unknown worker ", p.worker_id));
    }
    absl::Status s = TakeChecked(*job, p, free[w - snapshot.workers().data()]);
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
