#include "scheduler/fgd_policy.h"

#include <cmath>
#include <optional>
#include <random>
#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/best_fit_policy.h"
#include "scheduler/fair_share.h"
#include "scheduler/scheduler_test_util.h"

namespace trainyard::scheduler {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using namespace ::trainyard::scheduler::testing;  // NOLINT

std::vector<FragClass> OneClass(int32_t gpus, int32_t milli) {
  PendingJob shape = Share("class", 0, gpus, milli);
  return {{shape, DemandOf(shape, false), 1.0}};
}

TEST(NodeFragmentationTest, CountsGpusTooSmallForTheTask) {
  const WorkerCapacity n = Node("n", {1000, 300});
  EXPECT_THAT(NodeFragmentation(n, OneClass(1, 1000)), DoubleNear(300, 1e-9));
  EXPECT_THAT(NodeFragmentation(n, OneClass(1, 500)), DoubleNear(300, 1e-9));
  EXPECT_THAT(NodeFragmentation(n, OneClass(1, 200)), DoubleNear(0, 1e-9));
  // Too few GPUs for the task: all free compute is unusable to it.
  EXPECT_THAT(NodeFragmentation(n, OneClass(2, 1000)), DoubleNear(1300, 1e-9));
}

TEST(NodeFragmentationTest, HostShortageMakesAllGpusFragments) {
  const WorkerCapacity n = Node("n", {1000, 1000}, 16, /*cpus=*/2);
  std::vector<FragClass> c = OneClass(1, 1000);
  c[0].shape.cpu_milli = 4000;
  EXPECT_THAT(NodeFragmentation(n, c), DoubleNear(2000, 1e-9));
}

TEST(FragClassesForTest, WeighsWorkloadAndDropsCpuOnlyKinds) {
  PendingJob cpu = Share("cpu", 0, 0, 1000);
  cpu.cpu_slots = 1;
  ClusterSnapshot s = MakeSnapshot(
      {}, {},
      {{Share("a", 0, 1, 1000), 3}, {Share("b", 0, 1, 500), 1}, {cpu, 10}});
  std::vector<FragClass> classes = FragClassesFor(s);
  ASSERT_EQ(classes.size(), 2u);
  EXPECT_THAT(classes[0].weight, DoubleNear(0.75, 1e-9));
  EXPECT_EQ(classes[1].shape.gpu_compute_milli, 500);
}

// Best-fit squeezes a 300 share into the 700 left on "used", leaving 400
// that no 600 task can use; FGD keeps "used" whole for the 600 tasks.
TEST(FgdPolicyTest, AvoidsLeavingUnusableSlivers) {
  std::vector<TaskClass> workload = {{Share("k", 0, 1, 600), 1}};
  ClusterSnapshot s = MakeSnapshot({Node("used", {700}), Node("idle", {1000})},
                                   {Share("a", 1, 1, 300)}, workload);
  Plan fgd = FgdPolicy().Place(s);
  ASSERT_EQ(fgd.placements.size(), 1u);
  EXPECT_EQ(fgd.placements[0].worker_id, "idle");
  Plan best = BestFitPolicy().Place(s);
  ASSERT_EQ(best.placements.size(), 1u);
  EXPECT_EQ(best.placements[0].worker_id, "used");
}

TEST(FgdPolicyTest, PicksTheGpuWithinANodeToo) {
  std::vector<TaskClass> workload = {{Share("k", 0, 1, 600), 1}};
  ClusterSnapshot s = MakeSnapshot({Node("n", {700, 1000, 300})},
                                   {Share("a", 1, 1, 300)}, workload);
  Plan plan = FgdPolicy().Place(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  // GPU 2 (300 free) was unusable to 600 tasks anyway: fill it.
  EXPECT_THAT(plan.placements[0].gpu_indices, ElementsAre(2));
  EXPECT_TRUE(CheckPlan(s, plan).ok());
}

TEST(FgdPolicyTest, WithoutWorkloadUsesThePendingJobs) {
  ClusterSnapshot s = MakeSnapshot(
      {Node("used", {700}), Node("idle", {1000})},
      {Share("big", 1, 1, 600, 1, 0), Share("small", 2, 1, 300, 1, 0)});
  Plan plan = FgdPolicy().Place(s);
  EXPECT_EQ(plan.placements.size(), 2u);
  EXPECT_TRUE(CheckPlan(s, plan).ok());
}

}  // namespace
}  // namespace trainyard::scheduler

