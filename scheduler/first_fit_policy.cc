#include "scheduler/first_fit_policy.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace trainyard::scheduler {
namespace {

// Jobs in the order they are considered: priority, then submit order, then
// id so that equal keys still give one answer.
std::vector<const PendingJob*> InPlacementOrder(
    const std::vector<PendingJob>& pending) {
  std::vector<const PendingJob*> order;
  order.reserve(pending.size());
  for (const PendingJob& j : pending) order.push_back(&j);
  std::sort(order.begin(), order.end(),
            [](const PendingJob* a, const PendingJob* b) {
              if (a->priority != b->priority) return a->priority > b->priority;
              if (a->submit_order != b->submit_order) {
                return a->submit_order < b->submit_order;
              }
              return a->id < b->id;
            });
  return order;
}

bool FitsNow(const PendingJob& job, const WorkerCapacity& w) {
  if (job.gpus == 0) return w.free_cpu_slots >= job.cpu_slots;
  return static_cast<int32_t>(w.free_gpus.size()) >= job.gpus;
}

bool FitsEmpty(const PendingJob& job, const WorkerCapacity& w) {
  if (job.gpus == 0) return w.cpu_slots >= job.cpu_slots;
  return static_cast<int32_t>(w.gpus.size()) >= job.gpus;
}

std::string WhatItNeeds(const PendingJob& job) {
  if (job.gpus == 0) {
    return job.cpu_slots == 1 ? std::string("a CPU slot")
                              : absl::StrCat(job.cpu_slots, " CPU slots");
  }
  return job.gpus == 1 ? std::string("1 GPU") : absl::StrCat(job.gpus, " GPUs");
}

JobWait WhyWaiting(const PendingJob& job,
                   const std::vector<WorkerCapacity>& workers) {
  if (workers.empty()) {
    return {job.id, WaitKind::kInfeasible,
            "infeasible: no worker is connected"};
  }
  int32_t largest = 0;
  for (const WorkerCapacity& w : workers) {
    if (FitsEmpty(job, w)) {
      return {job.id, WaitKind::kRetryLater,
              absl::StrCat("waiting for ", WhatItNeeds(job),
                           ": all workers that fit it are busy")};
    }
    largest = std::max<int32_t>(
        largest, job.gpus == 0 ? w.cpu_slots
                               : static_cast<int32_t>(w.gpus.size()));
  }
  return {job.id, WaitKind::kInfeasible,
          absl::StrCat("infeasible: needs ", WhatItNeeds(job),
                       " on one worker; the largest worker has ", largest,
                       job.gpus == 0 ? " CPU slots" : " GPUs")};
}

}  // namespace

Plan FirstFitPolicy::Place(const ClusterSnapshot& snapshot) const {
  std::vector<WorkerCapacity> free = snapshot.workers();  // shrinks as we place
  Plan plan;
  for (const PendingJob* job : InPlacementOrder(snapshot.pending())) {
    auto it = std::find_if(free.begin(), free.end(), [&](const auto& w) {
      return FitsNow(*job, w);
    });
    if (it == free.end()) {
      plan.waits.push_back(WhyWaiting(*job, snapshot.workers()));
      continue;
    }
    Placement p{job->id, it->id, {}};
    if (job->gpus == 0) {
      it->free_cpu_slots -= job->cpu_slots;
    } else {
      p.gpu_indices.assign(it->free_gpus.begin(),
                           it->free_gpus.begin() + job->gpus);
      it->free_gpus.erase(it->free_gpus.begin(),
                          it->free_gpus.begin() + job->gpus);
    }
    plan.placements.push_back(std::move(p));
  }
  return plan;
}

}  // namespace trainyard::scheduler
