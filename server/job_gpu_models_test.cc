// Jobs naming GPU models (resources.gpu_models) against workers reporting
// mixed GPU names: the server passes both to the scheduler, so a job runs
// only on GPUs of its models, and one whose models no worker has waits in
// the queue with a reason naming them.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/job_lifecycle.h"
#include "server/server_test_fixture.h"

namespace trainyard::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kH100[] = "NVIDIA H100 80GB HBM3";
constexpr char kA100[] = "NVIDIA A100-SXM4-40GB";

class JobGpuModelsTest : public ServerLogicTest {
 protected:
  // A worker whose GPU i reports names[i].
  FakeWorker& ConnectNamed(const std::string& id,
                           const std::vector<std::string>& names) {
    v1::WorkerHello hello;
    hello.set_cpu_slots(1);
    for (size_t g = 0; g < names.size(); ++g) {
      v1::Device* d = hello.add_devices();
      d->set_index(static_cast<int32_t>(g));
      d->set_name(names[g]);
    }
    return ConnectWith(id, std::move(hello));
  }

  std::string SubmitWanting(int32_t gpus,
                            const std::vector<std::string>& models) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec(0, gpus);
    for (const std::string& m : models) {
      req.mutable_spec()->mutable_resources()->add_gpu_models(m);
    }
    auto r = lifecycle_->Submit(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->job.id() : "";
  }
};

TEST_F(JobGpuModelsTest, RunsOnlyOnWorkersWithItsModels) {
  FakeWorker& a = ConnectNamed("a", {kA100, kA100});
  FakeWorker& h = ConnectNamed("h", {kH100, kH100});
  const std::string on_h = SubmitWanting(2, {"h100"});
  Pass();
  EXPECT_TRUE(a.Assignments().empty());
  auto sent = h.Assignments();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].job_id(), on_h);
  const std::string on_a = SubmitWanting(1, {"B200", "A100"});
  Pass();
  sent = a.Assignments();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].job_id(), on_a);
}

TEST_F(JobGpuModelsTest, TakesOnlyTheMatchingGpusOfAMixedWorker) {
  FakeWorker& w = ConnectNamed("w", {kA100, kH100, kA100, kH100});
  SubmitWanting(2, {"H100"});
  Pass();
  auto sent = w.Assignments();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_THAT(sent[0].gpu_indices(), ElementsAre(1, 3));
}

TEST_F(JobGpuModelsTest, ModelsNoWorkerHasWaitQueuedNamingThem) {
  FakeWorker& w = ConnectNamed("w", {kA100, kA100});
  const std::string id = SubmitWanting(1, {"H100"});
  Pass();
  EXPECT_TRUE(w.Assignments().empty());
  JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::QUEUED);
  EXPECT_EQ(r.job.state_reason(),
            "infeasible: no connected worker has a GPU of model \"H100\" "
            "(GPUs here: \"NVIDIA A100-SXM4-40GB\")");
  // An H100 worker joining is enough.
  FakeWorker& h = ConnectNamed("h", {kH100});
  Pass();
  auto sent = h.Assignments();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].job_id(), id);
}

TEST_F(JobGpuModelsTest, SubmitRefusesModelsOnACpuJob) {
  v1::SubmitJobRequest req;
  *req.mutable_spec() = Spec(0, 0);
  req.mutable_spec()->mutable_resources()->add_gpu_models("H100");
  auto r = lifecycle_->Submit(req);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("resources.gpu_models: needs a GPU"));
}

}  // namespace
}  // namespace trainyard::server
