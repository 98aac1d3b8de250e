#include "sim/replay.h"

#include <limits>

#include "common/test_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/best_fit_policy.h"
#include "scheduler/first_fit_policy.h"

namespace trainyard::sim {
namespace {

using ::testing::DoubleNear;

constexpr char kHeader[] =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n";

std::vector<scheduler::WorkerCapacity> OneGpu() {
  TestDir dir;
  auto nodes = LoadOpenbNodes(dir.Write(
      "n.csv", "sn,cpu_milli,memory_mib,gpu,model\na,8000,8192,1,T4\n"));
  EXPECT_TRUE(nodes.ok()) << nodes.status();
  return *nodes;
}

std::vector<TracePod> Pods(const std::string& rows) {
  TestDir dir;
  auto pods = LoadOpenbPods(dir.Write("p.csv", kHeader + rows));
  EXPECT_TRUE(pods.ok()) << pods.status();
  return *pods;
}

// Two half-GPU pods of 100 s at t=0 share the GPU under best-fit; under
// exclusive first-fit the second waits 100 s.
TEST(ReplayTest, QueuesWhatDoesNotFitAndMeasuresWaits) {
  std::vector<TracePod> pods = Pods(
      "a,1000,1024,1,500,,LS,Succeeded,0,100,0\n"
      "b,1000,1024,1,500,,LS,Succeeded,0,100,0\n"
      "never,1000,1024,1,500,,LS,Pending,0,100,\n");
  auto ff = RunReplay(OneGpu(), pods, scheduler::FirstFitPolicy());
  ASSERT_TRUE(ff.ok()) << ff.status();
  EXPECT_EQ(ff->jobs, 2);
  EXPECT_THAT(ff->mean_wait_s, DoubleNear(50, 1e-9));
  EXPECT_THAT(ff->mean_jct_s, DoubleNear(150, 1e-9));
  EXPECT_EQ(ff->makespan_s, 200);
  EXPECT_THAT(ff->mean_allocated_share, DoubleNear(0.5, 1e-9));
  auto bf = RunReplay(OneGpu(), pods, scheduler::BestFitPolicy());
  ASSERT_TRUE(bf.ok()) << bf.status();
  EXPECT_THAT(bf->mean_wait_s, DoubleNear(0, 1e-9));
  EXPECT_EQ(bf->makespan_s, 100);
  EXPECT_THAT(bf->mean_allocated_share, DoubleNear(1.0, 1e-9));
}

// A T4 node and a V100 node: the two pods asking a V100 take turns on it
// although the T4 is idle, and the pod asking an A10 can never run.
TEST(ReplayTest, PodsGoOnlyToNodesOfTheirGpuSpec) {
  TestDir dir;
  auto nodes =
      LoadOpenbNodes(dir.Write("n.csv",
                               "sn,cpu_milli,memory_mib,gpu,model\n"
                               "t,8000,8192,1,T4\nv,8000,8192,1,V100M16\n"));
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  std::vector<TracePod> pods = Pods(
      "a,1000,1024,1,1000,V100M16|V100M32,LS,Succeeded,0,100,0\n"
      "b,1000,1024,1,1000,V100M16,LS,Succeeded,0,100,0\n"
      "c,1000,1024,1,1000,A10,LS,Succeeded,0,100,0\n");
  for (bool exclusive : {true, false}) {
    auto r = exclusive ? RunReplay(*nodes, pods, scheduler::FirstFitPolicy())
                       : RunReplay(*nodes, pods, scheduler::BestFitPolicy());
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->jobs, 3);
    EXPECT_EQ(r->infeasible, 1);
    EXPECT_THAT(r->mean_wait_s, DoubleNear(50, 1e-9));
    EXPECT_EQ(r->makespan_s, 200);
  }
}

TEST(ReplayTest, DropsPodsThatCanNeverFit) {
  std::vector<TracePod> pods = Pods(
      "big,1000,1024,2,1000,,LS,Succeeded,0,100,0\n"
      "ok,1000,1024,1,1000,,LS,Succeeded,5,10,5\n");
  auto r = RunReplay(OneGpu(), pods, scheduler::BestFitPolicy(),
                     {.sample_every_s = 1});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->infeasible, 1);
  EXPECT_EQ(r->never_started, 0);
  EXPECT_FALSE(r->samples.empty());
}

