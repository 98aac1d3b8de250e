#include "server/start_limits.h"

#include <set>
#include <utility>

namespace trainyard::server {

std::vector<scheduler::JobWait> HeldBackWaits(
    const StartLimit& limit, const std::vector<JobRecord>& queued) {
  std::vector<scheduler::JobWait> waits;
  for (const JobRecord& r : queued) {
    std::string reason = limit.wait_reason(r.job);
    if (!reason.empty()) {
      waits.push_back(
          {r.job.id(), scheduler::WaitKind::kRetryLater, std::move(reason), 0});
    }
  }
  return waits;
}

void DropPlacementsPastLimit(const StartLimit& limit,
                             const std::map<std::string, JobRecord>& queued,
                             scheduler::Plan& plan) {
  std::set<std::string> dropped;
  std::vector<scheduler::Placement> kept;
  for (scheduler::Placement& p : plan.placements) {
    auto q = queued.find(p.job_id);
    if (q == queued.end()) {
      kept.push_back(std::move(p));
      continue;
    }
    std::string reason = limit.wait_reason(q->second.job);
    if (!reason.empty()) {
      dropped.insert(p.job_id);
      plan.waits.push_back(
          {p.job_id, scheduler::WaitKind::kRetryLater, std::move(reason), 0});
      continue;
    }
    limit.count(q->second.job);
    kept.push_back(std::move(p));
  }
  plan.placements = std::move(kept);
  if (dropped.empty()) return;
  std::erase_if(plan.preemptions, [&](const scheduler::Preemption& p) {
    return dropped.contains(p.for_job_id);
  });
}

}  // namespace trainyard::server
