// The NCCL stand-in's checks of how it is called: arguments (types,
// operations, device buffers), calls before the previous operation is
// done, groups (deferred to ncclGroupEnd, dropped whole when one call
// failed), ranks calling different all-reduces, finalize and the error
// strings. Needs 2 emulated devices (ctest sets YARD_EMULATION_DEVICES=3).
#include <nccl.h>

#include <thread>

#include "engine/cuda/emulation/emulated_nccl_test_support.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::cuda_emulation::testing {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

// Two ranks of one communicator, non-blocking, driven from this thread:
// rank r on device r with a buffer of 64 floats there.
class TwoRanks : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    cudaGetDeviceCount(&devices);
    ASSERT_GE(devices, 2) << "run with YARD_EMULATION_DEVICES=2";
    ncclUniqueId id;
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    ncclConfig_t config = NonBlocking();
    for (int r = 0; r < 2; ++r) {
      buffers_[r] = std::make_unique<DeviceBuffer>(r, 64);
      buffers_[r]->Upload(Values(r, 64));
      ASSERT_EQ(ncclCommInitRankConfig(&comms_[r], 2, id, r, &config),
                ncclInProgress);
      if (r == 0) {
        // Until rank 1 is there, rank 0's communicator refuses calls.
        int count = 0;
        EXPECT_EQ(ncclCommCount(comms_[0], &count), ncclInvalidArgument);
        EXPECT_THAT(ncclGetLastError(comms_[0]),
                    HasSubstr("before the previous operation returned"));
      }
    }
    for (int r = 0; r < 2; ++r) ASSERT_EQ(AwaitState(comms_[r]), ncclSuccess);
  }
  void TearDown() override {
    for (ncclComm_t c : comms_) ncclCommAbort(c);
  }

  float* buffer(int r) { return buffers_[r]->data(); }
  ncclResult_t AllReduce(int r, size_t count = 64) {
    return ncclAllReduce(buffer(r), buffer(r), count, ncclFloat32, ncclSum,
                         comms_[r], nullptr);
  }

  ncclComm_t comms_[2] = {nullptr, nullptr};
  std::unique_ptr<DeviceBuffer> buffers_[2];
};

TEST_F(TwoRanks, RefusesWhatItDoesNotSumWithAMessage) {
  std::vector<float> host(64);
  DeviceBuffer other_device(1, 64);
  struct Case {
    const void* send;
    void* recv;
    size_t count;
    ncclDataType_t type;
    ncclRedOp_t op;
    const char* message;
  } cases[] = {
      {buffer(0), buffer(0), 64, ncclInt32, ncclSum, "ncclFloat32"},
      {buffer(0), buffer(0), 64, ncclFloat32, ncclMax, "ncclSum"},
      {buffer(0), buffer(0), 64, static_cast<ncclDataType_t>(12), ncclSum,
       "invalid data type 12"},
      {buffer(0), buffer(0), 64, ncclFloat32, static_cast<ncclRedOp_t>(-1),
       "invalid reduction operation"},
      {host.data(), host.data(), 64, ncclFloat32, ncclSum,
       "is not memory cudaMalloc made on device 0"},
      {buffer(0), buffer(0), 65, ncclFloat32, ncclSum, "(260 bytes)"},
      {other_device.data(), buffer(0), 64, ncclFloat32, ncclSum, "sendbuff"},
      {buffer(0), buffer(0) + 1, 32, ncclFloat32, ncclSum, "overlap"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ncclAllReduce(c.send, c.recv, c.count, c.type, c.op, comms_[0],
                            nullptr),
              ncclInvalidArgument)
        << c.message;
    EXPECT_THAT(ncclGetLastError(comms_[0]), HasSubstr(c.message));
  }
  EXPECT_EQ(ncclAllReduce(buffer(0), buffer(0), 64, ncclFloat32, ncclSum,
                          nullptr, nullptr),
            ncclInvalidArgument);
  // None of it broke the communicators.
  EXPECT_EQ(AllReduce(0), ncclInProgress);
  EXPECT_EQ(AllReduce(1), ncclInProgress);
  EXPECT_EQ(AwaitState(comms_[0]), ncclSuccess);
  EXPECT_EQ(AwaitState(comms_[1]), ncclSuccess);
  EXPECT_TRUE(SameBits(buffers_[0]->Download(), RankOrderSum(2, 64)));
}

TEST_F(TwoRanks, RefusesACallBeforeThePreviousOperationIsDone) {
  ASSERT_EQ(AllReduce(0), ncclInProgress);  // rank 1 has not joined yet
  EXPECT_EQ(AllReduce(0), ncclInvalidArgument);
  EXPECT_THAT(ncclGetLastError(comms_[0]), HasSubstr("poll"));
  EXPECT_EQ(ncclCommFinalize(comms_[0]), ncclInvalidArgument);
  ASSERT_EQ(AllReduce(1), ncclInProgress);
  EXPECT_EQ(AwaitState(comms_[0]), ncclSuccess);
  EXPECT_EQ(AwaitState(comms_[1]), ncclSuccess);
  EXPECT_TRUE(SameBits(buffers_[1]->Download(), RankOrderSum(2, 64)));
}

