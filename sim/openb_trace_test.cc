#include "sim/openb_trace.h"

#include <unistd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/test_files.h"

namespace trainyard::sim {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

TEST(OpenbTraceTest, ReadsNodes) {
  TempDir dir;
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
  TempDir dir;
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
  TempDir dir;
  auto bad_number = LoadOpenbPods(dir.Write(
      "p.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nq,x,1,1,10\n"));
  ASSERT_FALSE(bad_number.ok());
  EXPECT_THAT(bad_number.status().message(), HasSubstr("p.csv:2"));
  EXPECT_THAT(bad_number.status().message(), HasSubstr("cpu_milli"));
  auto too_few = LoadOpenbNodes(dir.Write("n.csv", "h\na,1,2\n"));
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

}  // namespace
}  // namespace trainyard::sim
