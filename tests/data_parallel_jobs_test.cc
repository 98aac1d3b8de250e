// Data-parallel jobs with real processes: a job of two CPU ranks runs as a
// gang on one worker and succeeds; a rank that dies takes the gang down at
// once and frees its slots; a job of more ranks than any worker has slots
// is marked unschedulable at once; a job whose ranks no single worker can
// hold spreads them over several, ending with the very weights of the same
// job on one worker, and dies everywhere when one of its ranks dies (rank 0
// blamed when it is the one), but moves when a worker is lost (rank 0's
// too).
#include <signal.h>

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/exact_resume.h"
#include "tests/harness.h"

namespace trainyard::itest {
namespace {
namespace v1 = trainyard::v1;

using ::testing::AnyOf;
using ::testing::HasSubstr;

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

class DataParallelTest : public ClusterTest {
 protected:
  // A server (`server`), two one-CPU-slot workers "a" and "b", and a long
  // two-rank job spread over them, run up to its first checkpoint. Returns
  // the job id.
  absl::StatusOr<std::string> StartSpreadJob(const std::string& name,
                                             int64_t steps,
                                             ServerOptions server = {}) {
    RETURN_IF_ERROR(StartServer(std::move(server)));
    ASSIGN_OR_RETURN(a_, StartReadyWorker({.name = "a", .cpu_slots = 1}));
    ASSIGN_OR_RETURN(b_, StartReadyWorker({.name = "b", .cpu_slots = 1}));
    ASSIGN_OR_RETURN(v1::SubmitJobResponse r, Submit(RanksJob(name, 2, steps)));
    RETURN_IF_ERROR(WaitForEvent(jobs(), r.job().id(), "CheckpointSaved",
                                 JobTimeout(), IsCheckpointSaved)
                        .status());
    return r.job().id();
  }

  // Kills the worker of `rank` of a long spread job (`name`): the job goes
  // back to the queue once the server finds that worker lost (a short lease:
  // within 1.5 s), spending no restart, whatever the other rank said first,
  // and resumes from its checkpoint on the worker left and a new one.
  void LosingTheWorkerOfRankRequeues(int rank, const std::string& name);

  WorkerProcess* a_ = nullptr;
  WorkerProcess* b_ = nullptr;
};

TEST_F(DataParallelTest, TwoRankJobRunsAsAGangAndSucceeds) {
  YARD_ASSERT_OK(StartServer());
  YARD_ASSIGN_OR_FAIL(WorkerProcess * worker,
                      StartReadyWorker({.name = "w", .cpu_slots = 2}));
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse r, Submit(RanksJob("dp2", 2, 200)));
  const std::string id = r.job().id();
  YARD_ASSERT_OK(PollUntil("both ranks to run", JobTimeout(), [&] {
    return worker->TrainerPidsByRank().size() == 2;
  }));
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
  KillRankOneAndExpectTheGangDown(*worker, r.job().id());
  if (HasFatalFailure()) return;

  // Both slots are free again: another two-rank job runs at once.
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse next,
                      Submit(RanksJob("dp-next", 2, 50)));
  YARD_ASSIGN_OR_FAIL(v1::Job ok,
                      WaitForTerminal(jobs(), next.job().id(), JobTimeout()));
  EXPECT_EQ(ok.state(), v1::SUCCEEDED) << ok.DebugString();
}

// Rank 0 of a job reports; the worker of `rank` of it (by command line).
WorkerProcess* WorkerOfRank(const std::vector<WorkerProcess*>& workers,
                            int rank, pid_t* pid) {
  for (WorkerProcess* w : workers) {
    std::map<int, pid_t> ranks = w->TrainerPidsByRank();
    if (auto it = ranks.find(rank); it != ranks.end()) {
      *pid = it->second;
      return w;
    }
  }
  return nullptr;
}