namespace trainyard::scheduler {
namespace {

// FGD as the paper states it: every worker, every candidate GPU, the whole
// node's fragmentation before and after. The policy's grouped, cached and
// incremental scoring must place every job exactly where this does.
std::vector<std::string> NaiveFgd(const ClusterSnapshot& s) {
  const std::vector<FragClass> classes = FragClassesFor(s);
  std::vector<WorkerCapacity> free = s.workers();
  std::vector<std::string> out;
  for (const PendingJob* job : InPlacementOrder(s.pending())) {
    const GpuDemand demand = DemandOf(*job, false);
    std::optional<std::tuple<double, int64_t, size_t, std::vector<size_t>>>
        best;
    for (size_t i = 0; i < free.size(); ++i) {
      if (!FitsNow(free[i], *job, demand)) continue;
      std::vector<std::vector<size_t>> candidates;
      if (job->gpus == 0) {
        candidates = {{}};
      } else if (demand.whole) {
        candidates = {FirstDevices(free[i], demand, job->gpus)};
      } else if (job->gpus > 1) {
        candidates = {TightestDevices(free[i], demand, job->gpus)};
      } else {
        for (size_t d = 0; d < free[i].devices.size(); ++d) {
          if (GpuFits(free[i].devices[d], demand)) candidates.push_back({d});
        }
      }
      for (const auto& devices : candidates) {
        WorkerCapacity after = free[i];
        Take(after, *job, demand, devices);
        const double delta = std::round((NodeFragmentation(after, classes) -
                                         NodeFragmentation(free[i], classes)) *
                                        1024) /
                             1024;
        auto key = std::make_tuple(delta, FreeGpuMilli(after), i, devices);
        if (!best || key < *best) best = key;
      }
    }
    if (!best) continue;
    const size_t w = std::get<2>(*best);
    Take(free[w], *job, demand, std::get<3>(*best));
    std::string placed = job->id + "@" + free[w].id + "[";
    for (size_t d : std::get<3>(*best)) {
      placed += std::to_string(free[w].devices[d].index) + ",";
    }
    out.push_back(placed + "]");
  }
  return out;
}

TEST(FgdPolicyTest, PlacesExactlyLikeTheNaiveWorkerByWorkerScan) {
  int placements = 0;
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    // The naive scan places each job on one node, as FGD chooses it;
    // spreading a job over nodes is the pass's, the same for every policy.
    ClusterSnapshot random = testing::RandomSnapshot(seed);
    std::vector<PendingJob> pending = random.pending();
    for (PendingJob& j : pending) j.max_nodes = 1;
    ClusterSnapshot s = *ClusterSnapshot::Create(random.workers(), pending,
                                                 random.workload(), {}, {});
    std::vector<std::string> got;
    for (const Placement& p : FgdPolicy().Place(s).placements) {
      std::string placed = p.job_id + "@" + p.worker_id + "[";
      for (int32_t g : p.gpu_indices) placed += std::to_string(g) + ",";
      got.push_back(placed + "]");
    }
    EXPECT_EQ(got, NaiveFgd(s)) << "seed " << seed;
    placements += static_cast<int>(got.size());
  }
  EXPECT_GT(placements, 300);
}

// Many alike workers (big groups whose lowest member changes) and a queue
// that repeats a few shapes (cached scores).
TEST(FgdPolicyTest, GroupsOfAlikeWorkersPlaceLikeTheNaiveScan) {
  static constexpr int32_t kMilli[] = {1000, 500, 250, 810, 300};
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    std::mt19937 rng(seed);
    std::vector<WorkerCapacity> workers;
    for (int i = 0; i < 24; ++i) {
      workers.push_back(Node(absl::StrCat("w", i), {1000, 1000, 1000, 1000}, 16,
                             16 + 16 * (i % 2), 64));
    }
    std::vector<PendingJob> jobs;
    for (int i = 0; i < 120; ++i) {
      const int32_t gpus = rng() % 6 == 0 ? 2 : 1;
      jobs.push_back(Share(absl::StrCat("j", i), i, gpus, kMilli[rng() % 5],
                           1 + rng() % 3));
    }
    ClusterSnapshot s = MakeSnapshot(workers, jobs);
    std::vector<std::string> got;
    for (const Placement& p : FgdPolicy().Place(s).placements) {
      std::string placed = p.job_id + "@" + p.worker_id + "[";
      for (int32_t g : p.gpu_indices) placed += std::to_string(g) + ",";
      got.push_back(placed + "]");
    }
    EXPECT_EQ(got, NaiveFgd(s)) << "seed " << seed;
  }
}

// Many workers and a queue where nearly every job asks its own CPU and host
// memory: the candidate order kept per GPU need (merged entries, groups
// that change or lose their lowest member, hosts running short of what the
// task kinds ask) places exactly like the naive scan. Odd seeds give some
// jobs an engine memory estimate of their own, so that there are more GPU
// needs than orders kept and the rest scan every group.
TEST(FgdPolicyTest, CandidateOrdersPlaceLikeTheNaiveScan) {
  static constexpr int32_t kMilli[] = {1000, 500, 250, 810, 300, 160};
  int placements = 0;
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    std::mt19937 rng(seed);
    std::vector<WorkerCapacity> workers;
    for (int i = 0; i < 32; ++i) {
      workers.push_back(Node(
          absl::StrCat("w", i), std::vector<int32_t>(4 + 4 * (i % 2), 1000),
          16 + 16 * (i % 3), 12 + rng() % 24, 32 + rng() % 64));
    }
    std::vector<PendingJob> jobs;
    for (int i = 0; i < 300; ++i) {
      const uint32_t kind = rng() % 20;
      const int32_t gpus = kind < 2 ? 0 : kind < 18 ? 1 : 2 + 2 * (kind % 2);
      PendingJob j = Share(absl::StrCat("j", i), i, gpus, kMilli[rng() % 6]);
      j.cpu_milli = 250 + rng() % 6000;
      j.memory_bytes = (1 + rng() % 24) * kGiB + rng() % 1000;
      if (gpus == 0) j.cpu_slots = 0;
      if (seed % 2 == 1 && gpus > 0 && rng() % 3 == 0) {
        j.gpu_memory_estimated = true;
        j.gpu_memory_bytes = kGiB + rng() % (12 * kGiB);
        j.gpu_compute_milli = 0;
      }
      jobs.push_back(std::move(j));
    }
    ClusterSnapshot s = MakeSnapshot(workers, jobs);
    std::vector<std::string> got;
    for (const Placement& p : FgdPolicy().Place(s).placements) {
      std::string placed = p.job_id + "@" + p.worker_id + "[";
      for (int32_t g : p.gpu_indices) placed += std::to_string(g) + ",";
      got.push_back(placed + "]");
    }
    EXPECT_EQ(got, NaiveFgd(s)) << "seed " << seed;
    placements += static_cast<int>(got.size());
  }
  EXPECT_GT(placements, 600);
}

}  // namespace
}  // namespace trainyard::scheduler
