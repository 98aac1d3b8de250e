// Preemption, weighted DRF fair share and backfill with reservations, as
// features of any base policy.
#include <algorithm>
#include <limits>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/placement_policy.h"
#include "scheduler/scheduler_test_util.h"

namespace trainyard::scheduler {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace ::trainyard::scheduler::testing;  // NOLINT

std::unique_ptr<PlacementPolicy> Policy(const std::string& name) {
  auto p = MakePlacementPolicy(name);
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

std::vector<std::string> PlacedIds(const Plan& plan) {
  std::vector<std::string> ids;
  for (const Placement& p : plan.placements) ids.push_back(p.job_id);
  return ids;
}

TEST(PolicyNamesTest, FeaturesComposeAndBadOnesAreRejected) {
  EXPECT_EQ(Policy("fgd+preempt+drf")->name(), "fgd+drf+preempt");
  EXPECT_EQ(Policy("best-fit+backfill")->name(), "best-fit+backfill");
  for (const char* bad : {"fgd+", "fgd+turbo", "fgd+drf+drf", "+drf", ""}) {
    auto p = MakePlacementPolicy(bad);
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_THAT(p.status().message(), HasSubstr("+preempt"));
  }
}

// Two workers full of low-priority jobs; the one whose jobs checkpointed
// most recently (least work lost) is preempted for the urgent job.
TEST(PreemptionTest, StopsTheVictimsThatLoseTheLeastWork) {
  WorkerCapacity a = Node("a", {1000, 1000}), b = Node("b", {1000, 1000});
  std::vector<RunningJob> running;
  StartRunning(a, Share("a1", 0, 1, 1000), /*work=*/500, running);
  StartRunning(a, Share("a2", 0, 1, 1000), 10, running);
  StartRunning(b, Share("b1", 0, 1, 1000), 20, running);
  StartRunning(b, Share("b2", 0, 1, 1000), 30, running);
  auto s = ClusterSnapshot::Create(
      {a, b}, {Share("urgent", 1, 1, 1000, 1, /*priority=*/5)}, {}, running);
  ASSERT_TRUE(s.ok()) << s.status();
  Plan plan = Policy("best-fit+preempt")->Place(*s);
  EXPECT_TRUE(plan.placements.empty());
  ASSERT_EQ(plan.preemptions.size(), 1u);
  EXPECT_EQ(plan.preemptions[0].job_id, "a2");  // 10 < 20 < 30 < 500
  EXPECT_EQ(plan.preemptions[0].for_job_id, "urgent");
  ASSERT_EQ(plan.waits.size(), 1u);
  EXPECT_THAT(plan.waits[0].reason, HasSubstr("preempted"));
  EXPECT_TRUE(CheckPlan(*s, plan).ok()) << CheckPlan(*s, plan);
}

TEST(PreemptionTest, NeverStopsEqualOrHigherPriorityOrProtectedJobs) {
  WorkerCapacity a = Node("a", {1000});
  std::vector<RunningJob> running;
  StartRunning(a, Share("peer", 0, 1, 1000, 1, /*priority=*/5), 0, running);
  WorkerCapacity b = Node("b", {1000});
  StartRunning(b, Share("protected", 0, 1, 1000), 0, running);
  running.back().preemptible = false;
  auto s = ClusterSnapshot::Create({a, b}, {Share("urgent", 1, 1, 1000, 1, 5)},
                                   {}, running);
  ASSERT_TRUE(s.ok()) << s.status();
  Plan plan = Policy("fgd+preempt")->Place(*s);
  EXPECT_TRUE(plan.preemptions.empty());
}

TEST(PreemptionTest, TwoWaitingJobsDoNotCountOnTheSameRoom) {
  WorkerCapacity a = Node("a", {1000});
  std::vector<RunningJob> running;
  StartRunning(a, Share("low", 0, 1, 1000), 0, running);
  auto s = ClusterSnapshot::Create(
      {a}, {Share("u1", 1, 1, 1000, 1, 5), Share("u2", 2, 1, 1000, 1, 5)}, {},
      running);
  ASSERT_TRUE(s.ok()) << s.status();
  Plan plan = Policy("first-fit+preempt")->Place(*s);
  ASSERT_EQ(plan.preemptions.size(), 1u);
  EXPECT_EQ(plan.preemptions[0].for_job_id, "u1");
}

// A waiting job that preempted two jobs, one of which has stopped: the GPU
// it left stays free for that job while the other stops, instead of going
// to a later job that the waiting job would preempt in turn (round after
// round for as long as victims stop one by one). With or without backfill.
TEST(PreemptionTest, RoomOfVictimsStillStoppingIsHeldForTheirPreemptor) {
  for (const char* name :
       {"first-fit+preempt", "best-fit+drf+preempt", "fgd+backfill+preempt"}) {
    SCOPED_TRACE(name);
    std::vector<RunningJob> running;
    WorkerCapacity a = Node("a", {1000, 1000});
    StartRunning(a, Share("v2", 0, 1, 1000), 0, running);
    running.back().priority = std::numeric_limits<int32_t>::min();  // stopping
    WorkerCapacity b = Node("b", {1000});
    const std::vector<PendingJob> pending = {
        Share("urgent", 1, 2, 1000, 1, /*priority=*/5), Share("v1", 2, 1, 1000),
        Share("late", 3, 1, 1000)};
    auto s = ClusterSnapshot::Create({a, b}, pending, {}, running, {}, {},
                                     {{"urgent", {"a"}}});
    ASSERT_TRUE(s.ok()) << s.status();
    Plan plan = Policy(name)->Place(*s);
    EXPECT_TRUE(CheckPlan(*s, plan).ok()) << CheckPlan(*s, plan);
    // Worker b stays open to the others; a's free GPU waits for urgent.
    ASSERT_EQ(plan.placements.size(), 1u) << PlanString(plan);
    EXPECT_EQ(plan.placements[0].worker_id, "b");
    ASSERT_EQ(plan.waits.size(), 2u);
    EXPECT_EQ(plan.waits[0].job_id, "urgent");
    EXPECT_THAT(plan.waits[0].reason, HasSubstr("to be preempted"));
    EXPECT_THAT(plan.waits[1].reason,
                HasSubstr("worker a has room for it but is held for urgent"));
    ASSERT_EQ(plan.preemptions.size(), 1u);
    EXPECT_EQ(plan.preemptions[0].job_id, "v2");
    EXPECT_EQ(plan.preemptions[0].for_job_id, "urgent");
    EXPECT_THAT(plan.preemptions[0].room_on, ElementsAre("a"));

    // Nothing held (a job stopping for a drain or a cancel): the free GPU
    // goes to the next job (backfill reserves a worker for the blocked job
    // all the same).
    if (absl::StrContains(name, "backfill")) continue;
    auto free_for_all = ClusterSnapshot::Create({a, b}, pending, {}, running);
    ASSERT_TRUE(free_for_all.ok());
    EXPECT_EQ(Policy(name)->Place(*free_for_all).placements.size(), 2u);
  }
}

// A job spread over two workers by its preemption: its victim on one has
// stopped, the other's still stops. Both workers are held for it (the room
// left on the first too), and a worker it does not run on stays open.
TEST(PreemptionTest, ASpreadPreemptorHoldsEveryWorkerItIsToRunOn) {
  std::vector<RunningJob> running;
  // c's GPUs are too small for the wide job: only a and b can hold it.
  WorkerCapacity a = Node("a", {1000}, /*gpu_gib=*/80),
                 b = Node("b", {1000}, 80), c = Node("c", {1000, 1000}, 16);
  StartRunning(b, Share("v2", 0, 1, 1000), 0, running);
  running.back().priority = std::numeric_limits<int32_t>::min();
  PendingJob wide = Share("wide", 1, 2, 1000, 1, /*priority=*/5);
  wide.gpu_memory_bytes = 40 * kGiB;
  wide.max_nodes = 0;
  const std::vector<PendingJob> pending = {wide, Share("l1", 2, 1, 1000),
                                           Share("l2", 3, 1, 1000),
                                           Share("l3", 4, 1, 1000)};
  for (const char* name : {"best-fit+preempt", "fgd+drf+preempt"}) {
    SCOPED_TRACE(name);
    auto s = ClusterSnapshot::Create({a, b, c}, pending, {}, running, {}, {},
                                     {{"wide", {"a", "b"}}});
    ASSERT_TRUE(s.ok()) << s.status();
    Plan plan = Policy(name)->Place(*s);
    EXPECT_TRUE(CheckPlan(*s, plan).ok()) << CheckPlan(*s, plan);
    ASSERT_EQ(plan.placements.size(), 2u) << PlanString(plan);
    for (const Placement& p : plan.placements) EXPECT_EQ(p.worker_id, "c");
    // Without the hold, a's free GPU goes to a small job too.
    auto open = ClusterSnapshot::Create({a, b, c}, pending, {}, running);
    ASSERT_TRUE(open.ok());
    EXPECT_EQ(Policy(name)->Place(*open).placements.size(), 3u);
  }
}

// Tenant "big" already holds most of the cluster: with DRF the other
// tenant's later jobs go first; without it, submit order rules.
TEST(FairShareTest, TenantWithLessDominantShareGoesFirst) {
  WorkerCapacity a = Node("a", {1000, 1000, 1000, 1000});
  std::vector<RunningJob> running;
  PendingJob held = Share("held", 0, 2, 1000);
  held.tenant = "big";
  StartRunning(a, held, 0, running);
  PendingJob b1 = Share("big-1", 1, 1, 1000), b2 = Share("big-2", 2, 1, 1000);
  PendingJob s1 = Share("small-1", 3, 1, 1000),
             s2 = Share("small-2", 4, 1, 1000);
  b1.tenant = b2.tenant = "big";
  s1.tenant = s2.tenant = "small";
  auto s = ClusterSnapshot::Create({a}, {b1, b2, s1, s2}, {}, running);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(PlacedIds(Policy("best-fit+drf")->Place(*s)),
              ElementsAre("small-1", "small-2"));
  EXPECT_THAT(PlacedIds(Policy("best-fit")->Place(*s)),
              ElementsAre("big-1", "big-2"));
}

// Queue positions under fair share follow the order tenants would be served
// in as room frees: one tenant's backlog interleaves with the others'
// (weights included) instead of coming whole first.
TEST(FairShareTest, QueuePositionsInterleaveTenantsAsTheyWouldBeServed) {
  WorkerCapacity a = Node("a", {1000});
  std::vector<RunningJob> running;
  PendingJob r = Share("r", 0, 1, 1000);
  r.tenant = "ann";
  StartRunning(a, r, 0, running);
  std::vector<PendingJob> jobs;
  for (int i = 1; i <= 3; ++i) {
    jobs.push_back(Share(absl::StrCat("a", i), i, 1, 1000));
    jobs.back().tenant = "ann";
  }
  for (int i = 1; i <= 2; ++i) {
    jobs.push_back(Share(absl::StrCat("b", i), 10 + i, 1, 1000));
    jobs.back().tenant = "bob";
  }
  jobs.push_back(Share("urgent", 20, 1, 1000, 1, /*priority=*/3));
  jobs.back().tenant = "bob";
  auto positions = [&](const std::string& policy,
                       absl::flat_hash_map<std::string, double> weights) {
    auto s = ClusterSnapshot::Create({a}, jobs, {}, running, weights);
    EXPECT_TRUE(s.ok()) << s.status();
    std::vector<JobWait> waits = Policy(policy)->Place(*s).waits;
    std::sort(waits.begin(), waits.end(),
              [](const JobWait& x, const JobWait& y) {
                return x.position < y.position;
              });
    std::vector<std::string> ids;
    for (size_t i = 0; i < waits.size(); ++i) {
      EXPECT_EQ(waits[i].position, static_cast<int64_t>(i) + 1);
      ids.push_back(waits[i].job_id);
    }
    return ids;
  };
  // Priority first: bob's urgent job, which evens the shares (ann holds the
  // GPU); then turns alternate, ties to the tenant first by name.
  EXPECT_THAT(positions("first-fit+drf", {}),
              ElementsAre("urgent", "a1", "b1", "a2", "b2", "a3"));
  // ann weighs twice as much: two turns to bob's one.
  EXPECT_THAT(positions("first-fit+drf", {{"ann", 2.0}}),
              ElementsAre("urgent", "a1", "a2", "b1", "a3", "b2"));
  EXPECT_THAT(positions("first-fit", {}),
              ElementsAre("urgent", "a1", "a2", "a3", "b1", "b2"));
}

TEST(FairShareTest, WeightsScaleTheShare) {
  WorkerCapacity a = Node("a", {1000, 1000, 1000});
  std::vector<PendingJob> jobs;
  for (int i = 0; i < 3; ++i) {
    PendingJob x = Share(absl::StrCat("x", i), i, 1, 1000);
    PendingJob y = Share(absl::StrCat("y", i), 10 + i, 1, 1000);
    x.tenant = "x";
    y.tenant = "y";
    jobs.push_back(x);
    jobs.push_back(y);
  }
  auto s = ClusterSnapshot::Create({a}, jobs, {}, {}, {{"y", 2.0}});
  ASSERT_TRUE(s.ok()) << s.status();
  // x and y both start at 0 (x first by name); then y, weighted 2, stays
  // below x for one more job.
  EXPECT_THAT(PlacedIds(Policy("first-fit+drf")->Place(*s)),
              ElementsAre("x0", "y0", "y1"));
}

// The gang waits for node "a" (the most GPUs free); small jobs behind it
// go elsewhere instead of taking a's last free GPU.
TEST(BackfillTest, BlockedGangReservesAWorkerSmallJobsBackfillTheRest) {
  std::vector<RunningJob> running;
  WorkerCapacity a = Node("a", {1000, 1000, 1000, 1000});
  StartRunning(a, Share("r", 0, 1, 1000), 0, running);
  WorkerCapacity b = Node("b", {1000, 1000});
  auto s = ClusterSnapshot::Create(
      {a, b},
      {Share("gang", 1, 4, 1000), Share("s1", 2, 1, 1000),
       Share("s2", 3, 1, 1000), Share("s3", 4, 1, 1000)},
      {}, running);
  ASSERT_TRUE(s.ok()) << s.status();
  Plan plan = Policy("first-fit+backfill")->Place(*s);
  ASSERT_EQ(plan.reservations.size(), 1u);
  EXPECT_EQ(plan.reservations[0].worker_id, "a");
  EXPECT_THAT(PlacedIds(plan), ElementsAre("s1", "s2"));
  for (const Placement& p : plan.placements) EXPECT_EQ(p.worker_id, "b");
  EXPECT_THAT(plan.waits[0].reason, HasSubstr("reserved"));
  ASSERT_EQ(plan.waits.size(), 2u);
  EXPECT_EQ(plan.waits[0].position, 1);
  EXPECT_EQ(plan.waits[1].job_id, "s3");
  EXPECT_EQ(plan.waits[1].position, 2);
  EXPECT_THAT(plan.waits[1].reason,
              HasSubstr("; worker a has room for it but is held for gang"));
  // Without backfill the small jobs take a's free GPUs.
  EXPECT_EQ(Policy("first-fit")->Place(*s).placements.size(), 3u);
}

// A job restarted after failing on some workers goes elsewhere when it can,
// whatever the policy, and back to them when nothing else has room.
TEST(AvoidWorkersTest, ElsewhereWhenPossibleElseWhereItFailed) {
  auto snapshot = [](std::vector<WorkerCapacity> w, std::vector<PendingJob> j,
                     AvoidedWorkers avoided) {
    auto s = ClusterSnapshot::Create(std::move(w), std::move(j), {}, {}, {},
                                     std::move(avoided));
    EXPECT_TRUE(s.ok()) << s.status();
    return *std::move(s);
  };
  const PendingJob restarted = Share("restarted", 0, 1, 1000);
  const PendingJob next = Share("next", 1, 1, 1000);
  for (const char* name : {"first-fit", "best-fit", "fgd", "fgd+drf"}) {
    SCOPED_TRACE(name);
    // a would suit it as well as b, and comes first; "gone" is not
    // connected.
    Plan plan = Policy(name)->Place(
        snapshot({Node("a", {1000}), Node("b", {1000})}, {restarted, next},
                 {{"restarted", {"a", "gone"}}}));
    ASSERT_EQ(plan.placements.size(), 2u);
    EXPECT_EQ(plan.placements[0].job_id, "restarted");
    EXPECT_EQ(plan.placements[0].worker_id, "b");
    // Held back only for the restarted job.
    EXPECT_EQ(plan.placements[1].worker_id, "a");

    plan =
        Policy(name)->Place(snapshot({Node("a", {1000}), Node("b", {0, 0})},
                                     {restarted}, {{"restarted", {"a", "b"}}}));
    ASSERT_EQ(plan.placements.size(), 1u);
    EXPECT_EQ(plan.placements[0].worker_id, "a");
  }
  // A spread job avoids the worker too, and a worker reserved for a blocked
  // job stays reserved after the restarted job looked.
  PendingJob spread = Share("spread", 1, 2, 1000);
  spread.max_nodes = 0;
  Plan plan =
      Policy("first-fit+backfill")
          ->Place(snapshot(
              {Node("a", {1000, 1000, 1000, 0}), Node("b", {1000}),
               Node("c", {1000}), Node("d", {1000})},
              {Share("gang", 0, 4, 1000), spread, Share("small", 2, 1, 1000)},
              {{"spread", {"b"}}}));
  ASSERT_EQ(plan.reservations.size(), 1u);
  EXPECT_EQ(plan.reservations[0].worker_id, "a");
  ASSERT_THAT(PlacedIds(plan), ElementsAre("spread", "small"));
  EXPECT_EQ(plan.placements[0].worker_id, "c");
  ASSERT_EQ(plan.placements[0].more_nodes.size(), 1u);
  EXPECT_EQ(plan.placements[0].more_nodes[0].worker_id, "d");
  EXPECT_EQ(plan.placements[1].worker_id, "b");
}

TEST(CheckPlanTest, RejectsBadPreemptions) {
  WorkerCapacity a = Node("a", {1000});
  std::vector<RunningJob> running;
  StartRunning(a, Share("low", 0, 1, 1000), 0, running);
  auto s =
      ClusterSnapshot::Create({a}, {Share("u", 1, 1, 1000, 1, 5)}, {}, running);
  ASSERT_TRUE(s.ok());
  Plan unknown;
  unknown.preemptions.push_back({"ghost", "a", "u"});
  EXPECT_FALSE(CheckPlan(*s, unknown).ok());
  Plan twice;
  twice.preemptions = {{"low", "a", "u"}, {"low", "a", "u"}};
  EXPECT_FALSE(CheckPlan(*s, twice).ok());
  Plan for_nobody;
  for_nobody.preemptions = {{"low", "a", "ghost"}};
  EXPECT_FALSE(CheckPlan(*s, for_nobody).ok());
  Plan wrong_worker;
  wrong_worker.preemptions = {{"low", "b", "u"}};
  EXPECT_FALSE(CheckPlan(*s, wrong_worker).ok());
  Plan fine;
  fine.preemptions = {{"low", "a", "u"}};
  EXPECT_TRUE(CheckPlan(*s, fine).ok());
}

TEST(ClusterSnapshotTest, RejectsBadRunningJobsAndWeights) {
  WorkerCapacity a = Node("a", {1000});
  RunningJob on_ghost{"r", "ghost"};
  EXPECT_FALSE(ClusterSnapshot::Create({a}, {}, {}, {on_ghost}).ok());
  RunningJob bad_gpu{"r", "a"};
  bad_gpu.gpu_indices = {7};
  EXPECT_FALSE(ClusterSnapshot::Create({a}, {}, {}, {bad_gpu}).ok());
  EXPECT_FALSE(ClusterSnapshot::Create({a}, {}, {}, {}, {{"t", 0.0}}).ok());
}

}  // namespace
}  // namespace trainyard::scheduler