TEST(ReplayTest, RejectsUnusableInput) {
  scheduler::BestFitPolicy bf;
  EXPECT_FALSE(RunReplay({}, Pods("a,1,1,1,500,,LS,Running,0,9,0\n"), bf).ok());
  EXPECT_FALSE(
      RunReplay(OneGpu(), Pods("a,1,1,1,500,,LS,Pending,0,9,\n"), bf).ok());
  EXPECT_FALSE(RunReplay(OneGpu(), Pods("a,1,1,1,500,,LS,Running,0,9,0\n"), bf,
                         {.sample_every_s = 0})
                   .ok());
}

TEST(ReplayTest, PercentileInterpolatesBetweenClosestRanks) {
  EXPECT_EQ(Percentile({}, 0.99), 0);
  for (double p : {0.0, 0.5, 0.99, 1.0}) EXPECT_EQ(Percentile({7}, p), 7);
  // Sorted: 0, 0, 10, 190 (numpy.percentile's default, "linear").
  const std::vector<double> waits = {0, 190, 0, 10};
  EXPECT_DOUBLE_EQ(Percentile(waits, 0), 0);
  EXPECT_DOUBLE_EQ(Percentile(waits, 0.5), 5);       // rank 1.5
  EXPECT_DOUBLE_EQ(Percentile(waits, 0.99), 184.6);  // rank 2.97
  EXPECT_DOUBLE_EQ(Percentile(waits, 1), 190);
}

// One 8-GPU node; A, D1 and D2 ask 4 GPUs, C all 8. C waits while A, then
// D1 and D2 hold half the node: waits A 0, C 190, D1 0, D2 10. With so few
// jobs p99 lies between the two largest waits (184.6), not at the second
// largest (10).
TEST(ReplayTest, P99WaitOfAFewJobsInterpolatesTowardTheMax) {
  TestDir dir;
  auto nodes = LoadOpenbNodes(dir.Write(
      "n.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,G2\n"));
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  std::vector<TracePod> pods = Pods(
      "A,1000,1024,4,1000,,LS,Running,0,100,0\n"
      "C,1000,1024,8,1000,,LS,Running,10,60,10\n"
      "D1,1000,1024,4,1000,,LS,Running,20,120,20\n"
      "D2,1000,1024,4,1000,,LS,Running,90,190,90\n");
  auto r = RunReplay(*nodes, pods, scheduler::FirstFitPolicy());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->mean_wait_s, DoubleNear((0 + 190 + 0 + 10) / 4.0, 1e-9));
  EXPECT_THAT(r->p99_wait_s, DoubleNear(184.6, 1e-9));
}

// A pod that runs for ~116 days, sampled every second: without a bound
// that is 10 million samples; the interval doubles instead.
TEST(ReplayTest, SamplesStayBoundedHoweverLongTheReplay) {
  std::vector<TracePod> pods =
      Pods("long,1000,1024,1,1000,,LS,Running,0,10000000,0\n");
  auto r = RunReplay(OneGpu(), pods, scheduler::BestFitPolicy(),
                     {.sample_every_s = 1, .max_samples = 1000});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_LE(r->samples.size(), 1000u);
  EXPECT_GT(r->samples.size(), 500u);
  EXPECT_EQ(r->sample_every_s, 16384);  // 2^14: 611 samples up to 10^7
  for (size_t i = 0; i < r->samples.size(); ++i) {
    EXPECT_EQ(r->samples[i].time_s, static_cast<int64_t>(i) * 16384);
  }
  EXPECT_FALSE(
      RunReplay(OneGpu(), pods, scheduler::BestFitPolicy(), {.max_samples = 1})
          .ok());
}

TEST(ReplayTest, RefusesTimesBeyondTheBound) {
  std::vector<TracePod> pods = Pods("a,1000,1024,1,1000,,LS,Running,0,100,0\n");
  pods[0].deletion_time = std::numeric_limits<int64_t>::max();
  auto r = RunReplay(OneGpu(), pods, scheduler::BestFitPolicy());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("pod a"));
}

}  // namespace
}  // namespace trainyard::sim
