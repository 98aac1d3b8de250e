// Jobs whose ranks may spread over several nodes (PendingJob::max_nodes):
// one node is preferred, then the fewest nodes; the plan covers every rank
// once or places nothing; a job that no max_nodes nodes could ever hold is
// infeasible at once.
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/node_fit.h"
#include "scheduler/placement_policy.h"
#include "scheduler/scheduler_test_util.h"

namespace trainyard::scheduler {
namespace {

using ::testing::HasSubstr;
using testing::MakeSnapshot;
using testing::Node;
using testing::Share;

PendingJob Gang(std::string id, int32_t gpus, int32_t max_nodes) {
  PendingJob j = Share(std::move(id), 1, gpus, kWholeGpuMilli, /*cpus=*/4);
  j.max_nodes = max_nodes;
  return j;
}

PendingJob CpuRanks(std::string id, int32_t ranks, int32_t max_nodes) {
  PendingJob j;
  j.id = std::move(id);
  j.cpu_slots = ranks;
  j.max_nodes = max_nodes;
  return j;
}

WorkerCapacity Slots(std::string id, int32_t slots) {
  WorkerCapacity w;
  w.id = std::move(id);
  w.cpu_slots = w.free_cpu_slots = slots;
  return w;
}

class SpreadPlacementTest : public ::testing::TestWithParam<std::string> {
 protected:
  Plan Place(const ClusterSnapshot& s) {
    Plan plan = (*MakePlacementPolicy(GetParam()))->Place(s);
    EXPECT_TRUE(CheckPlan(s, plan).ok()) << CheckPlan(s, plan);
    return plan;
  }
};

TEST_P(SpreadPlacementTest, SpreadsRanksInOrderWhenNoNodeHoldsThemAll) {
  ClusterSnapshot s = MakeSnapshot(
      {Node("a", {1000, 1000}), Node("b", {1000, 1000})}, {Gang("j", 4, 0)});
  Plan plan = Place(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  const Placement& p = plan.placements[0];
  EXPECT_EQ(p.worker_id, "a");
  EXPECT_EQ(p.gpu_indices, (std::vector<int32_t>{0, 1}));
  ASSERT_EQ(p.more_nodes.size(), 1u);
  EXPECT_EQ(p.more_nodes[0].worker_id, "b");
  EXPECT_EQ(p.more_nodes[0].first_rank, 2);
  EXPECT_EQ(p.more_nodes[0].ranks, 2);
  EXPECT_EQ(p.more_nodes[0].gpu_indices, (std::vector<int32_t>{0, 1}));
}

TEST_P(SpreadPlacementTest, PrefersOneNodeThatHoldsThemAll) {
  ClusterSnapshot s = MakeSnapshot(
      {Node("a", {1000, 1000}), Node("b", {1000, 1000, 1000, 1000})},
      {Gang("j", 4, 0)});
  Plan plan = Place(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].worker_id, "b");
  EXPECT_TRUE(plan.placements[0].more_nodes.empty());
}

TEST_P(SpreadPlacementTest, TakesTheFewestNodesWithinItsLimit) {
  // Free GPUs: a 1, b 3, c 2. Four ranks: b (3) then c (1).
  ClusterSnapshot s =
      MakeSnapshot({Node("a", {1000, 0, 0}), Node("b", {1000, 1000, 1000}),
                    Node("c", {1000, 1000, 0})},
                   {Gang("j", 4, 2)});
  Plan plan = Place(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].worker_id, "b");
  ASSERT_EQ(plan.placements[0].more_nodes.size(), 1u);
  EXPECT_EQ(plan.placements[0].more_nodes[0].worker_id, "c");
  EXPECT_EQ(plan.placements[0].more_nodes[0].ranks, 1);
}

TEST_P(SpreadPlacementTest, WaitsWhenItsRanksNeedMoreNodesThanAllowedNow) {
  // Room for one rank on each of four nodes; at most two nodes: the idle
  // cluster could hold it (two GPUs a node), so it waits instead of being
  // infeasible.
  ClusterSnapshot s = MakeSnapshot({Node("a", {1000, 0}), Node("b", {1000, 0}),
                                    Node("c", {1000, 0}), Node("d", {1000, 0})},
                                   {Gang("j", 4, 2)});
  Plan plan = Place(s);
  EXPECT_TRUE(plan.placements.empty());
  ASSERT_EQ(plan.waits.size(), 1u);
  EXPECT_EQ(plan.waits[0].kind, WaitKind::kRetryLater);
  EXPECT_THAT(plan.waits[0].reason, HasSubstr("on at most 2 nodes"));
}

TEST_P(SpreadPlacementTest, IsInfeasibleWhenNoAllowedNodesCouldEverHoldIt) {
  ClusterSnapshot s = MakeSnapshot(
      {Node("a", {1000, 1000}), Node("b", {1000, 1000})},
      {Gang("one-node", 4, 1), Gang("two", 5, 2), Gang("any", 5, 0)});
  Plan plan = Place(s);
  EXPECT_TRUE(plan.placements.empty());
  ASSERT_EQ(plan.waits.size(), 3u);
  for (const JobWait& w : plan.waits) {
    EXPECT_EQ(w.kind, WaitKind::kInfeasible) << w.job_id;
  }
  std::map<std::string, std::string> reason;
  for (const JobWait& w : plan.waits) reason[w.job_id] = w.reason;
  EXPECT_THAT(reason["one-node"],
              HasSubstr("on one node; the largest worker has 2 GPUs"));
  EXPECT_THAT(reason["two"],
              HasSubstr("on at most 2 nodes; the idle cluster holds only 4 of "
                        "its 5 ranks on 2 nodes"));
  EXPECT_THAT(reason["any"],
              HasSubstr("on any number of nodes; the idle cluster holds only "
                        "4 of its 5 ranks"));
}

TEST_P(SpreadPlacementTest, SplitsCpuRanksAndTheirHostNeeds) {
  PendingJob job = CpuRanks("j", 3, 0);
  job.cpu_milli = 3000;
  job.memory_bytes = 3 * testing::kGiB;
  WorkerCapacity a = Slots("a", 2);
  a.cpu_milli = a.free_cpu_milli = 2000;
  a.memory_bytes = a.free_memory_bytes = 2 * testing::kGiB;
  WorkerCapacity b = Slots("b", 2);
  b.cpu_milli = b.free_cpu_milli = 1000;
  b.memory_bytes = b.free_memory_bytes = 1 * testing::kGiB;
  Plan plan = Place(MakeSnapshot({a, b}, {job}));
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].worker_id, "a");
  ASSERT_EQ(plan.placements[0].more_nodes.size(), 1u);
  EXPECT_EQ(plan.placements[0].more_nodes[0].worker_id, "b");
  EXPECT_EQ(plan.placements[0].more_nodes[0].first_rank, 2);
  EXPECT_EQ(plan.placements[0].more_nodes[0].ranks, 1);
}

