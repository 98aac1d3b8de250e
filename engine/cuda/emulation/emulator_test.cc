// The CUDA emulation's own checks: the built-ins and warp functions give
// CUDA's results, thread orders expose a missing barrier, and each broken
// kernel of emulator_test_kernels.h fails its launch with a message that
// says what is wrong, without hanging or crashing.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/cuda/emulation/emulator_test_kernels.h"
#include "engine/cuda/emulation/launch.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::cuda_emulation {
namespace {

using ::testing::HasSubstr;

// Catches kernel failure messages; restores the rotating order and the
// default handler afterwards.
class EmulatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetFailureHandler([this](const std::string& m) { failures_.push_back(m); });
  }
  void TearDown() override {
    SetFailureHandler(nullptr);
    SetThreadOrder(OrderPolicy::kRotate);
  }

  // The launch error, checking that exactly one failure was reported and
  // that it mentions `what`.
  void ExpectFailure(cudaError_t e, const std::string& what) {
    EXPECT_EQ(e, cudaErrorLaunchFailure);
    ASSERT_EQ(failures_.size(), 1u);
    EXPECT_THAT(failures_[0], HasSubstr(what));
    failures_.clear();
  }

  std::vector<std::string> failures_;
};

TEST_F(EmulatorTest, BuiltInsDescribeEveryThreadOfTwoDimensionalLaunches) {
  const dim3 grid(3, 2), block(16, 3);  // the second warp is partial
  const int threads = 6 * 48;
  std::vector<unsigned> out(8 * threads, 0xdead);
  ASSERT_EQ(testing::LaunchIndices(out.data(), grid, block), cudaSuccess);
  for (int t = 0; t < threads; ++t) {
    const unsigned b = t / 48, in_block = t % 48;
    const std::vector<unsigned> want = {
        in_block % 16, in_block / 16, b % 3, b / 3, 16, 3, 3, 2};
    EXPECT_EQ(
        std::vector<unsigned>(out.begin() + 8 * t, out.begin() + 8 * t + 8),
        want)
        << "thread " << t;
  }
  EXPECT_TRUE(failures_.empty());
}

TEST_F(EmulatorTest, WarpFunctionsGiveCudasResults) {
  std::vector<int64_t> out(8 * 64, -99);
  ASSERT_EQ(testing::LaunchWarpOps(out.data()), cudaSuccess);
  unsigned ballot = 0;
  for (int l = 0; l < 32; l += 3) ballot |= 1u << l;
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32, warp0 = t - lane;
    const int64_t* o = &out[8 * t];
    EXPECT_EQ(o[0], warp0 + (lane ^ 5)) << t;
    EXPECT_EQ(o[1], ballot) << t;
    EXPECT_EQ(o[2], 1) << t;
    EXPECT_EQ(o[3], 1) << t;  // every lane is below 40
    EXPECT_EQ(o[4], 11) << t;
    EXPECT_EQ(o[5], lane % 8 + 1) << t;
    EXPECT_EQ(o[6], lane + 3 < 32 ? t + 3 : t) << t;
    EXPECT_EQ(o[7], warp0 + 2) << t;
  }
}

// A missing barrier: with ascending order each thread reads its neighbour
// before the neighbour writes (the poison, -1); descending, after.
TEST_F(EmulatorTest, ThreadOrderExposesAMissingBarrier) {
  const int n = 96;
  std::vector<int> want(n), ascending(n), descending(n), with_barrier(n);
  for (int t = 0; t < n; ++t) want[t] = (t + 1) % n;
  SetThreadOrder(OrderPolicy::kAscending);
  ASSERT_EQ(testing::LaunchRotate(ascending.data(), n, false), cudaSuccess);
  SetThreadOrder(OrderPolicy::kDescending);
  ASSERT_EQ(testing::LaunchRotate(descending.data(), n, false), cudaSuccess);
  EXPECT_NE(ascending, descending);
  EXPECT_EQ(ascending[0], -1);
  for (OrderPolicy order : {OrderPolicy::kAscending, OrderPolicy::kDescending,
                            OrderPolicy::kShuffled}) {
    SetThreadOrder(order);
    ASSERT_EQ(testing::LaunchRotate(with_barrier.data(), n, true), cudaSuccess);
    EXPECT_EQ(with_barrier, want);
  }
}

TEST_F(EmulatorTest, SharedMemoryIsEachBlocksOwnAndStartsPoisoned) {
  std::vector<int> out(4, 0);
  ASSERT_EQ(testing::LaunchSharedPerBlock(out.data(), 4), cudaSuccess);
  EXPECT_EQ(out, (std::vector<int>{42, -1, -1, -1}));
}

TEST_F(EmulatorTest, BarrierInDivergentCodeFails) {
  ExpectFailure(testing::LaunchDivergentBarrier(), "divergent");
}

TEST_F(EmulatorTest, DeadlockFailsNamingWhereThreadsWait) {
  ExpectFailure(testing::LaunchDeadlock(), "deadlock");
}

