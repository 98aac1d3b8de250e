#include "scheduler/best_fit_policy.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler_test_util.h"

namespace trainyard::scheduler {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace ::trainyard::scheduler::testing;  // NOLINT

TEST(BestFitPolicyTest, FillsThePartlyUsedGpuFirst) {
  ClusterSnapshot s = MakeSnapshot({Node("idle", {1000}), Node("half", {500})},
                                   {Share("a", 1, 1, 300)});
  Plan plan = BestFitPolicy().Place(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].worker_id, "half");
  EXPECT_FALSE(plan.placements[0].exclusive);
  EXPECT_TRUE(CheckPlan(s, plan).ok()) << CheckPlan(s, plan);
}

TEST(BestFitPolicyTest, SharesOneGpuBetweenSmallJobs) {
  ClusterSnapshot s = MakeSnapshot(
      {Node("n", {1000, 1000})},
      {Share("a", 1, 1, 400), Share("b", 2, 1, 400), Share("c", 3, 1, 400)});
  Plan plan = BestFitPolicy().Place(s);
  ASSERT_EQ(plan.placements.size(), 3u);
  EXPECT_THAT(plan.placements[0].gpu_indices, ElementsAre(0));
  EXPECT_THAT(plan.placements[1].gpu_indices, ElementsAre(0));
  EXPECT_THAT(plan.placements[2].gpu_indices, ElementsAre(1));
  EXPECT_TRUE(CheckPlan(s, plan).ok());
}

TEST(BestFitPolicyTest, AGpuThatIsNotShareableGoesWholeToOneJob) {
  WorkerCapacity n = Node("n", {1000, 1000});
  n.devices[0].shareable = false;  // e.g. no MPS: its jobs would time-slice
  ClusterSnapshot s =
      MakeSnapshot({n}, {Share("a", 1, 1, 400), Share("b", 2, 1, 400),
                         Share("c", 3, 1, 400), Share("d", 4, 1, 400)});
  Plan plan = BestFitPolicy().Place(s);
  ASSERT_EQ(plan.placements.size(), 3u);
  // The two shares fill GPU 1 first (the tighter), then one job takes 0.
  EXPECT_THAT(plan.placements[0].gpu_indices, ElementsAre(1));
  EXPECT_THAT(plan.placements[1].gpu_indices, ElementsAre(1));
  EXPECT_THAT(plan.placements[2].gpu_indices, ElementsAre(0));
  EXPECT_TRUE(plan.placements[2].shares.empty()) << "held whole";
  EXPECT_FALSE(plan.placements[0].shares.empty());
  EXPECT_TRUE(CheckPlan(s, plan).ok()) << CheckPlan(s, plan);
}

TEST(BestFitPolicyTest, WholeGpuJobSkipsPartlyUsedGpus) {
  ClusterSnapshot s =
      MakeSnapshot({Node("n", {900, 1000})}, {Share("whole", 1, 1, 1000)});
  Plan plan = BestFitPolicy().Place(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_THAT(plan.placements[0].gpu_indices, ElementsAre(1));
}

TEST(BestFitPolicyTest, GpuMemoryBindsEvenWithComputeFree) {
  WorkerCapacity n = Node("n", {1000});
  n.devices[0].free_memory_bytes = 2 * kGiB;  // someone holds 14 GiB
  n.devices[0].free_compute_milli = 900;
  PendingJob j = Share("j", 1, 1, 300);
  j.gpu_memory_bytes = 4 * kGiB;
  ClusterSnapshot s = MakeSnapshot({n}, {j});
  Plan plan = BestFitPolicy().Place(s);
  EXPECT_TRUE(plan.placements.empty());
  ASSERT_EQ(plan.waits.size(), 1u);
  EXPECT_EQ(plan.waits[0].kind, WaitKind::kRetryLater);
  EXPECT_THAT(plan.waits[0].reason, HasSubstr("4 GiB"));
}

TEST(BestFitPolicyTest, CpuAndHostMemoryBind) {
  ClusterSnapshot s = MakeSnapshot(
      {Node("small", {1000}, 16, 4, 8), Node("big", {1000}, 16, 64, 256)},
      {Share("j", 1, 1, 500, /*cpus=*/8)});
  Plan plan = BestFitPolicy().Place(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].worker_id, "big");
}

TEST(BestFitPolicyTest, GangNeedsAllGpusOnOneNode) {
  ClusterSnapshot s =
      MakeSnapshot({Node("a", {1000, 1000}), Node("b", {1000, 1000})},
                   {Share("gang", 1, 4, 1000), Share("pair", 2, 2, 1000)});
  Plan plan = BestFitPolicy().Place(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].job_id, "pair");
  ASSERT_EQ(plan.waits.size(), 1u);
  EXPECT_EQ(plan.waits[0].kind, WaitKind::kInfeasible);
  EXPECT_THAT(plan.waits[0].reason, HasSubstr("largest worker has 2 GPUs"));
}

TEST(BestFitPolicyTest, TooMuchGpuMemoryIsInfeasibleAtOnce) {
  PendingJob j = Share("huge", 1, 1, 500);
  j.gpu_memory_bytes = 40 * kGiB;
  ClusterSnapshot s = MakeSnapshot({Node("n", {1000}, 16)}, {j});
  Plan plan = BestFitPolicy().Place(s);
  ASSERT_EQ(plan.waits.size(), 1u);
  EXPECT_EQ(plan.waits[0].kind, WaitKind::kInfeasible);
  EXPECT_THAT(plan.waits[0].reason, HasSubstr("40 GiB"));
}

}  // namespace
}  // namespace trainyard::scheduler
