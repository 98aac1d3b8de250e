// Preemption and fair share with jobs spread over several nodes: a waiting
// job that may spread stops victims on several nodes when no single node
// can be freed for it; a running spread job frees, and counts for its
// tenant, every part it holds.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/placement_policy.h"
#include "scheduler/preemption.h"
#include "scheduler/scheduler_test_util.h"

namespace trainyard::scheduler {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::UnorderedElementsAre;
using namespace ::trainyard::scheduler::testing;  // NOLINT

constexpr int32_t kUrgent = 5;

PendingJob Gang(std::string id, int32_t gpus, int32_t max_nodes,
                int32_t priority = kUrgent) {
  PendingJob j = Share(std::move(id), 1, gpus, kWholeGpuMilli, 1, priority);
  j.max_nodes = max_nodes;
  return j;
}

// A low-priority job of `gpus` whole GPUs running on `w`.
void Low(WorkerCapacity& w, std::string id, int32_t gpus, double work,
         std::vector<RunningJob>& running) {
  ASSERT_TRUE(StartRunning(w, Share(std::move(id), 0, gpus, kWholeGpuMilli),
                           work, running));
}

std::vector<std::string> Stopped(const Plan& plan) {
  std::vector<std::string> ids;
  for (const Preemption& p : plan.preemptions) ids.push_back(p.job_id);
  return ids;
}

class SpreadPreemptionTest : public ::testing::TestWithParam<std::string> {
 protected:
  Plan Place(const ClusterSnapshot& s) {
    Plan plan = (*MakePlacementPolicy(GetParam()))->Place(s);
    EXPECT_TRUE(CheckPlan(s, plan).ok()) << CheckPlan(s, plan);
    Plan again = (*MakePlacementPolicy(GetParam()))->Place(s);
    EXPECT_EQ(PlanString(plan), PlanString(again)) << "not deterministic";
    return plan;
  }
};

// Nodes of two GPUs, one free on each of a and b. c holds the cheapest
// victim, but stopping it frees only one GPU there (the other is held by a
// job that may not be preempted): stopped first, it is spared once a and b
// are freed, since the job may use only two nodes.
TEST_P(SpreadPreemptionTest, StopsVictimsOnTwoNodesWhenNeitherAloneSuffices) {
  WorkerCapacity a = Node("a", {1000, 1000}), b = Node("b", {1000, 1000}),
                 c = Node("c", {1000, 1000});
  std::vector<RunningJob> running;
  Low(a, "a-low", 1, 10, running);
  Low(b, "b-low", 1, 20, running);
  Low(c, "c-low", 1, 1, running);
  Low(c, "c-protected", 1, 0, running);
  running.back().preemptible = false;
  auto s =
      ClusterSnapshot::Create({a, b, c}, {Gang("gang", 4, 2)}, {}, running);
  ASSERT_TRUE(s.ok()) << s.status();
  Plan plan = Place(*s);
  EXPECT_TRUE(plan.placements.empty());
  EXPECT_THAT(Stopped(plan), UnorderedElementsAre("a-low", "b-low"));
  for (const Preemption& p : plan.preemptions) {
    EXPECT_EQ(p.for_job_id, "gang");
  }
  ASSERT_EQ(plan.waits.size(), 1u);
  EXPECT_THAT(plan.waits[0].reason,
              HasSubstr("2 lower-priority job(s) on workers a, b"));
}

// With any number of nodes, the two cheapest victims suffice (c: 2 GPUs, a:
// 2 after a-low stops): b-low, the costliest, is spared.
TEST_P(SpreadPreemptionTest, AnyNumberOfNodesTakesTheCheapestNeeded) {
  WorkerCapacity a = Node("a", {1000, 1000}), b = Node("b", {1000, 1000}),
                 c = Node("c", {1000, 1000});
  std::vector<RunningJob> running;
  Low(a, "a-low", 1, 10, running);
  Low(b, "b-low", 1, 20, running);
  Low(c, "c-low", 2, 1, running);
  auto s =
      ClusterSnapshot::Create({a, b, c}, {Gang("gang", 5, 0)}, {}, running);
  ASSERT_TRUE(s.ok()) << s.status();
  // Free: a 1, b 1. Stopping c-low (1) and a-low (10) frees 2 + 2: with
  // b's free one, five ranks on three nodes.
  EXPECT_THAT(Stopped(Place(*s)), UnorderedElementsAre("c-low", "a-low"));
}

TEST_P(SpreadPreemptionTest, DoesNotPreemptWhenItFitsWithout) {
  WorkerCapacity a = Node("a", {1000, 1000}), b = Node("b", {1000, 1000}),
                 c = Node("c", {1000, 1000});
  std::vector<RunningJob> running;
  Low(c, "c-low", 2, 1, running);
  auto s =
      ClusterSnapshot::Create({a, b, c}, {Gang("gang", 4, 2)}, {}, running);
  ASSERT_TRUE(s.ok()) << s.status();
  Plan plan = Place(*s);
  EXPECT_TRUE(plan.preemptions.empty());
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].more_nodes.size(), 1u);
}