TEST_F(EmulatorTest, ShuffleWithALaneThatEndedFails) {
  std::vector<float> out(32);
  for (OrderPolicy order : {OrderPolicy::kAscending, OrderPolicy::kDescending,
                            OrderPolicy::kShuffled}) {
    SetThreadOrder(order);
    EXPECT_EQ(testing::LaunchExitedLane(out.data()), cudaErrorLaunchFailure);
    ASSERT_EQ(failures_.size(), 1u);
    EXPECT_THAT(failures_[0], HasSubstr("__shfl_xor_sync"));
    failures_.clear();
  }
}

std::vector<__nv_bfloat16> SmallIntegers(int n, int mod) {
  std::vector<__nv_bfloat16> v(n);
  for (int i = 0; i < n; ++i) v[i] = __float2bfloat16_rn((i * 7) % mod - 3);
  return v;
}

// warp_mma.h's emulated mma.sync against a host loop, through the
// fragment layouts the header documents.
TEST_F(EmulatorTest, MmaMatchesAHostLoop) {
  const std::vector<__nv_bfloat16> a = SmallIntegers(16 * 16, 9),
                                   b = SmallIntegers(16 * 8, 5);
  float c[16 * 8];
  ASSERT_EQ(testing::LaunchMma(c, a.data(), b.data(), 32, false), cudaSuccess);
  for (int r = 0; r < 16; ++r) {
    for (int n = 0; n < 8; ++n) {
      float want = 0;  // small integers: exact in any order
      for (int k = 0; k < 16; ++k) {
        want +=
            __bfloat162float(a[r * 16 + k]) * __bfloat162float(b[k * 8 + n]);
      }
      EXPECT_EQ(c[r * 8 + n], want) << r << "," << n;
    }
  }
}

// mma.sync and ldmatrix are .aligned: every lane of a whole warp runs each.
TEST_F(EmulatorTest, TensorCoreOpsNeedTheWholeWarpInStep) {
  const std::vector<__nv_bfloat16> a = SmallIntegers(16 * 16, 9),
                                   b = SmallIntegers(16 * 8, 5);
  float c[16 * 8];
  ExpectFailure(testing::LaunchMma(c, a.data(), b.data(), 32, true),
                "different tensor-core calls");
  ExpectFailure(testing::LaunchMma(c, a.data(), b.data(), 16, false),
                "needs a whole warp");
}

// warpgroup_mma.h's emulated wgmma: the result appears at the Wait, the
// accumulators hold NaN between the issue and the Wait (so a kernel that
// reads them early fails its test), and it needs a block of whole
// warpgroups, B in dynamic shared memory, and B and the A registers
// unchanged until the Wait.
TEST_F(EmulatorTest, WarpgroupMmaHoldsItsResultUntilTheWait) {
  using testing::WarpgroupMmaCase;
  float before[128], after[128];
  ASSERT_EQ(
      testing::LaunchWarpgroupMma(before, after, 128, WarpgroupMmaCase::kPlain),
      cudaSuccess);
  for (int t = 0; t < 128; ++t) {
    EXPECT_TRUE(std::isnan(before[t])) << t;
    EXPECT_EQ(after[t], 16.f) << t;
  }
  ExpectFailure(
      testing::LaunchWarpgroupMma(before, after, 64, WarpgroupMmaCase::kPlain),
      "not a whole number of warpgroups");
  ExpectFailure(testing::LaunchWarpgroupMma(before, after, 128,
                                            WarpgroupMmaCase::kBInStaticShared),
                "outside the block's dynamic shared memory");
  ExpectFailure(testing::LaunchWarpgroupMma(
                    before, after, 128, WarpgroupMmaCase::kBChangedBeforeWait),
                "changed before the Wait");
  ExpectFailure(testing::LaunchWarpgroupMma(
                    before, after, 128, WarpgroupMmaCase::kAChangedBeforeWait),
                "A registers changed before the Wait");
}

// In a block of two warpgroups each multiplies its own A, and one can
// run a product the other does not: they meet at no barrier.
TEST_F(EmulatorTest, WarpgroupsOfABlockMultiplyApart) {
  using testing::WarpgroupMmaCase;
  float before[256], after[256];
  ASSERT_EQ(testing::LaunchWarpgroupMma(before, after, 256,
                                        WarpgroupMmaCase::kWarpgroupsApart),
            cudaSuccess);
  for (int t = 0; t < 256; ++t) {
    EXPECT_TRUE(std::isnan(before[t])) << t;
    EXPECT_EQ(after[t], t < 128 ? 16.f : 64.f) << t;
  }
  ExpectFailure(
      testing::LaunchWarpgroupMma(before, after, 256,
                                  WarpgroupMmaCase::kDivergentInAWarpgroup),
      "a warpgroup operation in divergent code");
}

