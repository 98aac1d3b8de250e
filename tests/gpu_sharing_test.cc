// GPU sharing, end to end on a machine without a GPU: a yard-worker finds
// one "H100" through a test double of the driver's NVML library, the
// packing policy puts four quarter-GPU jobs on it at once, the worker runs
// them side by side and hands each its memory grant, and a fifth job waits
// until compute frees up. The jobs' trainer is a script (it only has to
// show what it was given); emulated_gpu_jobs_test runs the real engine on
// such a grant (over the CUDA host emulation), the `gpu` tests on a GPU.
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/harness.h"

namespace trainyard::itest {
namespace {
namespace v1 = trainyard::v1;

using ::testing::HasSubstr;
using ::testing::Not;

class GpuSharingTest : public ClusterTest {};

// Runs until the test creates `release` (at most 60 s), so the jobs are
// still running whenever the test looks, however loaded the machine.
std::string Trainer(const std::string& release) {
  return absl::StrCat(R"SH(#!/bin/sh
echo "grant: gpus=[$CUDA_VISIBLE_DEVICES] memory=[$YARD_GPU_MEMORY_BYTES]" >&2
echo '{"started":{"totalSteps":"10","backend":"script"}}'
i=0
while [ ! -e ')SH",
                      release, R"SH(' ] && [ $i -lt 600 ]; do
  sleep 0.1
  i=$((i + 1))
done
echo '{"finished":{"step":"10","evalAccuracy":0.9}}'
)SH");
}

v1::JobSpec QuarterGpuJob(int i) {
  v1::JobSpec spec = MnistSpec{.name = absl::StrCat("quarter-", i)}.ToProto();
  spec.mutable_resources()->set_gpus(1);
  spec.mutable_resources()->set_gpu_compute_milli(250);
  return spec;
}

TEST_F(GpuSharingTest, FourQuarterJobsShareOneGpuAndAFifthWaits) {
  YARD_ASSERT_OK(StartServer({.extra_args = {"--policy", "best-fit"}}));
  const std::string driver = dir().Subdir("driver");
  std::filesystem::create_symlink(FAKE_NVML_PATH,
                                  driver + "/libnvidia-ml.so.1");
  const std::string release = dir().path() + "/release";
  const std::string script =
      dir().WriteFile("script-train.sh", Trainer(release), /*executable=*/true);
  YARD_ASSERT_OK(StartReadyWorker({.name = "gpu-node",
                                   .train_bin = script,
                                   .extra_args = {"--gpus", "auto"},
                                   .env = {{"LD_LIBRARY_PATH", driver},
                                           {"FAKE_NVML_DEVICE_COUNT", "1"}}})
                     .status());
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse r, Submit(QuarterGpuJob(i)));
    ids.push_back(r.job().id());
  }
  // Four run at once on GPU 0; the fifth waits for compute. Its wait
  // reason is written after the four are placed (at the end of that
  // scheduling pass, or in a later one), which may be after they started.
  YARD_ASSERT_OK(PollUntil(
      "four jobs running side by side, the fifth told why it waits",
      JobTimeout(), [&] {
        int running = 0;
        bool told = false;
        for (const std::string& id : ids) {
          absl::StatusOr<v1::Job> j = GetJob(jobs(), id);
          if (!j.ok()) return false;
          running += j->state() == v1::RUNNING;
          told = told ||
                 (j->state() == v1::QUEUED && !j->state_reason().empty());
        }
        return running == 4 && told;
      }));
  int waiting = 0;
  for (const std::string& id : ids) {
    YARD_ASSIGN_OR_FAIL(v1::Job j, GetJob(jobs(), id));
    if (j.state() != v1::RUNNING) {
      ++waiting;
      EXPECT_EQ(j.state(), v1::QUEUED) << j.DebugString();
      EXPECT_THAT(j.state_reason(), HasSubstr("GPU")) << j.DebugString();
      continue;
    }
    ASSERT_EQ(j.gpu_grants_size(), 1) << j.DebugString();
    EXPECT_EQ(j.gpu_grants(0).index(), 0);
    EXPECT_TRUE(j.gpu_grants(0).shared());
    EXPECT_EQ(j.gpu_grants(0).compute_milli(), 250);
    EXPECT_GT(j.gpu_grants(0).memory_bytes(), 0);
  }
  EXPECT_EQ(waiting, 1);
  // The four finish; the fifth then runs (and finishes at once).
  dir().WriteFile("release", "");

  for (const std::string& id : ids) {
    YARD_ASSIGN_OR_FAIL(v1::Job done,
                        WaitForTerminal(jobs(), id, JobTimeout()));
    EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.DebugString();
    EXPECT_EQ(done.attempts_size(), 1) << done.DebugString();
    CommandResult logs = Yard({"logs", id});
    ASSERT_EQ(logs.exit_code(), 0) << logs.DebugString();
    // GPU 0 by its UUID: an MPS server would renumber an index.
    EXPECT_THAT(logs.out, HasSubstr("grant: gpus=[GPU-a0a0a0a0-0000-4000-8000-"
                                    "000000000000] memory=["))
        << logs.out;
    EXPECT_THAT(logs.out, Not(HasSubstr("memory=[]"))) << logs.out;
  }
}

}  // namespace
}  // namespace trainyard::itest