void DataParallelTest::LosingTheWorkerOfRankRequeues(int rank,
                                                     const std::string& name) {
  YARD_ASSIGN_OR_FAIL(
      const std::string id,
      StartSpreadJob(name, 400,
                     {.heartbeat_interval_ms = 300, .worker_lease_ms = 1500}));
  pid_t pid = 0;
  WorkerProcess* lost = WorkerOfRank({a_, b_}, rank, &pid);
  ASSERT_NE(lost, nullptr);
  lost->process().Kill();
  YARD_ASSERT_OK(WaitForEvent(jobs(), id, "back to the queue", JobTimeout(),
                              [](const v1::JobEvent& e) {
                                return e.has_state_change() &&
                                       e.state_change().to() == v1::QUEUED;
                              })
                     .status());
  YARD_ASSERT_OK(StartReadyWorker({.name = "c", .cpu_slots = 1}).status());
  YARD_ASSIGN_OR_FAIL(v1::Job job, WaitForTerminal(jobs(), id, JobTimeout()));
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.DebugString();
  ASSERT_EQ(job.attempts_size(), 2) << job.DebugString();
  EXPECT_EQ(job.attempts(0).outcome(), v1::QUEUED) << job.DebugString();
  EXPECT_THAT(job.attempts(0).reason(),
              HasSubstr(absl::StrCat("worker ", lost->name())));
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_GT(job.attempts(1).resumed_from_step(), 0) << job.DebugString();
}

TEST_F(DataParallelTest, RanksSpreadOverWorkersEndLikeOnOneWorker) {
  YARD_ASSERT_OK(StartServer());
  YARD_ASSIGN_OR_FAIL(WorkerProcess * a,
                      StartReadyWorker({.name = "a", .cpu_slots = 1}));
  YARD_ASSIGN_OR_FAIL(WorkerProcess * b,
                      StartReadyWorker({.name = "b", .cpu_slots = 1}));
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse r,
                      Submit(RanksJob("spread", 2, 120)));
  const std::string id = r.job().id();
  YARD_ASSERT_OK(PollUntil("a rank on each worker", JobTimeout(), [&] {
    return a->TrainerPidsByRank().size() == 1 &&
           b->TrainerPidsByRank().size() == 1;
  }));
  YARD_ASSIGN_OR_FAIL(v1::Job job, WaitForTerminal(jobs(), id, JobTimeout()));
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.DebugString();
  ASSERT_EQ(job.attempts_size(), 1);
  ASSERT_EQ(job.attempts(0).more_workers_size(), 1) << job.DebugString();
  EXPECT_NE(job.attempts(0).more_workers(0), job.attempts(0).worker_id());
  CommandResult get = Yard({"get", id});
  ASSERT_EQ(get.exit_code(), 0) << get.DebugString();
  EXPECT_THAT(get.out, AnyOf(HasSubstr("a+b"), HasSubstr("b+a"))) << get.out;
  CommandResult logs = Yard({"logs", id});
  EXPECT_THAT(logs.out, HasSubstr("[rank 1]")) << logs.out;

  // The same job with both ranks on one worker (max_nodes: 1 keeps it off
  // the one-slot workers) ends with the very same bytes: the ranks sum
  // their gradients in rank order wherever they run.
  YARD_ASSERT_OK(StartReadyWorker({.name = "c", .cpu_slots = 2}).status());
  v1::JobSpec together = RanksJob("spread", 2, 120);
  together.mutable_resources()->set_max_nodes(1);
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse r2, Submit(together));
  YARD_ASSIGN_OR_FAIL(v1::Job one,
                      WaitForTerminal(jobs(), r2.job().id(), JobTimeout()));
  ASSERT_EQ(one.state(), v1::SUCCEEDED) << one.DebugString();
  EXPECT_EQ(one.attempts(0).worker_id(), "c");
  EXPECT_EQ(one.attempts(0).more_workers_size(), 0);
  YARD_ASSIGN_OR_FAIL(std::string spread, FinalWeights(job.checkpoint_dir()));
  YARD_ASSIGN_OR_FAIL(std::string single, FinalWeights(one.checkpoint_dir()));
  EXPECT_TRUE(spread == single)
      << "ranks spread over workers ended with other weights";
}

