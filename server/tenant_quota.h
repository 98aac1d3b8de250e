// Tenant quotas in the scheduling pass: a tenant's jobs may together hold
// at most its max_gpus GPUs and max_cpu_slots CPU slots (admin.proto
// Tenant; 0 = unlimited). Applied in the two steps of a start limit
// (server/start_limits.h): queued jobs of a tenant already at its quota
// are held back before the policy runs, and placements that would take a
// tenant past it within the pass are dropped after.
#ifndef TRAINYARD_SERVER_TENANT_QUOTA_H_
#define TRAINYARD_SERVER_TENANT_QUOTA_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "scheduler/placement_policy.h"
#include "server/job_store.h"
#include "server/start_limits.h"
#include "trainyard/v1/admin.pb.h"

namespace trainyard::server {

using TenantLimits = std::function<v1::Tenant(const std::string& tenant)>;

// Looks each tenant up once per pass (a pass sees many jobs per tenant).
class TenantLimitsCache {
 public:
  explicit TenantLimitsCache(const TenantLimits& limits) : limits_(limits) {}
  const v1::Tenant& Of(const std::string& tenant);

 private:
  const TenantLimits& limits_;
  std::map<std::string, v1::Tenant> cache_;
};

struct TenantHeld {
  int64_t gpus = 0;
  int64_t cpu_slots = 0;
};

// What each tenant's active (SCHEDULED, RUNNING, PREEMPTING) jobs hold.
std::map<std::string, TenantHeld> HeldByTenant(
    const std::vector<JobRecord>& active);

// Why a job of `spec` can never run within its tenant's quota (it asks for
// more GPUs or CPU slots than the tenant may hold at once), or "". A submit
// is refused with it; a job queued before the quota was lowered shows it.
std::string NeverFitsQuota(const v1::Tenant& limits, const v1::JobSpec& spec);

// Why `job` must wait for its tenant's quota, or "" when it may run now.
std::string QuotaWaitReason(const v1::Tenant& limits, const TenantHeld& held,
                            const v1::JobSpec& spec);

// The waits (kRetryLater, with the reason) of the jobs of `queued` that
// must wait for their tenant's quota; the pass leaves them out.
std::vector<scheduler::JobWait> OverQuotaWaits(
    TenantLimitsCache& limits, const std::map<std::string, TenantHeld>& held,
    const std::vector<JobRecord>& queued);

// Drops the placements of `plan` that would take a tenant past its quota,
// counting from `held`, and the preemptions made for them; adds a wait for
// each dropped job. `queued` holds every placed job.
void ApplyTenantQuotas(TenantLimitsCache& limits,
                       std::map<std::string, TenantHeld> held,
                       const std::map<std::string, JobRecord>& queued,
                       scheduler::Plan& plan);

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_TENANT_QUOTA_H_
