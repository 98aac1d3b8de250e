#include "sim/saturation.h"

#include "common/test_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/best_fit_policy.h"
#include "scheduler/fgd_policy.h"
#include "scheduler/first_fit_policy.h"

namespace trainyard::sim {
namespace {

using ::testing::DoubleNear;

std::vector<scheduler::WorkerCapacity> Cluster() {
  TestDir dir;
  auto nodes = LoadOpenbNodes(dir.Write("n.csv",
                                        "sn,cpu_milli,memory_mib,gpu,model\n"
                                        "a,8000,8192,1,T4\nb,8000,8192,1,T4\n"
                                        "c,16000,16384,2,T4\n"));
  EXPECT_TRUE(nodes.ok()) << nodes.status();
  return *nodes;
}

std::vector<TracePod> Pods(const std::string& rows) {
  TestDir dir;
  auto pods = LoadOpenbPods(dir.Write(
      "p.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + rows));
  EXPECT_TRUE(pods.ok()) << pods.status();
  return *pods;
}

TEST(SaturationTest, ExclusivePlacementStrandsHalfOfEachGpu) {
  std::vector<TracePod> halves = Pods("h,1000,1024,1,500\n");
  auto ff = RunSaturation(Cluster(), halves, scheduler::FirstFitPolicy(),
                          {.loads = {0.5, 1.0}, .seed = 1});
  ASSERT_TRUE(ff.ok()) << ff.status();
  ASSERT_EQ(ff->size(), 2u);
  EXPECT_EQ((*ff)[1].arrived_tasks, 8);
  EXPECT_EQ((*ff)[1].failed_tasks, 4);
  EXPECT_THAT((*ff)[1].unallocated_share, DoubleNear(0.5, 1e-9));
  const scheduler::BestFitPolicy best_fit;
  const scheduler::FgdPolicy fgd;
  for (const scheduler::PlacementPolicy* p :
       {static_cast<const scheduler::PlacementPolicy*>(&best_fit),
        static_cast<const scheduler::PlacementPolicy*>(&fgd)}) {
    auto points = RunSaturation(Cluster(), halves, *p, {.loads = {1.0}});
    ASSERT_TRUE(points.ok()) << points.status();
    EXPECT_EQ((*points)[0].failed_tasks, 0) << p->name();
    EXPECT_THAT((*points)[0].unallocated_share, DoubleNear(0, 1e-9));
  }
}

TEST(SaturationTest, SameSeedSameResultAndMonotone) {
  std::vector<TracePod> mix = Pods(
      "a,1000,1024,1,300\nb,2000,1024,1,1000\nc,1000,512,0,0\n"
      "d,1000,1024,2,1000\ne,4000,4096,1,700\n");
  scheduler::FgdPolicy fgd;
  SaturationOptions o{.loads = {0.5, 0.8, 1.0}, .seed = 7};
  auto a = RunSaturation(Cluster(), mix, fgd, o);
  auto b = RunSaturation(Cluster(), mix, fgd, o);
  ASSERT_TRUE(a.ok() && b.ok());
  for (size_t i = 0; i < a->size(); ++i) {
    EXPECT_EQ((*a)[i].unallocated_share, (*b)[i].unallocated_share);
    EXPECT_EQ((*a)[i].failed_tasks, (*b)[i].failed_tasks);
    if (i > 0) {
      EXPECT_LE((*a)[i].unallocated_share, (*a)[i - 1].unallocated_share);
      EXPECT_GE((*a)[i].failed_tasks, (*a)[i - 1].failed_tasks);
    }
  }
}

TEST(SaturationTest, EveryPodArrivesOnceBeforeAnyRepeats) {
  // The list asks exactly the cluster's 4 GPUs: replayed once, it fills the
  // cluster with 4 arrivals whatever the order (a draw with replacement
  // would repeat some pods and leave others out).
  std::vector<TracePod> list = Pods(
      "a,1000,1024,1,1000\nb,1000,1024,2,1000\nc,1000,1024,1,500\n"
      "d,1000,1024,1,500\n");
  const scheduler::BestFitPolicy best_fit;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    auto points = RunSaturation(Cluster(), list, best_fit,
                                {.loads = {1.0}, .seed = seed});
    ASSERT_TRUE(points.ok()) << points.status();
    EXPECT_EQ((*points)[0].arrived_tasks, 4) << "seed " << seed;
    EXPECT_EQ((*points)[0].failed_tasks, 0) << "seed " << seed;
    EXPECT_THAT((*points)[0].unallocated_share, DoubleNear(0, 1e-9));
  }
}

TEST(SaturationTest, RejectsBadInputs) {
  std::vector<TracePod> pods = Pods("a,1000,1024,1,300\n");
  scheduler::BestFitPolicy bf;
  EXPECT_FALSE(RunSaturation({}, pods, bf, {}).ok());
  EXPECT_FALSE(RunSaturation(Cluster(), {}, bf, {}).ok());
  auto no_gpu = RunSaturation(Cluster(), Pods("c,1000,1024,0,0\n"), bf, {});
  EXPECT_THAT(no_gpu.status().message(), ::testing::HasSubstr("no pod asks"));
  EXPECT_FALSE(RunSaturation(Cluster(), pods, bf, {.loads = {0.9, 0.5}}).ok());
  EXPECT_FALSE(RunSaturation(Cluster(), pods, bf, {.loads = {1.5}}).ok());
}

// With fine loads every batch holds one GPU task: the same arrivals one
// pass each. A batch pass over the same arrivals must end the same.
TEST(SaturationTest, OneBatchEqualsOnePassPerArrival) {
  std::vector<TracePod> mix = Pods(
      "a,1000,1024,1,300\nb,2000,1024,1,1000\nc,1000,512,0,0\n"
      "d,1000,1024,2,1000\ne,4000,4096,1,700\nf,7000,1024,1,200\n");
  std::vector<double> fine;  // 100 milli of the 4,000 each
  for (int i = 1; i <= 40; ++i) fine.push_back(i / 40.0);
  for (const std::string& name : scheduler::PlacementPolicyNames()) {
    auto policy = scheduler::MakePlacementPolicy(name);
    ASSERT_TRUE(policy.ok());
    for (uint64_t seed = 1; seed <= 10; ++seed) {
      auto one = RunSaturation(Cluster(), mix, **policy,
                               {.loads = {1.0}, .seed = seed});
      auto each = RunSaturation(Cluster(), mix, **policy,
                                {.loads = fine, .seed = seed});
      ASSERT_TRUE(one.ok() && each.ok());
      EXPECT_EQ(one->back().unallocated_share, each->back().unallocated_share)
          << name << " seed " << seed;
      EXPECT_EQ(one->back().failed_tasks, each->back().failed_tasks);
    }
  }
}

// Two 2-GPU tasks: the first takes node c, the second fits nowhere and a
// backfill policy reserves c for it, which one pass per arrival never
// would (the task fails at once): refused, naming the policy.
TEST(SaturationTest, RefusesAPolicyThatReserves) {
  std::vector<TracePod> pairs = Pods("d,1000,1024,2,1000\n");
  auto backfill = scheduler::MakePlacementPolicy("best-fit+backfill");
  ASSERT_TRUE(backfill.ok());
  auto points = RunSaturation(Cluster(), pairs, **backfill, {.loads = {1.0}});
  EXPECT_EQ(points.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(points.status().message(),
              ::testing::HasSubstr("best-fit+backfill: reserves workers"));
  auto plain = RunSaturation(Cluster(), pairs, scheduler::BestFitPolicy(),
                             {.loads = {1.0}});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ((*plain)[0].failed_tasks, 1);
}

}  // namespace
}  // namespace trainyard::sim
