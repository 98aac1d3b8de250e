#include "sim/replay.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/best_fit_policy.h"
#include "scheduler/first_fit_policy.h"
#include "sim/test_files.h"

namespace trainyard::sim {
namespace {

using ::testing::DoubleNear;
using testing::TempDir;

constexpr char kHeader[] =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n";

std::vector<scheduler::WorkerCapacity> OneGpu() {
  TempDir dir;
  auto nodes = LoadOpenbNodes(dir.Write(
      "n.csv", "sn,cpu_milli,memory_mib,gpu,model\na,8000,8192,1,T4\n"));
  EXPECT_TRUE(nodes.ok()) << nodes.status();
  return *nodes;
}

std::vector<TracePod> Pods(const std::string& rows) {
  TempDir dir;
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

}  // namespace
}  // namespace trainyard::sim