TEST_F(DataParallelTest, ARankDyingOnOneWorkerStopsTheJobOnAll) {
  YARD_ASSIGN_OR_FAIL(const std::string id,
                      StartSpreadJob("spread-lost", 100000));
  pid_t rank0 = 0, rank1 = 0;
  ASSERT_NE(WorkerOfRank({a_, b_}, 0, &rank0), nullptr);
  ASSERT_NE(WorkerOfRank({a_, b_}, 1, &rank1), nullptr);
  ASSERT_EQ(kill(rank1, SIGKILL), 0);

  YARD_ASSIGN_OR_FAIL(v1::Job job, WaitForTerminal(jobs(), id, JobTimeout()));
  EXPECT_EQ(job.state(), v1::FAILED) << job.DebugString();
  EXPECT_THAT(job.state_reason(), HasSubstr("rank 1")) << job.DebugString();
  YARD_ASSERT_OK(PollUntil("rank 0 to be gone too", StartTimeout(),
                           [&] { return !ProcessAlive(rank0); }));
  EXPECT_TRUE(a_->process().Running());
  EXPECT_TRUE(b_->process().Running());

  // Both workers' slots are free again: the next spread job runs.
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse next,
                      Submit(RanksJob("spread-next", 2, 30)));
  YARD_ASSIGN_OR_FAIL(v1::Job ok,
                      WaitForTerminal(jobs(), next.job().id(), JobTimeout()));
  EXPECT_EQ(ok.state(), v1::SUCCEEDED) << ok.DebugString();
}

// A lost worker is not a failed job: rank 0 fails when its peer vanishes,
// but the server waits for the other worker's word, learns it is lost, and
// the job resumes from its checkpoint on the workers left.
TEST_F(DataParallelTest, LosingTheWorkerOfSomeRanksRequeuesTheJob) {
  LosingTheWorkerOfRankRequeues(1, "spread-moves");
}

// Losing the worker of rank 0 is not a failed job either: the other rank
// fails at once ("rank 0 closed its connection"), but the job goes back to
// the queue when the worker is found lost, spending no restart.
TEST_F(DataParallelTest, LosingTheWorkerOfRankZeroRequeuesTheJob) {
  LosingTheWorkerOfRankRequeues(0, "spread-leader-lost");
}

// The rank whose death ends the job is the one blamed, rank 0 too: its
// peer's "rank 0 closed its connection" may reach the server first.
TEST_F(DataParallelTest, RankZeroDyingIsBlamedForTheFailure) {
  YARD_ASSIGN_OR_FAIL(const std::string id,
                      StartSpreadJob("spread-rank0", 100000));
  pid_t rank0 = 0, rank1 = 0;
  WorkerProcess* leader = WorkerOfRank({a_, b_}, 0, &rank0);
  ASSERT_NE(leader, nullptr);
  ASSERT_NE(WorkerOfRank({a_, b_}, 1, &rank1), nullptr);
  ASSERT_EQ(kill(rank0, SIGKILL), 0);

  YARD_ASSIGN_OR_FAIL(v1::Job job, WaitForTerminal(jobs(), id, JobTimeout()));
  EXPECT_EQ(job.state(), v1::FAILED) << job.DebugString();
  EXPECT_THAT(job.state_reason(),
              HasSubstr(absl::StrCat("worker ", leader->name(),
                                     ": rank 0 killed by signal 9")))
      << job.DebugString();
  YARD_ASSERT_OK(PollUntil("rank 1 to be gone too", StartTimeout(),
                           [&] { return !ProcessAlive(rank1); }));
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