INSTANTIATE_TEST_SUITE_P(Policies, SpreadPlacementTest,
                         ::testing::Values("first-fit", "best-fit", "fgd",
                                           "fgd+drf+backfill+preempt"));

TEST(PartOfTest, SplitsHostNeedsRoundingUp) {
  PendingJob job = CpuRanks("j", 3, 0);
  job.cpu_milli = 1000;
  job.memory_bytes = 10;
  const PendingJob one = PartOf(job, 1);
  EXPECT_EQ(one.cpu_slots, 1);
  EXPECT_EQ(one.cpu_milli, 334);
  EXPECT_EQ(one.memory_bytes, 4);
  const PendingJob two = PartOf(job, 2);
  EXPECT_EQ(two.cpu_milli, 667);
  EXPECT_EQ(PartOf(job, 3).cpu_milli, 1000);
}

TEST(CheckPlanTest, RefusesSpreadPartsThatDoNotCoverTheRanksOnce) {
  ClusterSnapshot s = MakeSnapshot(
      {Node("a", {1000, 1000}), Node("b", {1000, 1000}), Node("c", {1000})},
      {Gang("j", 4, 0), Gang("k", 4, 2), Gang("single", 2, 1)});
  const auto plan_of = [](Placement p) {
    Plan plan;
    plan.placements.push_back(std::move(p));
    return plan;
  };
  Placement good{"j", "a", {0, 1}};
  good.more_nodes.push_back({"b", 2, 2, {0, 1}});
  EXPECT_TRUE(CheckPlan(s, plan_of(good)).ok()) << CheckPlan(s, plan_of(good));

  Placement gap = good;
  gap.more_nodes.push_back({"c", 5, 1, {0}});
  EXPECT_THAT(CheckPlan(s, plan_of(gap)).message(),
              HasSubstr("does not continue the ranks at 4"));
  Placement same_node = good;
  same_node.more_nodes[0].worker_id = "a";
  EXPECT_FALSE(CheckPlan(s, plan_of(same_node)).ok());
  Placement short_of_ranks{"j", "a", {0, 1}};
  short_of_ranks.more_nodes.push_back({"c", 2, 1, {0}});
  EXPECT_THAT(CheckPlan(s, plan_of(short_of_ranks)).message(),
              HasSubstr("cover 3 of 4 ranks"));
  Placement three_nodes{"k", "a", {0}};
  three_nodes.more_nodes.push_back({"b", 1, 2, {0, 1}});
  three_nodes.more_nodes.push_back({"c", 3, 1, {0}});
  EXPECT_THAT(CheckPlan(s, plan_of(three_nodes)).message(),
              HasSubstr("spread over 3 nodes, allowed 2"));
  Placement single{"single", "a", {0}};
  single.more_nodes.push_back({"c", 1, 1, {0}});
  EXPECT_THAT(CheckPlan(s, plan_of(single)).message(), HasSubstr("allowed 1"));
  Placement wrong_gpus = good;
  wrong_gpus.more_nodes[0].gpu_indices = {0};
  EXPECT_THAT(CheckPlan(s, plan_of(wrong_gpus)).message(),
              HasSubstr("needs 2 GPUs on worker b, got 1"));
}

}  // namespace
}  // namespace trainyard::scheduler
