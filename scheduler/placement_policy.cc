#include "scheduler/placement_policy.h"

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "scheduler/first_fit_policy.h"

namespace trainyard::scheduler {

absl::StatusOr<std::unique_ptr<PlacementPolicy>> MakePlacementPolicy(
    std::string_view name) {
  if (name == FirstFitPolicy::kName) return std::make_unique<FirstFitPolicy>();
  return absl::InvalidArgumentError(
      absl::StrCat("policy: unknown placement policy \"", std::string(name),
                   "\" (known: ", absl::StrJoin(PlacementPolicyNames(), ", "),
                   ")"));
}

std::vector<std::string> PlacementPolicyNames() {
  return {std::string(FirstFitPolicy::kName)};
}

namespace {

// What one worker still has while the plan's placements are subtracted.
struct Remaining {
  int32_t cpu_slots = 0;
  std::set<int32_t> gpus;
};

absl::Status Take(const PendingJob& job, const Placement& p, Remaining& r) {
  if (job.gpus == 0) {
    if (!p.gpu_indices.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan: CPU job ", job.id, " was given GPUs"));
    }
    if (r.cpu_slots < job.cpu_slots) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plan: worker ", p.worker_id, " over-committed on CPU slots by job ",
          job.id));
    }
    r.cpu_slots -= job.cpu_slots;
    return absl::OkStatus();
  }
  if (static_cast<int32_t>(p.gpu_indices.size()) != job.gpus) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan: job ", job.id, " needs ", job.gpus, " GPUs, got ",
                     p.gpu_indices.size()));
  }
  for (int32_t g : p.gpu_indices) {
    if (r.gpus.erase(g) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan: GPU ", g, " of worker ", p.worker_id,
                       " is not free (job ", job.id, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckPlan(const ClusterSnapshot& snapshot, const Plan& plan) {
  std::map<std::string, Remaining> remaining;
  for (const WorkerCapacity& w : snapshot.workers()) {
    remaining[w.id] = {w.free_cpu_slots,
                       std::set<int32_t>(w.free_gpus.begin(), w.free_gpus.end())};
  }
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
    auto it = remaining.find(p.worker_id);
    if (it == remaining.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan: unknown worker ", p.worker_id));
    }
    absl::Status s = Take(*job, p, it->second);
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
