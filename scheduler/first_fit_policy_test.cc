#include "scheduler/first_fit_policy.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::scheduler {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

WorkerCapacity CpuWorker(std::string id, int slots, int free) {
  return {std::move(id), slots, free, {}, {}};
}

WorkerCapacity GpuWorker(std::string id, std::vector<int32_t> gpus,
                         std::vector<int32_t> free) {
  return {std::move(id), 0, 0, std::move(gpus), std::move(free)};
}

PendingJob CpuJob(std::string id, int64_t order, int32_t priority = 0) {
  return {std::move(id), priority, order, 0, 1};
}

PendingJob GpuJob(std::string id, int64_t order, int32_t gpus,
                  int32_t priority = 0) {
  return {std::move(id), priority, order, gpus, 0};
}

ClusterSnapshot Snap(std::vector<WorkerCapacity> w, std::vector<PendingJob> j) {
  auto s = ClusterSnapshot::Create(std::move(w), std::move(j));
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

std::vector<std::string> PlacedJobs(const Plan& plan) {
  std::vector<std::string> ids;
  for (const Placement& p : plan.placements) ids.push_back(p.job_id);
  return ids;
}

TEST(FirstFitPolicyTest, PlacesOnFirstWorkerWithRoom) {
  ClusterSnapshot s = Snap({CpuWorker("w1", 1, 0), CpuWorker("w2", 2, 2)},
                           {CpuJob("a", 1), CpuJob("b", 2)});
  Plan plan = FirstFitPolicy().Place(s);
  ASSERT_EQ(plan.placements.size(), 2u);
  EXPECT_EQ(plan.placements[0].worker_id, "w2");
  EXPECT_EQ(plan.placements[1].worker_id, "w2");
  EXPECT_THAT(plan.waits, IsEmpty());
  EXPECT_TRUE(CheckPlan(s, plan).ok());
}

TEST(FirstFitPolicyTest, HigherPriorityFirstThenSubmitOrder) {
  ClusterSnapshot s = Snap({CpuWorker("w1", 2, 2)},
                           {CpuJob("old", 1), CpuJob("new-urgent", 3, 10),
                            CpuJob("mid", 2), CpuJob("urgent", 4, 10)});
  Plan plan = FirstFitPolicy().Place(s);
  EXPECT_THAT(PlacedJobs(plan), ElementsAre("new-urgent", "urgent"));
  ASSERT_EQ(plan.waits.size(), 2u);
  EXPECT_EQ(plan.waits[0].job_id, "old");
  EXPECT_EQ(plan.waits[0].kind, WaitKind::kRetryLater);
  EXPECT_EQ(plan.waits[1].job_id, "mid");
}

TEST(FirstFitPolicyTest, GivesLowestFreeGpusExclusively) {
  ClusterSnapshot s =
      Snap({GpuWorker("g", {0, 1, 2, 3}, {3, 1, 2})},
           {GpuJob("a", 1, 2), GpuJob("b", 2, 1), GpuJob("c", 3, 1)});
  Plan plan = FirstFitPolicy().Place(s);
  ASSERT_EQ(plan.placements.size(), 2u);
  EXPECT_THAT(plan.placements[0].gpu_indices, ElementsAre(1, 2));
  EXPECT_THAT(plan.placements[1].gpu_indices, ElementsAre(3));
  ASSERT_EQ(plan.waits.size(), 1u);
  EXPECT_EQ(plan.waits[0].job_id, "c");
  EXPECT_EQ(plan.waits[0].kind, WaitKind::kRetryLater);
  EXPECT_TRUE(CheckPlan(s, plan).ok());
}

TEST(FirstFitPolicyTest, SeparatesInfeasibleFromRetryLater) {
  ClusterSnapshot s = Snap(
      {GpuWorker("g", {0, 1}, {}), CpuWorker("c", 1, 0)},
      {GpuJob("too-big", 1, 4), GpuJob("busy", 2, 2), CpuJob("cpu-busy", 3)});
  Plan plan = FirstFitPolicy().Place(s);
  EXPECT_THAT(plan.placements, IsEmpty());
  ASSERT_EQ(plan.waits.size(), 3u);
  EXPECT_EQ(plan.waits[0].kind, WaitKind::kInfeasible);
  EXPECT_THAT(plan.waits[0].reason, HasSubstr("needs 4 whole GPUs"));
  EXPECT_THAT(plan.waits[0].reason, HasSubstr("largest worker has 2 GPUs"));
  EXPECT_EQ(plan.waits[1].kind, WaitKind::kRetryLater);
  EXPECT_EQ(plan.waits[2].kind, WaitKind::kRetryLater);
  EXPECT_THAT(plan.waits[2].reason, HasSubstr("a CPU slot"));
}

TEST(FirstFitPolicyTest, GpuJobOnCpuOnlyClusterIsInfeasible) {
  ClusterSnapshot s = Snap({CpuWorker("c", 4, 4)}, {GpuJob("g", 1, 1)});
  Plan plan = FirstFitPolicy().Place(s);
  ASSERT_EQ(plan.waits.size(), 1u);
  EXPECT_EQ(plan.waits[0].kind, WaitKind::kInfeasible);
}

TEST(FirstFitPolicyTest, EmptyClusterIsInfeasibleWithClearReason) {
  ClusterSnapshot s = Snap({}, {CpuJob("a", 1)});
  Plan plan = FirstFitPolicy().Place(s);
  ASSERT_EQ(plan.waits.size(), 1u);
  EXPECT_EQ(plan.waits[0].kind, WaitKind::kInfeasible);
  EXPECT_THAT(plan.waits[0].reason, HasSubstr("no worker is connected"));
}

TEST(FirstFitPolicyTest, BlockedBigJobDoesNotBlockSmallerOnes) {
  ClusterSnapshot s = Snap({GpuWorker("g", {0, 1}, {0})},
                           {GpuJob("big", 1, 2, 5), GpuJob("small", 2, 1)});
  Plan plan = FirstFitPolicy().Place(s);
  EXPECT_THAT(PlacedJobs(plan), ElementsAre("small"));
  ASSERT_EQ(plan.waits.size(), 1u);
  EXPECT_EQ(plan.waits[0].job_id, "big");
}

// Random clusters and queues: whatever the input, the plan never gives a
// worker more than it has free, and the same snapshot gives the same plan.
TEST(FirstFitPolicyTest, NeverOverCommitsAndIsDeterministic) {
  std::mt19937 rng(1234);
  FirstFitPolicy policy;
  for (int round = 0; round < 200; ++round) {
    std::vector<WorkerCapacity> workers;
    int nw = rng() % 5;
    for (int i = 0; i < nw; ++i) {
      WorkerCapacity w{
          absl::StrCat("w", i), static_cast<int32_t>(rng() % 4), 0, {}, {}};
      w.free_cpu_slots = w.cpu_slots == 0 ? 0 : rng() % (w.cpu_slots + 1);
      int ng = rng() % 5;
      for (int g = 0; g < ng; ++g) {
        w.gpus.push_back(g);
        if (rng() % 3 != 0) w.free_gpus.push_back(g);
      }
      workers.push_back(w);
    }
    std::vector<PendingJob> jobs;
    int nj = rng() % 12;
    for (int i = 0; i < nj; ++i) {
      jobs.push_back({absl::StrCat("j", i), static_cast<int32_t>(rng() % 3) - 1,
                      static_cast<int64_t>(rng() % 100),
                      static_cast<int32_t>(rng() % 4) - 1 < 0
                          ? 0
                          : static_cast<int32_t>(rng() % 4),
                      1 + static_cast<int32_t>(rng() % 2)});
    }
    ClusterSnapshot s = Snap(workers, jobs);
    Plan a = policy.Place(s);
    ASSERT_TRUE(CheckPlan(s, a).ok()) << CheckPlan(s, a);
    EXPECT_EQ(a.placements.size() + a.waits.size(), jobs.size());
    Plan b = policy.Place(s);
    ASSERT_EQ(a.placements.size(), b.placements.size());
    for (size_t i = 0; i < a.placements.size(); ++i) {
      EXPECT_EQ(a.placements[i].job_id, b.placements[i].job_id);
      EXPECT_EQ(a.placements[i].worker_id, b.placements[i].worker_id);
      EXPECT_EQ(a.placements[i].gpu_indices, b.placements[i].gpu_indices);
    }
  }
}

}  // namespace
}  // namespace trainyard::scheduler
