// GPU sharing, end to end on a machine without a GPU: a yard-worker finds
// one "H100" through a test double of the driver's NVML library and an
// NVIDIA MPS control pipe, the packing policy puts four quarter-GPU jobs on
// it at once, the worker runs them side by side and hands each its memory
// grant, and a fifth job waits until compute frees up. Without MPS the
// jobs would be time-sliced, so each takes the GPU whole unless the server
// is told to share such GPUs too. The jobs' trainer is a script (it only has to
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

class GpuSharingTest : public ClusterTest {
 protected:
  // A best-fit server (with `server_args`) and a worker with one fake
  // H100, under MPS or not, whose jobs run Trainer() until ReleaseAndWait().
  absl::Status StartGpuCluster(std::vector<std::string> server_args, bool mps) {
    server_args.insert(server_args.begin(), {"--policy", "best-fit"});
    if (absl::Status s = StartServer({.extra_args = server_args}); !s.ok()) {
      return s;
    }
    const std::string script =
        dir().WriteFile("script-train.sh", Trainer(dir().path() + "/release"),
                        /*executable=*/true);
    const std::string driver = dir().Subdir("driver");
    std::filesystem::create_symlink(FAKE_NVML_PATH,
                                    driver + "/libnvidia-ml.so.1");
    return StartReadyWorker({.name = "gpu-node",
                             .train_bin = script,
                             .extra_args = {"--gpus", "auto"},
                             .env = {{"LD_LIBRARY_PATH", driver},
                                     {"FAKE_NVML_DEVICE_COUNT", "1"}},
                             .mps = mps})
        .status();
  }

  // Lets the running jobs finish and waits for each of `ids` to end,
  // expecting SUCCEEDED; the ended jobs.
  absl::StatusOr<std::vector<v1::Job>> ReleaseAndWait(
      const std::vector<std::string>& ids) {
    dir().WriteFile("release", "");
    std::vector<v1::Job> done;
    for (const std::string& id : ids) {
      absl::StatusOr<v1::Job> j = WaitForTerminal(jobs(), id, JobTimeout());
      if (!j.ok()) return j.status();
      EXPECT_EQ(j->state(), v1::SUCCEEDED) << j->DebugString();
      done.push_back(*std::move(j));
    }
    return done;
  }

  // Submits `n` quarter-GPU jobs; their ids.
  absl::StatusOr<std::vector<std::string>> SubmitQuarterJobs(int n);

  // Polls until `running` of `ids` run and every other one waits with a
  // reason (written at the end of the pass that placed the others, or in
  // a later one, which may be after they started).
  absl::Status AwaitRunning(const std::vector<std::string>& ids, int running);
};

absl::StatusOr<std::vector<std::string>> GpuSharingTest::SubmitQuarterJobs(
    int n) {
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<v1::SubmitJobResponse> r = Submit(QuarterGpuJob(i));
    if (!r.ok()) return r.status();
    ids.push_back(r->job().id());
  }
  return ids;
}

absl::Status GpuSharingTest::AwaitRunning(const std::vector<std::string>& ids,
                                          int running) {
  return PollUntil(absl::StrCat(running, " of ", ids.size(),
                                " jobs running, the others told why they wait"),
                   JobTimeout(), [&] {
                     int now = 0;
                     bool told = true;
                     for (const std::string& id : ids) {
                       absl::StatusOr<v1::Job> j = GetJob(jobs(), id);
                       if (!j.ok()) return false;
                       now += j->state() == v1::RUNNING;
                       told = told && (j->state() == v1::RUNNING ||
                                       (j->state() == v1::QUEUED &&
                                        !j->state_reason().empty()));
                     }
                     return now == running && told;
                   });
}

TEST_F(GpuSharingTest, FourQuarterJobsShareOneGpuAndAFifthWaits) {
  YARD_ASSERT_OK(StartGpuCluster({}, /*mps=*/true));
  YARD_ASSIGN_OR_FAIL(const std::vector<std::string> ids, SubmitQuarterJobs(5));
  // Four run at once on GPU 0; the fifth waits for compute.
  YARD_ASSERT_OK(AwaitRunning(ids, 4));
  CommandResult workers = Yard({"-o", "json", "workers"});
  ASSERT_EQ(workers.exit_code(), 0) << workers.DebugString();
  EXPECT_THAT(workers.out, HasSubstr("\"mps\": true"));
  CommandResult table = Yard({"workers"});
  ASSERT_EQ(table.exit_code(), 0) << table.DebugString();
  EXPECT_THAT(table.out, HasSubstr(" 0/1 MPS ")) << table.out;
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
  YARD_ASSIGN_OR_FAIL(const std::vector<v1::Job> ended, ReleaseAndWait(ids));
  for (const v1::Job& done : ended) {
    EXPECT_EQ(done.attempts_size(), 1) << done.DebugString();
    CommandResult logs = Yard({"logs", done.id()});
    ASSERT_EQ(logs.exit_code(), 0) << logs.DebugString();
    // GPU 0 by its UUID: an MPS server would renumber an index.
    EXPECT_THAT(logs.out, HasSubstr("grant: gpus=[GPU-a0a0a0a0-0000-4000-8000-"
                                    "000000000000] memory=["))
        << logs.out;
    EXPECT_THAT(logs.out, Not(HasSubstr("memory=[]"))) << logs.out;
  }
}

// Without MPS the jobs sharing a GPU would be time-sliced (slower together
// than one after another): each job takes the GPU whole, in turn.
TEST_F(GpuSharingTest, WithoutMpsEachJobTakesTheGpuWhole) {
  YARD_ASSERT_OK(StartGpuCluster({}, /*mps=*/false));
  YARD_ASSIGN_OR_FAIL(const std::vector<std::string> ids, SubmitQuarterJobs(2));
  YARD_ASSERT_OK(AwaitRunning(ids, 1));
  for (const std::string& id : ids) {
    YARD_ASSIGN_OR_FAIL(v1::Job j, GetJob(jobs(), id));
    if (j.state() == v1::RUNNING) {
      EXPECT_EQ(j.gpu_grants_size(), 0) << "held whole: " << j.DebugString();
    } else {
      EXPECT_THAT(j.state_reason(), HasSubstr("or is not shared"))
          << j.DebugString();
    }
  }
  CommandResult workers = Yard({"-o", "json", "workers"});
  ASSERT_EQ(workers.exit_code(), 0) << workers.DebugString();
  EXPECT_THAT(workers.out, HasSubstr("\"mps\": false"));
  EXPECT_THAT(workers.out, Not(HasSubstr("\"mps\": true")));
  YARD_ASSERT_OK(ReleaseAndWait(ids).status());
}

// --share-gpus always: the operator takes time-slicing for the wait saved.
TEST_F(GpuSharingTest, ShareGpusAlwaysSharesAGpuWithoutMps) {
  YARD_ASSERT_OK(StartGpuCluster({"--share-gpus", "always"}, /*mps=*/false));
  YARD_ASSIGN_OR_FAIL(const std::vector<std::string> ids, SubmitQuarterJobs(2));
  YARD_ASSERT_OK(AwaitRunning(ids, 2));
  for (const std::string& id : ids) {
    YARD_ASSIGN_OR_FAIL(v1::Job j, GetJob(jobs(), id));
    ASSERT_EQ(j.gpu_grants_size(), 1) << j.DebugString();
    EXPECT_TRUE(j.gpu_grants(0).shared());
  }
  YARD_ASSERT_OK(ReleaseAndWait(ids).status());
}

}  // namespace
}  // namespace trainyard::itest
