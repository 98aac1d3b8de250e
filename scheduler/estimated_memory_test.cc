// Jobs whose GPU memory is the engine's estimate, through every policy: each
// GPU decides whether it gives a share or is taken whole.
#include <algorithm>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/fgd_policy.h"
#include "scheduler/placement_policy.h"
#include "scheduler/scheduler_test_util.h"

namespace trainyard::scheduler {
namespace {

using ::testing::HasSubstr;
using namespace ::trainyard::scheduler::testing;  // NOLINT

PendingJob Estimated(std::string id, int64_t order, int32_t gpus,
                     int64_t memory, int32_t share = 0) {
  PendingJob j = Share(std::move(id), order, gpus, 500);
  j.gpu_memory_estimated = true;
  j.gpu_memory_bytes = memory;
  j.gpu_compute_milli = share;
  return j;
}

Plan PlaceWith(const std::string& policy, const ClusterSnapshot& s) {
  Plan plan = (*MakePlacementPolicy(policy))->Place(s);
  EXPECT_TRUE(CheckPlan(s, plan).ok()) << policy << ": " << CheckPlan(s, plan);
  return plan;
}

std::vector<int32_t> GpusOf(const Plan& plan, const std::string& job) {
  for (const Placement& p : plan.placements) {
    if (p.job_id == job) return p.gpu_indices;
  }
  return {};
}

TEST(EstimatedMemoryTest, SmallJobsShareOneLargeGpuWhenPacking) {
  // Three 20 GiB jobs: 300 milli each on an 80 GiB GPU, so best-fit puts
  // all three on GPU 0 and GPU 1 stays idle for a larger job.
  ClusterSnapshot s = MakeSnapshot(
      {Node("w", {1000, 1000}, 80)},
      {Estimated("a", 1, 1, 20 * kGiB), Estimated("b", 2, 1, 20 * kGiB),
       Estimated("c", 3, 1, 20 * kGiB)});
  Plan plan = PlaceWith("best-fit", s);
  ASSERT_EQ(plan.placements.size(), 3u);
  for (const char* job : {"a", "b", "c"}) {
    EXPECT_EQ(GpusOf(plan, job), std::vector<int32_t>{0}) << job;
  }
  // FGD shares too, but keeps the third off GPU 0: it would leave 100
  // milli there that no job of the queue (300 each) could use.
  plan = PlaceWith("fgd", s);
  ASSERT_EQ(plan.placements.size(), 3u);
  EXPECT_EQ(GpusOf(plan, "a"), std::vector<int32_t>{0});
  EXPECT_EQ(GpusOf(plan, "b"), std::vector<int32_t>{0});
  EXPECT_EQ(GpusOf(plan, "c"), std::vector<int32_t>{1});
}

TEST(EstimatedMemoryTest, ExclusiveFirstFitGivesEachJobAWholeGpu) {
  ClusterSnapshot s = MakeSnapshot(
      {Node("w", {1000, 1000}, 80)},
      {Estimated("a", 1, 1, 20 * kGiB), Estimated("b", 2, 1, 20 * kGiB),
       Estimated("c", 3, 1, 20 * kGiB)});
  Plan plan = PlaceWith("first-fit", s);
  ASSERT_EQ(plan.placements.size(), 2u);
  EXPECT_TRUE(plan.placements[0].exclusive);
  ASSERT_EQ(plan.waits.size(), 1u);
  EXPECT_THAT(plan.waits[0].reason, HasSubstr("1 whole GPU with 20 GiB"));
}

TEST(EstimatedMemoryTest, OverHalfTheGpuTakesItWholeEvenIfComputeFits) {
  ClusterSnapshot s = MakeSnapshot({Node("w", {1000, 1000}, 80)},
                                   {Estimated("big", 1, 1, 41 * kGiB, 100),
                                    Estimated("small", 2, 1, 10 * kGiB, 100)});
  for (const std::string& policy : PlacementPolicyNames()) {
    Plan plan = PlaceWith(policy, s);
    ASSERT_EQ(plan.placements.size(), 2u) << policy;
    EXPECT_NE(GpusOf(plan, "big"), GpusOf(plan, "small")) << policy;
  }
}

TEST(EstimatedMemoryTest, UnknownGpuMemoryMeansWholeGpusAsBefore) {
  // A worker that reports GPU indices only (as the server's workers do
  // today): estimated jobs take whole GPUs, CPU jobs take CPU slots.
  WorkerCapacity w{"w", 2, 2, {0, 1}, {0, 1}};
  std::vector<PendingJob> jobs = {
      Estimated("a", 1, 1, kGiB), Estimated("b", 2, 1, kGiB),
      Estimated("c", 3, 1, kGiB), PendingJob{"cpu", 0, 4, 0, 1}};
  for (PendingJob& j : jobs) j.cpu_milli = j.memory_bytes = 0;
  ClusterSnapshot s = MakeSnapshot({w}, jobs);
  for (const std::string& policy : PlacementPolicyNames()) {
    Plan plan = PlaceWith(policy, s);
    ASSERT_EQ(plan.placements.size(), 3u) << policy;
    EXPECT_EQ(GpusOf(plan, "a"), std::vector<int32_t>{0}) << policy;
    EXPECT_EQ(GpusOf(plan, "b"), std::vector<int32_t>{1}) << policy;
    ASSERT_EQ(plan.waits.size(), 1u) << policy;
    EXPECT_EQ(plan.waits[0].job_id, "c");
    EXPECT_EQ(plan.waits[0].kind, WaitKind::kRetryLater);
  }
}

TEST(EstimatedMemoryTest, EstimateLargerThanEveryGpuIsInfeasibleAtOnce) {
  ClusterSnapshot s =
      MakeSnapshot({Node("w", {1000, 1000}, 80), Node("v", {1000}, 40)},
                   {Estimated("huge", 1, 1, 100 * kGiB)});
  for (const std::string& policy : PlacementPolicyNames()) {
    Plan plan = PlaceWith(policy, s);
    ASSERT_EQ(plan.waits.size(), 1u) << policy;
    EXPECT_EQ(plan.waits[0].kind, WaitKind::kInfeasible) << policy;
    EXPECT_THAT(plan.waits[0].reason, HasSubstr("100 GiB")) << policy;
  }
}

TEST(EstimatedMemoryTest, EachGpuOfAMixedNodeDecides) {
  // GPU 0 has 80 GiB (a share), GPU 1 has 24 GiB (16 GiB is over half).
  WorkerCapacity w = Node("w", {1000, 1000}, 80);
  w.devices[1].memory_bytes = w.devices[1].free_memory_bytes = 24 * kGiB;
  ClusterSnapshot s = MakeSnapshot({w}, {Estimated("gang", 1, 2, 16 * kGiB),
                                         Estimated("next", 2, 1, 16 * kGiB)});
  Plan plan = PlaceWith("best-fit", s);
  EXPECT_EQ(GpusOf(plan, "gang"), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(GpusOf(plan, "next"), std::vector<int32_t>{0})
      << "GPU 0 still has room; GPU 1 was taken whole";
}

TEST(EstimatedMemoryTest, FairShareCountsTheShareTheGpuGave) {
  // Tenant a's job gets 300 milli of an 80 GiB GPU; b's whole-GPU job then
  // leaves b ahead, so a's second job goes before b's second one.
  PendingJob a1 = Estimated("a1", 1, 1, 20 * kGiB);
  PendingJob a2 = Estimated("a2", 3, 1, 20 * kGiB);
  PendingJob b1 = Share("b1", 2, 1, 1000);
  PendingJob b2 = Share("b2", 4, 1, 1000);
  a1.tenant = a2.tenant = "a";
  b1.tenant = b2.tenant = "b";
  ClusterSnapshot s = MakeSnapshot(
      {Node("w", {1000, 1000, 1000, 1000}, 80, 64, 256)}, {a1, a2, b1, b2});
  Plan plan = PlaceWith("best-fit+drf", s);
  ASSERT_EQ(plan.placements.size(), 4u);
  std::vector<std::string> order;
  for (const Placement& p : plan.placements) order.push_back(p.job_id);
  EXPECT_EQ(order, (std::vector<std::string>{"a1", "b1", "a2", "b2"}));
}

TEST(EstimatedMemoryTest, FairShareCountsAWholeGpuUnderAnExclusivePolicy) {
  // First-fit gives a1 a whole GPU (1000 milli: a's share is 1/4); b1
  // declares 500 milli (1/8), so b goes again before a.
  PendingJob a1 = Estimated("a1", 1, 1, 20 * kGiB);
  PendingJob a2 = Estimated("a2", 3, 1, 20 * kGiB);
  PendingJob b1 = Share("b1", 2, 1, 500);
  PendingJob b2 = Share("b2", 4, 1, 500);
  a1.tenant = a2.tenant = "a";
  b1.tenant = b2.tenant = "b";
  ClusterSnapshot s = MakeSnapshot(
      {Node("w", {1000, 1000, 1000, 1000}, 80, 64, 256)}, {a1, a2, b1, b2});
  Plan plan = PlaceWith("first-fit+drf", s);
  std::vector<std::string> order;
  for (const Placement& p : plan.placements) order.push_back(p.job_id);
  EXPECT_EQ(order, (std::vector<std::string>{"a1", "b1", "b2", "a2"}));
}

TEST(EstimatedMemoryTest, RandomQueuesWithEstimatesKeepEveryProperty) {
  int shared = 0;
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    ClusterSnapshot s = RandomSnapshot(seed);
    for (const std::string& policy : PlacementPolicyNames()) {
      Plan plan = (*MakePlacementPolicy(policy))->Place(s);
      ASSERT_TRUE(CheckPlan(s, plan).ok()) << "seed " << seed << " " << policy;
      if (policy == "first-fit") continue;
      for (const Placement& p : plan.placements) {
        const PendingJob* job = s.FindJob(p.job_id);
        const WorkerCapacity* w = s.FindWorker(p.worker_id);
        if (!job->gpu_memory_estimated) continue;
        for (int32_t g : p.gpu_indices) {
          auto d =
              std::find_if(w->devices.begin(), w->devices.end(),
                           [&](const GpuCapacity& c) { return c.index == g; });
          shared += !OnGpu(*d, DemandOf(*job, false)).whole;
        }
      }
    }
  }
  EXPECT_GT(shared, 50) << "the random queues exercise shared placements";
}

}  // namespace
}  // namespace trainyard::scheduler