// One node that can be freed for all its ranks is preferred to a spread,
// even when the spread would lose less work.
TEST_P(SpreadPreemptionTest, PrefersFreeingOneNode) {
  WorkerCapacity a = Node("a", {1000, 1000, 1000, 1000}),
                 b = Node("b", {1000, 1000});
  std::vector<RunningJob> running;
  Low(a, "a-low", 2, 50, running);
  Low(b, "b-low", 1, 1, running);
  auto s = ClusterSnapshot::Create({a, b}, {Gang("gang", 4, 0)}, {}, running);
  ASSERT_TRUE(s.ok()) << s.status();
  Plan plan = Place(*s);
  EXPECT_THAT(Stopped(plan), ElementsAre("a-low"));
  ASSERT_EQ(plan.waits.size(), 1u);
  EXPECT_THAT(plan.waits[0].reason, HasSubstr("on worker a to be"));
}

TEST_P(SpreadPreemptionTest, NeverPicksNonPreemptibleOrPeerJobs) {
  WorkerCapacity a = Node("a", {1000, 1000}), b = Node("b", {1000, 1000}),
                 c = Node("c", {1000, 1000});
  std::vector<RunningJob> running;
  Low(a, "a-low", 1, 10, running);
  Low(b, "protected", 1, 0, running);
  running.back().preemptible = false;
  ASSERT_TRUE(StartRunning(c, Share("peer", 0, 2, kWholeGpuMilli, 1, kUrgent),
                           0, running));
  auto s =
      ClusterSnapshot::Create({a, b, c}, {Gang("gang", 4, 0)}, {}, running);
  ASSERT_TRUE(s.ok()) << s.status();
  // Only a-low may stop: a 2 + b 1 is short of four ranks.
  Plan plan = Place(*s);
  EXPECT_TRUE(plan.preemptions.empty());
  ASSERT_EQ(plan.waits.size(), 1u);
  EXPECT_THAT(plan.waits[0].reason, Not(HasSubstr("preempted")));
}

// Four-GPU nodes, each with one free GPU, one low-priority job and two
// GPUs no victim frees: only a spread can be freed for four ranks.
TEST_P(SpreadPreemptionTest, AJobThatMayNotSpreadDoesNotStopJobsOnTwoNodes) {
  WorkerCapacity a = Node("a", {1000, 1000, 1000, 1000}),
                 b = Node("b", {1000, 1000, 1000, 1000});
  std::vector<RunningJob> running;
  for (WorkerCapacity* w : {&a, &b}) {
    Low(*w, w->id + "-low", 1, 10, running);
    Low(*w, w->id + "-protected", 2, 0, running);
    running.back().preemptible = false;
  }
  auto s = ClusterSnapshot::Create({a, b}, {Gang("gang", 4, 1)}, {}, running);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(Place(*s).preemptions.empty());
  s = ClusterSnapshot::Create({a, b}, {Gang("gang", 4, 2)}, {}, running);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(Stopped(Place(*s)), UnorderedElementsAre("a-low", "b-low"));
}

