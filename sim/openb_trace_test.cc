#include "sim/openb_trace.h"

#include <unistd.h>

#include "common/test_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/gpu_models.h"

namespace trainyard::sim {
namespace {

using ::testing::HasSubstr;

TEST(OpenbTraceTest, ReadsNodes) {
  TestDir dir;
  auto nodes =
      LoadOpenbNodes(dir.Write("n.csv",
                               "sn,cpu_milli,memory_mib,gpu,model\n"
                               "a,64000,262144,2,V100M32\nb,8000,1024,0,\n"));
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 2u);
  const scheduler::WorkerCapacity& a = (*nodes)[0];
  EXPECT_EQ(a.id, "a");
  EXPECT_EQ(a.free_cpu_milli, 64000);
  EXPECT_EQ(a.free_memory_bytes, int64_t{262144} << 20);
  ASSERT_EQ(a.devices.size(), 2u);
  EXPECT_EQ(a.devices[1].memory_bytes, int64_t{32} << 30);
  EXPECT_TRUE(a.devices[1].wholly_free());
  EXPECT_TRUE((*nodes)[1].devices.empty());
}

TEST(OpenbTraceTest, ReadsPodsWithAndWithoutTimes) {
  TestDir dir;
  auto pods = LoadOpenbPods(dir.Write(
      "p.csv",
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
      "creation_time,deletion_time,scheduled_time\n"
      "p0,6000,12288,1,460,,LS,Running,5,100,7\n"
      "p1,12000,16384,2,1000,,LS,Running,6,50,6\n"
      "p2,4000,1024,0,0,,BE,Failed,8,9,8\n"
      "p3,4000,1024,1,1000,,BE,Pending,8,9,\n"));
  ASSERT_TRUE(pods.ok()) << pods.status();
  ASSERT_EQ(pods->size(), 4u);
  EXPECT_EQ((*pods)[3].scheduled_time, -1);
  const scheduler::PendingJob& share = (*pods)[0].shape;
  EXPECT_EQ(share.gpus, 1);
  EXPECT_EQ(share.gpu_compute_milli, 460);
  EXPECT_EQ(share.gpu_memory_bytes, PodGpuMemoryBytes(460));
  EXPECT_FALSE(share.whole_gpus());
  EXPECT_TRUE((*pods)[1].shape.whole_gpus());
  EXPECT_EQ((*pods)[0].creation_time, 5);
  EXPECT_EQ((*pods)[0].scheduled_time, 7);
  EXPECT_EQ((*pods)[2].shape.gpus, 0);
  auto short_form = LoadOpenbPods(dir.Write(
      "m.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nq,1,1,8,1000\n"));
  ASSERT_TRUE(short_form.ok()) << short_form.status();
  EXPECT_EQ((*short_form)[0].creation_time, -1);
}

TEST(OpenbTraceTest, BadInputNamesFileAndLine) {
  TestDir dir;
  auto bad_number = LoadOpenbPods(dir.Write(
      "p.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nq,x,1,1,10\n"));
  ASSERT_FALSE(bad_number.ok());
  EXPECT_THAT(bad_number.status().message(), HasSubstr("p.csv:2"));
  EXPECT_THAT(bad_number.status().message(), HasSubstr("cpu_milli"));
  auto too_few = LoadOpenbNodes(
      dir.Write("n.csv", "sn,cpu_milli,memory_mib,gpu,model\na,1,2\n"));
  ASSERT_FALSE(too_few.ok());
  EXPECT_THAT(too_few.status().message(), HasSubstr("n.csv:2"));
  auto share_over = LoadOpenbPods(dir.Write(
      "s.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nq,1,1,1,2000\n"));
  EXPECT_FALSE(share_over.ok());
  auto negative = LoadOpenbPods(dir.Write(
      "g.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nq,1,1,-1,0\n"));
  EXPECT_FALSE(negative.ok());
  EXPECT_EQ(LoadOpenbNodes(dir.path() + "/missing.csv").status().code(),
            absl::StatusCode::kNotFound);
}

constexpr char kPodHeader[] =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n";
constexpr char kNodeHeader[] = "sn,cpu_milli,memory_mib,gpu,model\n";

std::string PodError(const TestDir& dir, const std::string& text) {
  return std::string(
      LoadOpenbPods(dir.Write("p.csv", text)).status().message());
}

std::string NodeError(const TestDir& dir, const std::string& text) {
  return std::string(
      LoadOpenbNodes(dir.Write("n.csv", text)).status().message());
}

TEST(OpenbTraceTest, HeaderMustNameTheTraceColumnsInOrder) {
  TestDir dir;
  const std::string p = dir.path() + "/p.csv";
  const std::string n = dir.path() + "/n.csv";
  EXPECT_EQ(PodError(dir,
                     "name,num_gpu,gpu_milli,cpu_milli,memory_mib\n"
                     "A,1,1000,4000,1024\n"),
            p + ":1: column 2 is \"num_gpu\", expected \"cpu_milli\"");
  EXPECT_EQ(NodeError(dir, "sn,memory_mib,cpu_milli,gpu,model\na,1,1,1,T4\n"),
            n + ":1: column 2 is \"memory_mib\", expected \"cpu_milli\"");
  EXPECT_EQ(PodError(dir,
                     "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
                     "A,1,1,1,1000,\n"),
            p + ":1: column 7 \"qos\" is missing");
  EXPECT_EQ(NodeError(dir, "sn,cpu_milli,memory_mib,gpu,model,rack\n"),
            n + ":1: column 6 \"rack\" is one too many (expected "
                "sn,cpu_milli,memory_mib,gpu,model)");
}

TEST(OpenbTraceTest, RowsMustHaveAsManyFieldsAsTheHeader) {
  TestDir dir;
  EXPECT_EQ(PodError(dir, std::string(kPodHeader) +
                              "A,1000,1024,1,1000,,LS,Running,0,100\n"),
            dir.path() + "/p.csv:2: expected 11 fields, got 10");
  EXPECT_EQ(PodError(dir,
                     "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                     "A,1,1,1,1000\nB,1,1,1,1000,\n"),
            dir.path() + "/p.csv:3: expected 5 fields, got 6");
  EXPECT_EQ(NodeError(dir, std::string(kNodeHeader) + "a,1,1,1\n"),
            dir.path() + "/n.csv:2: expected 5 fields, got 4");
}

TEST(OpenbTraceTest, RepeatedPodNamesAndNodeIdsAreErrors) {
  TestDir dir;
  EXPECT_EQ(PodError(dir, std::string(kPodHeader) +
                              "A,1,1,1,1000,,LS,Running,0,100,0\n"
                              "B,1,1,1,1000,,LS,Running,0,100,0\n"
                              "A,1,1,1,1000,,LS,Running,0,100,0\n"),
            dir.path() + "/p.csv:4: name \"A\" repeats the one on line 2");
  EXPECT_EQ(NodeError(dir, std::string(kNodeHeader) + "n0,1,1,1,T4\n"
                                                      "n0,1,1,1,T4\n"),
            dir.path() + "/n.csv:3: sn \"n0\" repeats the one on line 2");
  EXPECT_EQ(NodeError(dir, std::string(kNodeHeader) + ",1,1,1,T4\n"),
            dir.path() + "/n.csv:2: sn is empty");
}

TEST(OpenbTraceTest, EveryNumericFieldIsBounded) {
  TestDir dir;
  const std::string p = dir.path() + "/p.csv:2: ";
  const std::string n = dir.path() + "/n.csv:2: ";
  // 2^44 MiB once wrapped to 0 bytes and the pod was placed.
  EXPECT_EQ(PodError(dir, std::string(kPodHeader) +
                              "A,1,17592186044416,1,1000,,LS,R,0,100,0\n"),
            p + "memory_mib 17592186044416 is out of range [0, 16777216]");
  EXPECT_EQ(PodError(dir, std::string(kPodHeader) +
                              "A,1,9000000000000000,1,1000,,LS,R,0,100,0\n"),
            p + "memory_mib 9000000000000000 is out of range [0, 16777216]");
  EXPECT_EQ(
      NodeError(dir, std::string(kNodeHeader) + "a,1,17592186044416,1,\n"),
      n + "memory_mib 17592186044416 is out of range [0, 16777216]");
  EXPECT_EQ(NodeError(dir, std::string(kNodeHeader) + "a,10000001,1,1,\n"),
            n + "cpu_milli 10000001 is out of range [0, 10000000]");
  EXPECT_EQ(NodeError(dir, std::string(kNodeHeader) + "a,1,1,65,\n"),
            n + "gpu 65 is out of range [0, 64]");
  EXPECT_EQ(
      PodError(dir, std::string(kPodHeader) + "A,1,1,1,1001,,LS,R,0,100,0\n"),
      p + "gpu_milli 1001 is out of range [0, 1000]");
  EXPECT_EQ(PodError(dir, std::string(kPodHeader) +
                              "A,1,1,1,1000,,LS,R,0,9223372036854775807,0\n"),
            p + "deletion_time 9223372036854775807 is out of range [0, "
                "315360000]");
  EXPECT_EQ(
      PodError(dir, std::string(kPodHeader) + "A,1,1,1,1000,,LS,R,-1,100,0\n"),
      p + "creation_time -1 is out of range [0, 315360000]");
  EXPECT_EQ(PodError(dir, std::string(kPodHeader) +
                              "A,1,1,1,1000,,LS,R,0,100,1e10\n"),
            p + "scheduled_time \"1e10\" is not an integer");
  auto at_bounds = LoadOpenbPods(dir.Write(
      "b.csv", std::string(kPodHeader) +
                   "A,10000000,16777216,64,1000,,LS,R,0,315360000,0\n"));
  ASSERT_TRUE(at_bounds.ok()) << at_bounds.status();
  EXPECT_EQ((*at_bounds)[0].shape.memory_bytes, int64_t{1} << 44);
}

TEST(OpenbTraceTest, GpuSpecBecomesWorkerGpuNames) {
  TestDir dir;
  auto pods = LoadOpenbPods(dir.Write(
      "p.csv", std::string(kPodHeader) +
                   "A,1,1,1,1000,V100M16|V100M32|V100M32,LS,R,0,100,0\n"
                   "B,1,1,1,1000,,LS,R,0,100,0\n"
                   "C,1,1,1,500,G2|X9,LS,R,0,100,0\n"));
  ASSERT_TRUE(pods.ok()) << pods.status();
  EXPECT_EQ((*pods)[0].gpu_spec, "V100M16|V100M32|V100M32");
  EXPECT_EQ((*pods)[0].shape.gpu_models,
            (std::vector<std::string>{"Tesla V100-SXM2-16GB",
                                      "Tesla V100-SXM2-32GB"}));
  EXPECT_TRUE((*pods)[1].shape.gpu_models.empty());
  EXPECT_EQ((*pods)[2].shape.gpu_models,
            (std::vector<std::string>{"Alibaba G2", "X9"}));
  EXPECT_EQ(CountGpuSpecPods(*pods), 2);

  auto empty = LoadOpenbPods(dir.Write(
      "e.csv", std::string(kPodHeader) + "A,1,1,1,1000,T4||P100,LS,R,0,1,0\n"));
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(std::string(empty.status().message()),
              HasSubstr("gpu_spec \"T4||P100\" has an empty model"));
}

// Every model of the trace's node list gets a name no other one's contains,
// so a gpu_spec entry matches only nodes of its own model.
TEST(OpenbTraceTest, NodesGpusCarryTheirModelsName) {
  TestDir dir;
  auto nodes = LoadOpenbNodes(
      dir.Write("n.csv",
                "sn,cpu_milli,memory_mib,gpu,model\na,8000,8192,2,P100\n"
                "b,8000,8192,0,\n"));
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ((*nodes)[0].devices.size(), 2u);
  EXPECT_EQ((*nodes)[0].GpuName((*nodes)[0].devices[1]),
            "Tesla P100-PCIE-16GB");
  const std::vector<std::string> models = {"A10",     "T4", "P100", "V100M16",
                                           "V100M32", "G1", "G2",   "G3"};
  for (const std::string& a : models) {
    for (const std::string& b : models) {
      EXPECT_EQ(scheduler::AllowsGpu({WorkerGpuNameOf(a)}, WorkerGpuNameOf(b)),
                a == b)
          << a << " vs " << b;
    }
  }
}

}  // namespace
}  // namespace trainyard::sim
