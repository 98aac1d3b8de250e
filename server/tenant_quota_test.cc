#include "server/tenant_quota.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::server {
namespace {

using ::testing::HasSubstr;

JobRecord Job(const std::string& id, const std::string& tenant, int gpus) {
  JobRecord r;
  r.job.set_id(id);
  r.job.set_tenant(tenant);
  r.job.mutable_spec()->mutable_resources()->set_gpus(gpus);
  return r;
}

TenantLimits Limits(int max_gpus, int max_cpu_slots) {
  return [=](const std::string& name) {
    v1::Tenant t;
    t.set_name(name);
    t.set_weight(1);
    if (name == "a") {
      t.set_max_gpus(max_gpus);
      t.set_max_cpu_slots(max_cpu_slots);
    }
    return t;
  };
}

TEST(TenantQuotaTest, HeldCountsGpusAndCpuSlotsPerTenant) {
  auto held = HeldByTenant({Job("1", "a", 2), Job("2", "a", 0),
                            Job("3", "b", 1)});
  EXPECT_EQ(held["a"].gpus, 2);
  EXPECT_EQ(held["a"].cpu_slots, 1);
  EXPECT_EQ(held["b"].gpus, 1);
}

TEST(TenantQuotaTest, JobsOfATenantAtItsQuotaWait) {
  std::map<std::string, TenantHeld> held = {{"a", {3, 1}}};
  const TenantLimits limits = Limits(4, 1);
  TenantLimitsCache cache(limits);
  auto waits = OverQuotaWaits(
      cache, held,
      {Job("j1", "a", 1), Job("j2", "a", 2), Job("j3", "a", 0),
       Job("j4", "b", 8)});
  ASSERT_EQ(waits.size(), 2u);
  EXPECT_EQ(waits[0].job_id, "j2");
  EXPECT_THAT(waits[0].reason, HasSubstr("3 of 4 GPUs in use"));
  EXPECT_EQ(waits[1].job_id, "j3");
  EXPECT_THAT(waits[1].reason, HasSubstr("CPU slot quota"));
  // 0 means unlimited.
  const TenantLimits unlimited = Limits(0, 0);
  TenantLimitsCache none(unlimited);
  EXPECT_TRUE(OverQuotaWaits(none, held, {Job("j", "a", 64)}).empty());
}

// A job asking for more than the tenant may ever hold: refused at submit
// (NeverFitsQuota), and one queued before the quota came down says it
// cannot start rather than waiting for room.
TEST(TenantQuotaTest, AJobLargerThanTheQuotaNeverFits) {
  const TenantLimits limits = Limits(2, 1);
  JobRecord cpu = Job("c", "a", 0);
  cpu.job.mutable_spec()->mutable_resources()->set_cpu_ranks(2);
  EXPECT_EQ(NeverFitsQuota(limits("a"), cpu.job.spec()),
            "tenant a may hold at most 1 CPU slots at once; the job asks for "
            "2");
  EXPECT_EQ(NeverFitsQuota(limits("a"), Job("g", "a", 3).job.spec()),
            "tenant a may hold at most 2 GPUs at once; the job asks for 3");
  EXPECT_EQ(NeverFitsQuota(limits("a"), Job("ok", "a", 2).job.spec()), "");
  EXPECT_EQ(NeverFitsQuota(limits("b"), cpu.job.spec()), "");
  TenantLimitsCache cache(limits);
  auto waits = OverQuotaWaits(cache, {}, {cpu});
  ASSERT_EQ(waits.size(), 1u);
  EXPECT_EQ(waits[0].reason,
            "cannot start: tenant a may hold at most 1 CPU slots at once; the "
            "job asks for 2 (raise the quota or cancel the job)");
}

TEST(TenantQuotaTest, APassNeverTakesATenantPastItsQuota) {
  std::map<std::string, JobRecord> queued;
  for (auto r : {Job("j1", "a", 1), Job("j2", "a", 1), Job("j3", "b", 1),
                 Job("j4", "a", 1)}) {
    queued[r.job.id()] = r;
  }
  scheduler::Plan plan;
  for (const char* id : {"j1", "j2", "j3", "j4"}) {
    plan.placements.push_back({id, "w1", {0}, false});
  }
  plan.preemptions.push_back({"old", "w1", "j4"});
  plan.preemptions.push_back({"older", "w1", "j3"});
  const TenantLimits limits = Limits(2, 0);
  TenantLimitsCache cache(limits);
  ApplyTenantQuotas(cache, {{"a", {1, 0}}}, queued, plan);
  ASSERT_EQ(plan.placements.size(), 2u);
  EXPECT_EQ(plan.placements[0].job_id, "j1");
  EXPECT_EQ(plan.placements[1].job_id, "j3");
  ASSERT_EQ(plan.waits.size(), 2u);
  EXPECT_EQ(plan.waits[0].job_id, "j2");
  EXPECT_EQ(plan.waits[1].job_id, "j4");
  ASSERT_EQ(plan.preemptions.size(), 1u) << "no room made for dropped jobs";
  EXPECT_EQ(plan.preemptions[0].for_job_id, "j3");
}

}  // namespace
}  // namespace trainyard::server