// engine/cuda/vec16.cuh's packs: aligned, they move the values exactly;
// misaligned, the launch fails naming the kernel's line, as a GPU faults.
class VectorAccessTest : public EmulatorTest {
 protected:
  VectorAccessTest() {
    for (int i = 0; i < kIn; ++i) {
      in_[i] = __float2bfloat16_rn(0.25f * static_cast<float>(i - 100));
    }
    for (int i = 0; i < 32 * 16 + 16; ++i) raw_src_[i] = static_cast<char>(i);
  }
  cudaError_t Launch(int narrow_offset, int in_offset, int raw_offset) {
    return testing::LaunchPacks(narrow_, narrow_offset, wide_, in_, in_offset,
                                raw_dst_, raw_src_ + raw_offset);
  }
  void ExpectMisaligned(cudaError_t e, const std::string& access) {
    ASSERT_EQ(failures_.size(), 1u);
    EXPECT_THAT(failures_[0], HasSubstr(access));
    EXPECT_THAT(failures_[0], HasSubstr("not 16-byte aligned"));
    EXPECT_THAT(failures_[0], HasSubstr("emulator_test_kernels.cu:"))
        << "names the kernel's line, not vec16.cuh's";
    ExpectFailure(e, access);
  }

  static constexpr int kIn = 32 * 8 + 8;
  alignas(16) __nv_bfloat16 in_[kIn];
  alignas(16) __nv_bfloat16 narrow_[32 * 8 + 8] = {};
  alignas(16) float wide_[32 * 8] = {};
  alignas(16) char raw_src_[32 * 16 + 16];
  alignas(16) char raw_dst_[32 * 16] = {};
};

TEST_F(VectorAccessTest, AlignedPacksMoveValuesExactly) {
  ASSERT_EQ(Launch(0, 8, 0), cudaSuccess);
  for (int i = 0; i < 32 * 8; ++i) {
    EXPECT_EQ(narrow_[i].__x, in_[8 + i].__x) << i;
    EXPECT_EQ(wide_[i], __bfloat162float(in_[8 + i])) << i;
  }
  EXPECT_EQ(std::memcmp(raw_dst_, raw_src_, sizeof raw_dst_), 0);
  EXPECT_TRUE(failures_.empty());
}

TEST_F(VectorAccessTest, MisalignedPacksFailTheLaunch) {
  ExpectMisaligned(Launch(0, 1, 0), "16-byte load from");
  ExpectMisaligned(Launch(4, 0, 0), "16-byte store to");
  ExpectMisaligned(Launch(0, 0, 8), "16-byte load from");
  // The next launch is not affected.
  EXPECT_EQ(Launch(0, 0, 0), cudaSuccess);
  EXPECT_TRUE(failures_.empty());
}

TEST_F(EmulatorTest, TrapFailsTheLaunchButNotTheNextOne) {
  ExpectFailure(testing::LaunchTrap(), "__trap()");
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(testing::LaunchEmpty(dim3(2), dim3(64)), cudaSuccess);
}

TEST_F(EmulatorTest, LaunchFromInsideAKernelFails) {
  ExpectFailure(testing::LaunchNested(), "from inside a kernel");
}

TEST_F(EmulatorTest, DynamicSharedMemoryNeedsAnOptInAbove48KB) {
  std::vector<int> out(3, 0);
  ASSERT_EQ(testing::LaunchDynamicShared(out.data(), 1024, false), cudaSuccess);
  EXPECT_EQ(out[0] % 16, 0);
  EXPECT_NE(out[0] % 32, 0) << "aligned to more than the 16 it declares";
  EXPECT_EQ(out[1], -1) << "not poisoned";
  EXPECT_EQ(out[2], 5);
  EXPECT_EQ(testing::LaunchDynamicShared(out.data(), 64 * 1024, false),
            cudaErrorInvalidValue);
  EXPECT_EQ(testing::LaunchDynamicShared(out.data(), 64 * 1024, true),
            cudaSuccess);
  EXPECT_EQ(testing::LaunchDynamicShared(out.data(), 300 * 1024, true),
            cudaErrorInvalidValue);
  // The carveout preference: a percentage, or -1 for none.
  EXPECT_EQ(testing::LaunchDynamicShared(out.data(), 64 * 1024, true,
                                         cudaSharedmemCarveoutMaxShared),
            cudaSuccess);
  for (int bad : {101, -2}) {
    EXPECT_EQ(testing::LaunchDynamicShared(out.data(), 1024, false, bad),
              cudaErrorInvalidValue)
        << bad;
  }
  EXPECT_TRUE(failures_.empty());
}

TEST_F(EmulatorTest, LaunchShapesAreCheckedAsCudaDoes) {
  EXPECT_EQ(testing::LaunchEmpty(dim3(1), dim3(1025)),
            cudaErrorInvalidConfiguration);
  EXPECT_EQ(testing::LaunchEmpty(dim3(1), dim3(32, 32, 2)),
            cudaErrorInvalidConfiguration);
  EXPECT_EQ(testing::LaunchEmpty(dim3(0), dim3(32)),
            cudaErrorInvalidConfiguration);
  EXPECT_EQ(testing::LaunchEmpty(dim3(1, 70000), dim3(32)),
            cudaErrorInvalidConfiguration);
  EXPECT_EQ(testing::LaunchEmpty(dim3(4, 2, 2), dim3(32, 32)), cudaSuccess);
  EXPECT_TRUE(failures_.empty());
}

}  // namespace
}  // namespace trainyard::cuda_emulation
