#include "server/tenant_quota.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "server/cluster_view.h"

namespace trainyard::server {

const v1::Tenant& TenantLimitsCache::Of(const std::string& tenant) {
  auto [it, fresh] = cache_.try_emplace(tenant);
  if (fresh) it->second = limits_(tenant);
  return it->second;
}

std::map<std::string, TenantHeld> HeldByTenant(
    const std::vector<JobRecord>& active) {
  std::map<std::string, TenantHeld> held;
  for (const JobRecord& r : active) {
    const JobNeed need = NeedOf(r.job.spec());
    TenantHeld& h = held[r.job.tenant()];
    h.gpus += need.gpus;
    h.cpu_slots += need.cpu_slots;
  }
  return held;
}

std::string QuotaWaitReason(const v1::Tenant& limits, const TenantHeld& held,
                            const v1::JobSpec& spec) {
  const JobNeed need = NeedOf(spec);
  if (limits.max_gpus() > 0 && need.gpus > 0 &&
      held.gpus + need.gpus > limits.max_gpus()) {
    return absl::StrCat("waiting for tenant ", limits.name(),
                        "'s GPU quota: ", held.gpus, " of ",
                        limits.max_gpus(), " GPUs in use, the job needs ",
                        need.gpus);
  }
  if (limits.max_cpu_slots() > 0 && need.cpu_slots > 0 &&
      held.cpu_slots + need.cpu_slots > limits.max_cpu_slots()) {
    return absl::StrCat("waiting for tenant ", limits.name(),
                        "'s CPU slot quota: ", held.cpu_slots, " of ",
                        limits.max_cpu_slots(), " slots in use");
  }
  return "";
}

std::vector<scheduler::JobWait> OverQuotaWaits(
    TenantLimitsCache& limits, const std::map<std::string, TenantHeld>& held,
    const std::vector<JobRecord>& queued) {
  std::vector<scheduler::JobWait> waits;
  for (const JobRecord& r : queued) {
    const std::string& tenant = r.job.tenant();
    auto h = held.find(tenant);
    std::string reason = QuotaWaitReason(
        limits.Of(tenant), h == held.end() ? TenantHeld{} : h->second,
        r.job.spec());
    if (!reason.empty()) {
      waits.push_back({r.job.id(), scheduler::WaitKind::kRetryLater,
                       std::move(reason), 0});
    }
  }
  return waits;
}

void ApplyTenantQuotas(TenantLimitsCache& limits,
                       std::map<std::string, TenantHeld> held,
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
    const v1::Job& job = q->second.job;
    TenantHeld& h = held[job.tenant()];
    std::string reason = QuotaWaitReason(limits.Of(job.tenant()), h, job.spec());
    if (!reason.empty()) {
      dropped.insert(p.job_id);
      plan.waits.push_back({p.job_id, scheduler::WaitKind::kRetryLater,
                            std::move(reason), 0});
      continue;
    }
    const JobNeed need = NeedOf(job.spec());
    h.gpus += need.gpus;
    h.cpu_slots += need.cpu_slots;
    kept.push_back(std::move(p));
  }
  plan.placements = std::move(kept);
  if (dropped.empty()) return;
  std::erase_if(plan.preemptions, [&](const scheduler::Preemption& p) {
    return dropped.count(p.for_job_id) > 0;
  });
}

}  // namespace trainyard::server