TEST_F(TwoRanks, DefersAGroupToItsEndAndDropsItWhenACallFailed) {
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(AllReduce(0, 32), ncclSuccess);
  EXPECT_EQ(AllReduce(1, 32), ncclSuccess);  // two communicators, one group
  EXPECT_EQ(ncclAllReduce(buffer(0) + 32, buffer(0) + 32, 32, ncclFloat32,
                          ncclSum, comms_[0], nullptr),
            ncclSuccess);
  // Nothing ran yet.
  EXPECT_TRUE(SameBits(buffers_[0]->Download(), Values(0, 64)));
  // Both ranks call their second all-reduce through the same group end.
  EXPECT_EQ(ncclAllReduce(buffer(1) + 32, buffer(1) + 32, 32, ncclFloat32,
                          ncclSum, comms_[1], nullptr),
            ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclInProgress);
  EXPECT_EQ(AwaitState(comms_[0]), ncclSuccess);
  EXPECT_EQ(AwaitState(comms_[1]), ncclSuccess);
  EXPECT_TRUE(SameBits(buffers_[0]->Download(), RankOrderSum(2, 64)));

  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(AllReduce(0), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(buffer(0), buffer(0), 64, ncclInt8, ncclSum,
                          comms_[0], nullptr),
            ncclInvalidArgument);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
  ncclResult_t state = ncclInProgress;
  EXPECT_EQ(ncclCommGetAsyncError(comms_[0], &state), ncclSuccess);
  EXPECT_EQ(state, ncclSuccess);  // the valid call was dropped too
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);  // not in a group
  EXPECT_THAT(ncclGetLastError(nullptr), HasSubstr("not in a group"));
}

TEST_F(TwoRanks, RanksCallingDifferentAllReducesBothFail) {
  ASSERT_EQ(AllReduce(0, 64), ncclInProgress);
  ASSERT_EQ(AllReduce(1, 32), ncclInProgress);
  EXPECT_EQ(AwaitState(comms_[0]), ncclInvalidUsage);
  EXPECT_THAT(ncclGetLastError(comms_[0]), HasSubstr("sums 32 floats"));
  EXPECT_EQ(AwaitState(comms_[1]), ncclInvalidUsage);
  EXPECT_THAT(ncclGetLastError(comms_[1]), HasSubstr("different collectives"));
}

TEST_F(TwoRanks, FinalizesOnceWithoutBlocking) {
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ncclCommFinalize(comms_[r]), ncclInProgress);
    EXPECT_EQ(AwaitState(comms_[r]), ncclSuccess);
    EXPECT_EQ(ncclCommFinalize(comms_[r]), ncclInvalidArgument);
    EXPECT_EQ(AllReduce(r), ncclInvalidUsage);
    EXPECT_THAT(ncclGetLastError(comms_[r]), HasSubstr("finalized"));
  }
  for (ncclComm_t& c : comms_) {
    EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
    c = nullptr;
  }
}

TEST(EmulatedNcclUsageTest, NamesItsResultsAndVersion) {
  EXPECT_STREQ(ncclGetErrorString(ncclSuccess), "no error");
  EXPECT_THAT(ncclGetErrorString(ncclRemoteError),
              HasSubstr("remote process exited"));
  EXPECT_THAT(ncclGetErrorString(ncclInProgress), HasSubstr("in progress"));
  EXPECT_THAT(ncclGetErrorString(static_cast<ncclResult_t>(42)),
              HasSubstr("unknown"));
  int version = 0;
  EXPECT_EQ(ncclGetVersion(&version), ncclSuccess);
  EXPECT_EQ(version, NCCL_VERSION_CODE);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 2;
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &config),
            ncclInvalidArgument);
  EXPECT_THAT(ncclGetLastError(nullptr), HasSubstr("blocking must be 0 or 1"));
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 1, id, 1, nullptr),
            ncclInvalidArgument);
  // A one-rank communicator sums alone.
  DeviceBuffer data(0, 8);
  data.Upload(Values(0, 8));
  ASSERT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(data.data(), data.data(), 8, ncclFloat32, ncclSum,
                          comm, nullptr),
            ncclSuccess);
  EXPECT_TRUE(SameBits(data.Download(), Values(0, 8)));
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  EXPECT_EQ(ncclCommAbort(nullptr), ncclSuccess);
}

}  // namespace
}  // namespace trainyard::cuda_emulation::testing
