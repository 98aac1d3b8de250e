#include "scheduler/node_fit.h"

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler_test_util.h"

namespace trainyard::scheduler {
namespace {

using ::testing::HasSubstr;
using namespace ::trainyard::scheduler::testing;  // NOLINT

// A job whose per-GPU memory is the engine's estimate, with an optional
// declared compute share (0: in proportion to memory).
PendingJob Estimated(int32_t gpus, int64_t memory, int32_t share = 0) {
  PendingJob j = Share("e", 0, gpus, 500);
  j.gpu_memory_estimated = true;
  j.gpu_memory_bytes = memory;
  j.gpu_compute_milli = share;
  return j;
}

GpuCapacity Gpu(int64_t gib, int32_t free_milli = kWholeGpuMilli) {
  return {0, gib * kGiB, gib * kGiB * free_milli / kWholeGpuMilli, free_milli};
}

TEST(OnGpuTest, SmallEstimateGetsAShareInProportionRoundedUpToATenth) {
  const GpuDemand d = DemandOf(Estimated(1, 20 * kGiB), false);
  EXPECT_TRUE(d.estimated);
  const GpuDemand on = OnGpu(Gpu(80), d);
  EXPECT_FALSE(on.whole);
  EXPECT_EQ(on.memory_bytes, 20 * kGiB);
  EXPECT_EQ(on.compute_milli, 300);  // 25% rounded up to 30%
  EXPECT_EQ(
      OnGpu(Gpu(80), DemandOf(Estimated(1, 8 * kGiB), false)).compute_milli,
      100);
  EXPECT_EQ(OnGpu(Gpu(80), DemandOf(Estimated(1, 1), false)).compute_milli,
            100);
}

TEST(OnGpuTest, DeclaredShareWins) {
  const GpuDemand on =
      OnGpu(Gpu(80), DemandOf(Estimated(1, 20 * kGiB, 650), false));
  EXPECT_FALSE(on.whole);
  EXPECT_EQ(on.compute_milli, 650);
}

TEST(OnGpuTest, OverHalfTheGpuOrUnknownMemoryTakesItWhole) {
  const GpuDemand half = DemandOf(Estimated(1, 40 * kGiB), false);
  EXPECT_FALSE(OnGpu(Gpu(80), half).whole) << "exactly half is a share";
  EXPECT_EQ(OnGpu(Gpu(80), half).compute_milli, 500);
  const GpuDemand over = DemandOf(Estimated(1, 40 * kGiB + 1), false);
  EXPECT_TRUE(OnGpu(Gpu(80), over).whole);
  EXPECT_TRUE(OnGpu(GpuCapacity{0, 0, 0, kWholeGpuMilli}, half).whole);
}

TEST(OnGpuTest, AGpuThatIsNotShareableIsTakenWhole) {
  GpuCapacity alone = Gpu(80);
  alone.shareable = false;
  const GpuDemand small = DemandOf(Estimated(1, 8 * kGiB, 100), false);
  const GpuDemand on = OnGpu(alone, small);
  EXPECT_TRUE(on.whole);
  EXPECT_EQ(on.compute_milli, kWholeGpuMilli);
  EXPECT_EQ(on.memory_bytes, 8 * kGiB) << "it must still hold the job";
  EXPECT_TRUE(GpuFits(alone, small));
  alone.free_compute_milli = 900;
  alone.free_memory_bytes = 72 * kGiB;
  EXPECT_FALSE(GpuFits(alone, small)) << "another job holds part of it";
  EXPECT_TRUE(GpuFits(Gpu(80, 900), small)) << "a shareable one fits it";
}

TEST(OnGpuTest, FixedDemandsAreLeftAsTheyAre) {
  const GpuDemand share = DemandOf(Share("s", 0, 1, 250), false);
  const GpuDemand on = OnGpu(Gpu(16), share);
  EXPECT_EQ(on.compute_milli, 250);
  EXPECT_EQ(on.memory_bytes, share.memory_bytes);
  EXPECT_TRUE(OnGpu(Gpu(16), DemandOf(Share("w", 0, 1, 1000), false)).whole);
}

TEST(ProportionalShareTest, NeverOverflowsOrLeavesRange) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(ProportionalShare(kMax / 2, kMax), 500);
  EXPECT_EQ(ProportionalShare(1, kMax), 100);
  EXPECT_EQ(ProportionalShare(kMax, kMax), 1000);
  EXPECT_EQ(ProportionalShare(30, 100), 300) << "an exact tenth stays";
  EXPECT_EQ(ProportionalShare(31, 100), 400);
}

TEST(GpuFitsTest, EstimatedShareFitsBesideOtherJobsWholeNeedsAnIdleGpu) {
  const GpuDemand small = DemandOf(Estimated(1, 20 * kGiB), false);
  EXPECT_TRUE(GpuFits(Gpu(80, 500), small));  // 40 GiB and 500 free
  EXPECT_FALSE(GpuFits(Gpu(80, 200), small));
  const GpuDemand big = DemandOf(Estimated(1, 50 * kGiB), false);
  EXPECT_FALSE(GpuFits(Gpu(80, 900), big)) << "over half: the whole GPU";
  EXPECT_TRUE(GpuFits(Gpu(80), big));
  EXPECT_FALSE(GpuFits(Gpu(40), big)) << "larger than the GPU";
  EXPECT_FALSE(GpuFitsWhenIdle(Gpu(40), big));
  EXPECT_TRUE(GpuFitsWhenIdle(Gpu(80, 0), big));
  EXPECT_TRUE(GpuFits(GpuCapacity{0, 0, 0, kWholeGpuMilli}, big))
      << "unknown memory: trusted, taken whole";
}

TEST(GpuFitsTest, ExclusiveEstimatedJobTakesWholeGpusThatHoldIt) {
  const GpuDemand d = DemandOf(Estimated(1, 20 * kGiB), /*exclusive=*/true);
  EXPECT_TRUE(d.whole);
  EXPECT_FALSE(d.estimated);
  EXPECT_TRUE(GpuFits(Gpu(80), d));
  EXPECT_FALSE(GpuFits(Gpu(80, 900), d));
  EXPECT_FALSE(GpuFits(Gpu(16), d));
  EXPECT_FALSE(GpuFitsWhenIdle(Gpu(16), d));
  EXPECT_TRUE(GpuFits(GpuCapacity{0, 0, 0, kWholeGpuMilli}, d));
}

TEST(TakeTest, EachGpuGivesWhatItDecided) {
  WorkerCapacity w = Node("w", {1000, 1000}, 80);
  w.devices[1].memory_bytes = w.devices[1].free_memory_bytes = 32 * kGiB;
  const PendingJob job = Estimated(2, 20 * kGiB);
  const GpuDemand d = DemandOf(job, false);
  ASSERT_TRUE(FitsNow(w, job, d));
  Take(w, job, d, {0, 1});
  EXPECT_EQ(w.devices[0].free_compute_milli, 700);
  EXPECT_EQ(w.devices[0].free_memory_bytes, 60 * kGiB);
  EXPECT_EQ(w.devices[1].free_compute_milli, 0) << "over half of 32 GiB";
  EXPECT_EQ(w.devices[1].free_memory_bytes, 0);
}

TEST(DescribeNeedTest, SaysWhatAnEstimatedJobNeeds) {
  EXPECT_EQ(DescribeNeed(Estimated(1, 12 * kGiB),
                         DemandOf(Estimated(1, 12 * kGiB), false)),
            "1 GPU with 12 GiB free (whole if it has under 24 GiB or is not "
            "shared), 1 CPUs "
            "and 1 GiB host memory");
  const PendingJob gang = Estimated(2, 6 * kGiB, 300);
  EXPECT_THAT(DescribeNeed(gang, DemandOf(gang, false)),
              HasSubstr("2 GPUs with 6 GiB and 300 milli-GPU free each "
                        "(whole if they have under 12 GiB or are not "
                        "shared)"));
  EXPECT_THAT(DescribeNeed(gang, DemandOf(gang, true)),
              HasSubstr("2 whole GPUs with 6 GiB each"));
  PendingJob huge = Estimated(1, std::numeric_limits<int64_t>::max());
  EXPECT_THAT(DescribeNeed(huge, DemandOf(huge, false)), HasSubstr("GiB"));
}

TEST(ClusterSnapshotTest, ChecksEstimatedJobs) {
  PendingJob zero = Estimated(1, 0);
  auto s = ClusterSnapshot::Create({}, {zero});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("estimate of 0 bytes"));
  PendingJob no_share = Share("j", 0, 1, 500);
  no_share.gpu_compute_milli = 0;
  s = ClusterSnapshot::Create({}, {no_share});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("outside [1, 1000]"));
  EXPECT_TRUE(ClusterSnapshot::Create({}, {Estimated(1, kGiB)}).ok());
  EXPECT_FALSE(ClusterSnapshot::Create({}, {Estimated(1, kGiB, 1001)}).ok());
}

}  // namespace
}  // namespace trainyard::scheduler