// A victim spread over a and b frees both its parts: one stop makes room
// for four ranks over the two nodes.
TEST_P(SpreadPreemptionTest, StoppingASpreadVictimFreesAllItsParts) {
  WorkerCapacity a = Node("a", {1000, 1000}), b = Node("b", {1000, 1000});
  std::vector<RunningJob> running;
  ASSERT_TRUE(StartRunningSpread({&a, &b}, {2, 2}, Gang("wide", 4, 0, 0),
                                 /*work=*/30, running));
  auto s = ClusterSnapshot::Create({a, b}, {Gang("gang", 4, 2)}, {}, running);
  ASSERT_TRUE(s.ok()) << s.status();
  Plan plan = Place(*s);
  ASSERT_EQ(plan.preemptions.size(), 1u);
  EXPECT_EQ(plan.preemptions[0].job_id, "wide");
  EXPECT_EQ(plan.preemptions[0].worker_id, "a") << "its own worker";
  EXPECT_THAT(plan.waits[0].reason, HasSubstr("workers a, b"));
}

// A job for one node is made room for by stopping a spread job whose part
// (not its own worker) holds that node.
TEST_P(SpreadPreemptionTest, ASpreadVictimsPartCountsOnItsNode) {
  WorkerCapacity a = Node("a", {1000, 1000}), b = Node("b", {1000, 1000});
  std::vector<RunningJob> running;
  ASSERT_TRUE(StartRunningSpread({&a, &b}, {2, 2}, Gang("wide", 4, 0, 0),
                                 /*work=*/30, running));
  PendingJob urgent = Share("urgent", 1, 2, kWholeGpuMilli, 1, kUrgent);
  auto s = ClusterSnapshot::Create({a, b}, {urgent}, {}, running);
  ASSERT_TRUE(s.ok()) << s.status();
  Plan plan = Place(*s);
  ASSERT_EQ(plan.preemptions.size(), 1u);
  EXPECT_EQ(plan.preemptions[0].job_id, "wide");
  EXPECT_EQ(plan.preemptions[0].worker_id, "a");
}

// The part on b alone holds the node the job asks for: it is found there.
TEST_P(SpreadPreemptionTest, AVictimIsFoundByItsPartAlone) {
  WorkerCapacity a = Node("a", {1000, 1000}), b = Node("b", {1000, 1000});
  std::vector<RunningJob> running;
  ASSERT_TRUE(StartRunningSpread({&a, &b}, {1, 2}, Gang("wide", 3, 0, 0),
                                 /*work=*/30, running));
  Low(a, "a-low", 1, 1, running);
  PendingJob urgent = Share("urgent", 1, 2, kWholeGpuMilli, 1, kUrgent);
  auto s = ClusterSnapshot::Create({a, b}, {urgent}, {}, running);
  ASSERT_TRUE(s.ok()) << s.status();
  // On a both must stop (31); on b only "wide" (30).
  Plan plan = Place(*s);
  EXPECT_THAT(Stopped(plan), ElementsAre("wide"));
  EXPECT_THAT(plan.waits[0].reason, HasSubstr("on worker b to be"));
}

INSTANTIATE_TEST_SUITE_P(Policies, SpreadPreemptionTest,
                         ::testing::Values("first-fit+preempt",
                                           "best-fit+preempt", "fgd+preempt",
                                           "fgd+drf+backfill+preempt"));

