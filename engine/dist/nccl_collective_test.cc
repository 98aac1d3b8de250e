// The NCCL collective on real GPUs: a one-rank communicator (one GPU), the
// sum of two ranks on two GPUs, bitwise equal on both, in buckets started
// before the wait, and peers that die before or during an all-reduce
// failing the survivor with UNAVAILABLE rather than hanging. Skips without
// the GPUs each test needs.
#include "engine/dist/nccl_collective.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/test_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

using ::testing::HasSubstr;

int Gpus() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

#define REQUIRE_GPUS(n)                                                 \
  if (Gpus() < (n)) {                                                   \
    GTEST_SKIP() << "needs " << (n) << " CUDA device(s), this machine " \
                 << "has " << Gpus();                                   \
  }

SocketCollectiveOptions RankOptions(const std::string& dir, int rank,
                                    int world) {
  SocketCollectiveOptions o;
  o.rank = rank;
  o.world_size = world;
  o.rendezvous_file = dir + "/rendezvous";
  o.connect_timeout = absl::Seconds(30);
  o.io_timeout = absl::Seconds(30);
  return o;
}

// One rank's GPU side: a stream standing in for the backend's, and n
// floats of device memory.
struct GpuRank {
  explicit GpuRank(int device, int64_t n) : n(n) {
    cudaSetDevice(device);
    cudaStreamCreate(&stream);
    cudaMalloc(&data, n * sizeof(float));
  }
  ~GpuRank() {
    cudaFree(data);
    cudaStreamDestroy(stream);
  }
  void Upload(const std::vector<float>& host) {
    cudaMemcpy(data, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  }
  std::vector<float> Download() {
    cudaStreamSynchronize(stream);
    std::vector<float> host(n);
    cudaMemcpy(host.data(), data, n * sizeof(float), cudaMemcpyDeviceToHost);
    return host;
  }
  int64_t n;
  cudaStream_t stream = nullptr;
  float* data = nullptr;
};

void OnEveryRank(int world, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(body, r);
  for (std::thread& t : threads) t.join();
}

TEST(NcclCollectiveTest, OneRankCommunicatorLeavesTheValuesAndBucketsWork) {
  REQUIRE_GPUS(1);
  TestDir tmp;
  auto ranks = SocketCollective::Connect(RankOptions(tmp.path(), 0, 1));
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  GpuRank gpu(0, 1000);
  std::vector<float> values(1000);
  for (int i = 0; i < 1000; ++i) values[i] = 0.25f * i - 7;
  gpu.Upload(values);
  auto nccl = NcclCollective::Create(ranks->get(), {0, gpu.stream});
  ASSERT_TRUE(nccl.ok()) << nccl.status();
  EXPECT_EQ((*nccl)->world_size(), 1);
  (*nccl)->StartAllReduceSum({{gpu.data + 600, 400}});
  (*nccl)->StartAllReduceSum({{gpu.data, 100}, {gpu.data + 100, 500}});
  ASSERT_TRUE((*nccl)->WaitAll().ok());
  const FloatSpan all{gpu.data, 1000};
  ASSERT_TRUE((*nccl)->AllReduceSum({&all, 1}).ok());
  EXPECT_EQ(gpu.Download(), values);
}

TEST(NcclCollectiveTest, TwoRanksSumAndHoldTheSameBits) {
  REQUIRE_GPUS(2);
  TestDir tmp;
  const std::string dir = tmp.path();
  constexpr int64_t kN = 1 << 20;
  std::vector<std::vector<float>> got(2);
  std::vector<absl::Status> status(2);
  OnEveryRank(2, [&](int r) {
    auto ranks = SocketCollective::Connect(RankOptions(dir, r, 2));
    if (!ranks.ok()) {
      status[r] = ranks.status();
      return;
    }
    GpuRank gpu(r, kN);
    std::vector<float> values(kN);
    for (int64_t i = 0; i < kN; ++i) values[i] = (r + 1) * 0.001f * (i % 977);
    gpu.Upload(values);
    auto nccl = NcclCollective::Create(ranks->get(), {r, gpu.stream});
    if (!nccl.ok()) {
      status[r] = nccl.status();
      return;
    }
    for (int64_t begin = 0; begin < kN; begin += 300000) {
      (*nccl)->StartAllReduceSum(
          {{gpu.data + begin, std::min<int64_t>(300000, kN - begin)}});
    }
    status[r] = (*nccl)->WaitAll();
    got[r] = gpu.Download();
  });
  ASSERT_TRUE(status[0].ok()) << status[0];
  ASSERT_TRUE(status[1].ok()) << status[1];
  ASSERT_EQ(got[0].size(), static_cast<size_t>(kN));
  EXPECT_EQ(0, std::memcmp(got[0].data(), got[1].data(), kN * sizeof(float)));
  for (int64_t i = 0; i < kN; i += 4099) {
    EXPECT_NEAR(got[0][i], 3 * 0.001f * (i % 977), 1e-4) << i;
  }
}

// What a rank does that takes rank 0's NCCL id (NcclCollective::Create
// shares it as a sum over the sockets) and never joins NCCL with it.
void TakeTheIdOnly(SocketCollective& ranks) {
  std::vector<float> id(NCCL_UNIQUE_ID_BYTES);
  const FloatSpan span{id.data(), NCCL_UNIQUE_ID_BYTES};
  EXPECT_TRUE(ranks.AllReduceSum({&span, 1}).ok());
}

TEST(NcclCollectiveTest, APeerThatNeverFormsTheRingFailsTheOtherAtOnce) {
  REQUIRE_GPUS(1);
  TestDir tmp;
  const std::string dir = tmp.path();
  absl::Status status;
  OnEveryRank(2, [&](int r) {
    auto ranks = SocketCollective::Connect(RankOptions(dir, r, 2));
    ASSERT_TRUE(ranks.ok()) << ranks.status();
    if (r == 1) {
      TakeTheIdOnly(**ranks);  // then goes away
      return;
    }
    GpuRank gpu(0, 16);
    NcclCollectiveOptions options{0, gpu.stream};
    options.connect_timeout = absl::Minutes(5);  // must not be what ends it
    status = NcclCollective::Create(ranks->get(), options).status();
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr("rank 1 closed its connection"));
  EXPECT_THAT(status.message(), HasSubstr("rank 0"));
}

// A peer that lives on but never joins: the wait ends at the connect
// deadline, and the message names that bound (not the per-call one).
TEST(NcclCollectiveTest, APeerAliveButAbsentEndsAtTheConnectDeadline) {
  REQUIRE_GPUS(1);
  TestDir tmp;
  const std::string dir = tmp.path();
  absl::Status status;
  absl::Notification rank0_done;
  OnEveryRank(2, [&](int r) {
    auto ranks = SocketCollective::Connect(RankOptions(dir, r, 2));
    ASSERT_TRUE(ranks.ok()) << ranks.status();
    if (r == 1) {
      TakeTheIdOnly(**ranks);
      rank0_done.WaitForNotification();  // alive, never joining NCCL
      return;
    }
    GpuRank gpu(0, 16);
    NcclCollectiveOptions options{0, gpu.stream};
    options.connect_timeout = absl::Seconds(1);
    options.io_timeout = absl::Minutes(30);
    status = NcclCollective::Create(ranks->get(), options).status();
    rank0_done.Notify();
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(status.message(), HasSubstr("no progress within 1s")) << status;
}

TEST(NcclCollectiveTest, APeerThatDiesMidStepFailsTheOtherWithoutAHang) {
  REQUIRE_GPUS(2);
  TestDir tmp;
  const std::string dir = tmp.path();
  absl::Status status;
  OnEveryRank(2, [&](int r) {
    auto ranks = SocketCollective::Connect(RankOptions(dir, r, 2));
    ASSERT_TRUE(ranks.ok()) << ranks.status();
    GpuRank gpu(r, 1 << 16);
    NcclCollectiveOptions options{r, gpu.stream};
    options.io_timeout = absl::Minutes(5);  // must not be what ends it
    auto nccl = NcclCollective::Create(ranks->get(), options);
    ASSERT_TRUE(nccl.ok()) << nccl.status();
    if (r == 1) return;  // dies: its communicator and sockets go
    const FloatSpan span{gpu.data, 1 << 16};
    status = (*nccl)->AllReduceSum({&span, 1});
    // Broken for good afterwards.
    EXPECT_EQ((*nccl)->AllReduceSum({&span, 1}).code(),
              absl::StatusCode::kFailedPrecondition);
  });
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("rank 0"));
}

}  // namespace
}  // namespace trainyard::engine
