#include "server/tenant_quota.h"

#include <algorithm>

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

std::string NeverFitsQuota(const v1::Tenant& limits, const v1::JobSpec& spec) {
  const JobNeed need = NeedOf(spec);
  if (limits.max_gpus() > 0 && need.gpus > limits.max_gpus()) {
    return absl::StrCat("tenant ", limits.name(), " may hold at most ",
                        limits.max_gpus(), " GPUs at once; the job asks for ",
                        need.gpus);
  }
  if (limits.max_cpu_slots() > 0 && need.cpu_slots > limits.max_cpu_slots()) {
    return absl::StrCat(
        "tenant ", limits.name(), " may hold at most ", limits.max_cpu_slots(),
        " CPU slots at once; the job asks for ", need.cpu_slots);
  }
  return "";
}

std::string QuotaWaitReason(const v1::Tenant& limits, const TenantHeld& held,
                            const v1::JobSpec& spec) {
  // A quota lowered below what a queued job needs: say so rather than wait
  // for room that can never come.
  const std::string never = NeverFitsQuota(limits, spec);
  if (!never.empty()) {
    return absl::StrCat("cannot start: ", never,
                        " (raise the quota or cancel the job)");
  }
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
                        limits.max_cpu_slots(), " slots in use, the job needs ",
                        need.cpu_slots);
  }
  return "";
}

namespace {

// The quota limit of a pass, counting from `held`.
StartLimit QuotaLimit(TenantLimitsCache& limits,
                      std::map<std::string, TenantHeld>& held) {
  return StartLimit{
      .wait_reason =
          [&limits, &held](const v1::Job& job) {
            auto h = held.find(job.tenant());
            return QuotaWaitReason(limits.Of(job.tenant()),
                                   h == held.end() ? TenantHeld{} : h->second,
                                   job.spec());
          },
      .count =
          [&held](const v1::Job& job) {
            const JobNeed need = NeedOf(job.spec());
            TenantHeld& h = held[job.tenant()];
            h.gpus += need.gpus;
            h.cpu_slots += need.cpu_slots;
          },
  };
}

}  // namespace

std::vector<scheduler::JobWait> OverQuotaWaits(
    TenantLimitsCache& limits, const std::map<std::string, TenantHeld>& held,
    const std::vector<JobRecord>& queued) {
  std::map<std::string, TenantHeld> counted = held;
  return HeldBackWaits(QuotaLimit(limits, counted), queued);
}

void ApplyTenantQuotas(TenantLimitsCache& limits,
                       std::map<std::string, TenantHeld> held,
                       const std::map<std::string, JobRecord>& queued,
                       scheduler::Plan& plan) {
  DropPlacementsPastLimit(QuotaLimit(limits, held), queued, plan);
}

}  // namespace trainyard::server