TEST(GiveBackTest, GivesBackWhatTheJobHoldsOnThatWorkerOnly) {
  WorkerCapacity a = Node("a", {1000, 1000}), b = Node("b", {1000, 1000});
  std::vector<RunningJob> running;
  PendingJob shape = Gang("wide", 3, 0, 0);
  shape.cpu_milli = 3000;
  ASSERT_TRUE(StartRunningSpread({&a, &b}, {2, 1}, shape, 0, running));
  const WorkerCapacity held_b = b;
  GiveBack(b, running[0]);
  EXPECT_TRUE(b.devices[0].wholly_free());
  EXPECT_TRUE(b.devices[1].wholly_free());
  EXPECT_EQ(b.free_cpu_milli, held_b.free_cpu_milli + 1000);
  GiveBack(a, running[0]);
  EXPECT_EQ(a.free_cpu_milli, a.cpu_milli);
  EXPECT_TRUE(a.devices[0].wholly_free() && a.devices[1].wholly_free());
  WorkerCapacity c = Node("c", {0});
  GiveBack(c, running[0]);
  EXPECT_FALSE(c.devices[0].wholly_free()) << "holds nothing on c";
}

// Tenant "wide" holds one GPU on its own worker and two in parts: three in
// all, more than "narrow"'s two, so "narrow" goes first under DRF.
TEST(SpreadFairShareTest, CountsEveryPartOfASpreadJob) {
  WorkerCapacity a = Node("a", {1000, 1000}), b = Node("b", {1000}),
                 c = Node("c", {1000}), d = Node("d", {1000, 1000, 1000});
  std::vector<RunningJob> running;
  PendingJob wide = Gang("wide", 3, 0, 0);
  wide.tenant = "wide";
  ASSERT_TRUE(StartRunningSpread({&a, &b, &c}, {1, 1, 1}, wide, 0, running));
  PendingJob narrow = Share("narrow", 0, 2, kWholeGpuMilli);
  narrow.tenant = "narrow";
  ASSERT_TRUE(StartRunning(d, narrow, 0, running));
  PendingJob w1 = Share("wide-1", 1, 1, kWholeGpuMilli);
  w1.tenant = "wide";
  PendingJob n1 = Share("narrow-1", 2, 1, kWholeGpuMilli);
  n1.tenant = "narrow";
  auto s = ClusterSnapshot::Create({a, b, c, d}, {w1, n1}, {}, running);
  ASSERT_TRUE(s.ok()) << s.status();
  // Free: one GPU on a, one on d. Both fit; the order tells the shares.
  Plan plan = (*MakePlacementPolicy("first-fit+drf"))->Place(*s);
  ASSERT_EQ(plan.placements.size(), 2u);
  EXPECT_EQ(plan.placements[0].job_id, "narrow-1");
  // Without its parts, "wide" would hold one GPU and go first.
  std::vector<RunningJob> own_only = running;
  own_only[0].more_parts.clear();
  s = ClusterSnapshot::Create({a, b, c, d}, {w1, n1}, {}, own_only);
  ASSERT_TRUE(s.ok()) << s.status();
  plan = (*MakePlacementPolicy("first-fit+drf"))->Place(*s);
  ASSERT_EQ(plan.placements.size(), 2u);
  EXPECT_EQ(plan.placements[0].job_id, "wide-1");
}

TEST(ClusterSnapshotTest, RejectsBadPartsOfRunningJobs) {
  WorkerCapacity a = Node("a", {1000}), b = Node("b", {1000});
  RunningJob r{"r", "a"};
  r.more_parts.push_back({"ghost"});
  auto s = ClusterSnapshot::Create({a, b}, {}, {}, {r});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(),
              HasSubstr("running job r: part on unknown worker \"ghost\""));

  r.more_parts = {{"b", {3}}};
  s = ClusterSnapshot::Create({a, b}, {}, {}, {r});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("GPU 3 is not on worker b"));

  r.more_parts = {{"b", {0}}};
  r.more_parts[0].memory_bytes = -1;
  s = ClusterSnapshot::Create({a, b}, {}, {}, {r});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("holding on worker b"));

  r.more_parts = {{"b", {0}}};
  EXPECT_TRUE(ClusterSnapshot::Create({a, b}, {}, {}, {r}).ok());
}

}  // namespace
}  // namespace trainyard::scheduler
