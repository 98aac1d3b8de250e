// Jobs whose ranks are spread over several workers (Job.gang_parts): how
// the exits of their parts decide an attempt. A failing rank stops the
// others at once; the outcome waits until every part has reported or its
// worker is lost; a lost worker or a rank stopped on a lost lease re-queues
// the job without spending a restart; a rank's own crash is blamed rather
// than the peers that only saw it go; a refusal of any part is a refusal.
// Time is a FakeClock; workers are fakes.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server_test_fixture.h"

namespace trainyard::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// What a rank whose peer vanished says (socket_collective.cc).
constexpr char kEchoOfRank0[] =
    "rank 1 exited with code 1; stderr tail:\nyard-train: allreduce: rank 0 "
    "closed its connection (it exited or died)";

class SpreadJobsTest : public ServerLogicTest {
 protected:
  // Submits a job of `ranks` CPU ranks allowed `max_restarts` restarts,
  // connects one-slot workers "a", "b", ... (one per rank) and places it:
  // rank 0 on a, rank 1 on b, ... Returns its id.
  std::string PlaceSpreadJob(int32_t ranks, int32_t max_restarts = 0) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec();
    req.mutable_spec()->mutable_resources()->set_cpu_ranks(ranks);
    req.mutable_spec()->set_max_restarts(max_restarts);
    auto submitted = lifecycle_->Submit(req);
    EXPECT_TRUE(submitted.ok()) << submitted.status();
    for (int32_t i = 0; i < ranks; ++i) Connect(Name(i));
    Pass();
    const JobRecord r = Job(submitted->job.id());
    EXPECT_EQ(r.job.state(), v1::SCHEDULED);
    EXPECT_EQ(r.job.worker_id(), "a");
    EXPECT_EQ(r.job.gang_parts_size(), ranks - 1);
    for (int32_t i = 0; i < ranks; ++i) {
      EXPECT_EQ(W(i).Assignments().size(), 1u) << Name(i);
    }
    return submitted->job.id();
  }

  // Places a spread job and starts every part.
  std::string RunSpreadJob(int32_t ranks, int32_t max_restarts = 0) {
    const std::string id = PlaceSpreadJob(ranks, max_restarts);
    for (int32_t i = 0; i < ranks; ++i) {
      EXPECT_TRUE(W(i).Started(id, 1).ok());
    }
    EXPECT_EQ(Job(id).job.state(), v1::RUNNING);
    return id;
  }

  static std::string Name(int32_t i) {
    return std::string(1, static_cast<char>('a' + i));
  }
  FakeWorker& W(int32_t i) { return workers_map_.at(Name(i)); }

  static absl::Status Exit(FakeWorker& w, const std::string& job, int attempt,
                           int code, int signal, const std::string& error,
                           bool cancelled = false) {
    return w.Update(job, attempt, [&](v1::JobUpdate& u) {
      u.mutable_exited()->set_exit_code(code);
      u.mutable_exited()->set_signal(signal);
      u.mutable_exited()->set_error(error);
      u.mutable_exited()->set_cancelled(cancelled);
    });
  }
  // The exit of ranks killed because the server told their worker to stop
  // them (StopAttempt).
  static absl::Status StoppedAsAsked(FakeWorker& w, const std::string& job,
                                     int attempt) {
    return Exit(w, job, attempt, 0, 9, "rank 1 killed by signal 9 (Killed)",
                /*cancelled=*/true);
  }

  // The attempts the server told `w` to stop since the last call.
  static std::vector<int32_t> Stops(FakeWorker& w) {
    std::vector<int32_t> out;
    for (auto& m : w.link->Take()) {
      if (m.has_stop_attempt()) out.push_back(m.stop_attempt().attempt());
    }
    return out;
  }

  // Moves the clock on by `d` with only `alive` sending heartbeats.
  void AdvanceWithHeartbeatsFrom(const std::vector<std::string>& alive,
                                 absl::Duration d) {
    while (d > absl::ZeroDuration()) {
      const absl::Duration step = std::min(d, kLease / 4);
      clock_.Advance(step);
      d -= step;
      for (const std::string& id : alive) {
        ASSERT_TRUE(workers_map_.at(id).Heartbeat().ok()) << id;
      }
    }
  }
};

// The worker of rank 0 is killed: the other rank reports at once that
// rank 0 closed its connection. That only echoes the loss; the job is
// re-queued when the worker is declared lost, spending no restart.
TEST_F(SpreadJobsTest, LosingRankZerosWorkerRequeuesTheJob) {
  const std::string id = RunSpreadJob(2, /*max_restarts=*/2);
  ASSERT_TRUE(Exit(W(1), id, 1, 1, 0, kEchoOfRank0).ok());
  JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::RUNNING) << r.job.DebugString();
  EXPECT_EQ(r.job.restarts(), 0);
  EXPECT_EQ(Stops(W(0)), std::vector<int32_t>{1});  // rank 0 stopped too

  AdvanceWithHeartbeatsFrom({"b"}, kLease + absl::Seconds(1));
  Pass();
  r = Job(id);
  EXPECT_EQ(r.job.state(), v1::QUEUED) << r.job.DebugString();
  EXPECT_EQ(r.job.attempts(0).outcome(), v1::QUEUED);
  EXPECT_EQ(r.job.attempts(0).reason(), "worker a lost");
  EXPECT_EQ(r.job.restarts(), 0);
  EXPECT_FALSE(r.job.has_restart_after());
  EXPECT_TRUE(r.job.pending_failure().empty());
}

// A frozen worker's rank 0 stops itself when its lease runs out (exit 4);
// its peer may fail first, echoing it. Either way the job is re-queued, no
// restart spent.
TEST_F(SpreadJobsTest, RankZeroStoppedOnALostLeaseAfterItsPeerRequeues) {
  const std::string id = RunSpreadJob(2, /*max_restarts=*/2);
  ASSERT_TRUE(Exit(W(1), id, 1, 1, 0, kEchoOfRank0).ok());
  EXPECT_EQ(Job(id).job.state(), v1::RUNNING);
  ASSERT_TRUE(Exit(W(0), id, 1, 4, 0, "").ok());
  const JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::QUEUED) << r.job.DebugString();
  EXPECT_THAT(r.job.attempts(0).reason(),
              HasSubstr("stopped on worker a: the worker stopped renewing"));
  EXPECT_EQ(r.job.attempts(0).outcome(), v1::QUEUED);
  EXPECT_EQ(r.job.restarts(), 0);
}

TEST_F(SpreadJobsTest, RankZeroStoppedOnALostLeaseFirstRequeuesAtOnce) {
  const std::string id = RunSpreadJob(2, /*max_restarts=*/2);
  ASSERT_TRUE(Exit(W(0), id, 1, 4, 0, "").ok());
  JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::QUEUED) << r.job.DebugString();
  EXPECT_EQ(r.job.restarts(), 0);
  EXPECT_EQ(Stops(W(1)), std::vector<int32_t>{1});
  // The other rank's exit comes after the attempt ended: stale.
  ASSERT_TRUE(Exit(W(1), id, 1, 1, 0, kEchoOfRank0).ok());
  r = Job(id);
  EXPECT_EQ(r.job.state(), v1::QUEUED);
  EXPECT_EQ(r.job.attempts(0).outcome(), v1::QUEUED);
}

// A part whose own lease ran out re-queues the job as well.
TEST_F(SpreadJobsTest, APartStoppedOnALostLeaseRequeuesTheJob) {
  const std::string id = RunSpreadJob(2, /*max_restarts=*/1);
  ASSERT_TRUE(Exit(W(1), id, 1, 4, 0, "rank 1 exited with code 4").ok());
  JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::QUEUED) << r.job.DebugString();
  EXPECT_THAT(r.job.state_reason(), HasSubstr("stopped on worker b"));
  EXPECT_EQ(r.job.restarts(), 0);
  EXPECT_EQ(Stops(W(0)), std::vector<int32_t>{1});
}

// kill -9 of rank 0's process: its peer's "closed its connection" arrives
// first, but rank 0's own death is what the job fails with.
TEST_F(SpreadJobsTest, RankZerosCrashIsBlamedNotItsPeersEcho) {
  const std::string id = RunSpreadJob(2);
  ASSERT_TRUE(Exit(W(1), id, 1, 1, 0, kEchoOfRank0).ok());
  EXPECT_EQ(Job(id).job.state(), v1::RUNNING);
  ASSERT_TRUE(
      Exit(W(0), id, 1, 0, 9, "rank 0 killed by signal 9 (Killed)").ok());
  const JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::FAILED) << r.job.DebugString();
  EXPECT_EQ(r.job.state_reason(),
            "worker a: rank 0 killed by signal 9 (Killed)");
}

// Rank 0 fails at once (a wrong --rank-address): the other parts are
// stopped at once rather than waiting out the rendezvous, and the job fails
// with rank 0's error, not with a rank that could not join it.
TEST_F(SpreadJobsTest, RankZeroFailingStopsTheOthersAtOnceAndIsBlamed) {
  const std::string id = RunSpreadJob(3);
  const std::string listen_error =
      "rank 0 exited with code 1; stderr tail:\nyard-train: listening on "
      "10.255.255.1: Cannot assign requested address";
  ASSERT_TRUE(Exit(W(0), id, 1, 1, 0, listen_error).ok());
  JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::RUNNING);
  EXPECT_THAT(r.job.state_reason(), HasSubstr("Cannot assign"));
  EXPECT_EQ(Stops(W(1)), std::vector<int32_t>{1});
  EXPECT_EQ(Stops(W(2)), std::vector<int32_t>{1});

  // c's rank gave up on its own just before the stop; b's was killed.
  ASSERT_TRUE(Exit(W(2), id, 1, 1, 0,
                   "rank 2 exited with code 1; stderr tail:\nrank 2 could "
                   "not join rank 0 within 2m")
                  .ok());
  EXPECT_EQ(Job(id).job.state(), v1::RUNNING);
  ASSERT_TRUE(StoppedAsAsked(W(1), id, 1).ok());
  r = Job(id);
  EXPECT_EQ(r.job.state(), v1::FAILED) << r.job.DebugString();
  EXPECT_EQ(r.job.state_reason(), "worker a: " + listen_error);
  EXPECT_TRUE(r.job.gang_parts().empty());  // nothing held any more
}

// A part's own crash (a signal) stops the others; its failure names it,
// whatever the others say after.
TEST_F(SpreadJobsTest, APartsCrashFailsTheJobOnceAllHaveReported) {
  const std::string id = RunSpreadJob(2);
  ASSERT_TRUE(
      Exit(W(1), id, 1, 0, 9, "rank 1 killed by signal 9 (Killed)").ok());
  EXPECT_EQ(Job(id).job.state(), v1::RUNNING);
  EXPECT_EQ(Stops(W(0)), std::vector<int32_t>{1});
  ASSERT_TRUE(Exit(W(0), id, 1, 1, 0,
                   "rank 0 exited with code 1; stderr tail:\nrank 1 closed "
                   "its connection (it exited or died)")
                  .ok());
  const JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::FAILED);
  EXPECT_EQ(r.job.state_reason(),
            "worker b: rank 1 killed by signal 9 (Killed)");
}

// Under max_restarts a failure spends one restart, once every part has
// reported; the first real failure is the reason.
TEST_F(SpreadJobsTest, AFailureSpendsOneRestartWhenAllPartsHaveReported) {
  const std::string id = RunSpreadJob(3, /*max_restarts=*/2);
  ASSERT_TRUE(Exit(W(1), id, 1, 1, 0,
                   "rank 1 exited with code 1; stderr "
                   "tail:\nloss is NaN at step 12")
                  .ok());
  ASSERT_TRUE(Exit(W(2), id, 1, 1, 0,
                   "rank 2 exited with code 1; stderr "
                   "tail:\nloss is NaN at step 12")
                  .ok());
  EXPECT_EQ(Job(id).job.state(), v1::RUNNING);
  EXPECT_EQ(Job(id).job.restarts(), 0);
  ASSERT_TRUE(StoppedAsAsked(W(0), id, 1).ok());
  const JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::QUEUED) << r.job.DebugString();
  EXPECT_EQ(r.job.restarts(), 1);
  EXPECT_EQ(r.job.attempts(0).outcome(), v1::FAILED);
  EXPECT_THAT(r.job.state_reason(), HasSubstr("restart 1 of 2"));
  EXPECT_THAT(r.job.state_reason(), HasSubstr("worker b: rank 1 exited"));
}

// A usage error (exit 2) is not restarted, whichever rank reports last.
TEST_F(SpreadJobsTest, AUsageErrorOfAnyRankIsNotRestarted) {
  const std::string id = RunSpreadJob(2, /*max_restarts=*/3);
  ASSERT_TRUE(Exit(W(1), id, 1, 2, 0, "rank 1 exited with code 2").ok());
  ASSERT_TRUE(StoppedAsAsked(W(0), id, 1).ok());
  const JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::FAILED) << r.job.DebugString();
  EXPECT_EQ(r.job.restarts(), 0);
}

// A refusal from any part of an attempt not yet met is a refusal (offered
// again after a wait), even when another part has started already.
class SpreadRefusalTest : public SpreadJobsTest,
                          public ::testing::WithParamInterface<int> {};

TEST_P(SpreadRefusalTest, APartsRefusalAfterAnotherStartedIsARefusal) {
  const int refuser = GetParam();
  const int starter = 1 - refuser;
  const std::string id = PlaceSpreadJob(2, /*max_restarts=*/2);
  ASSERT_TRUE(W(starter).Started(id, 1).ok());
  EXPECT_EQ(Job(id).job.state(), v1::RUNNING);
  ASSERT_TRUE(
      Exit(W(refuser), id, 1, -1, 0, "no free CPU slot (reaping a rank)").ok());
  const JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::QUEUED) << r.job.DebugString();
  EXPECT_THAT(r.job.state_reason(),
              HasSubstr(absl::StrCat("refused by worker ", Name(refuser))));
  EXPECT_THAT(r.job.state_reason(), HasSubstr("offered again in"));
  EXPECT_EQ(r.job.restarts(), 0);
  EXPECT_TRUE(r.job.has_restart_after());
  EXPECT_EQ(Stops(W(starter)), std::vector<int32_t>{1});
}

INSTANTIATE_TEST_SUITE_P(ByRankZerosWorkerOrAPart, SpreadRefusalTest,
                         ::testing::Values(0, 1));

// A pending failure survives a server restart: a part still running when
// the server comes back is stopped as it re-attaches, and its exit ends
// the attempt. Rank 0's worker, done with the job, reconnecting without it
// does not re-queue it.
TEST_F(SpreadJobsTest, APendingFailureOutlivesAServerRestart) {
  const std::string id = RunSpreadJob(2);
  ASSERT_TRUE(Exit(W(0), id, 1, 0, 11,
                   "killed by signal 11 (Segmentation "
                   "fault)")
                  .ok());
  Boot();
  FakeWorker& a = Connect("a");
  FakeWorker& b = Connect("b", 1, 0, {{id, 1}});
  EXPECT_EQ(Stops(b), std::vector<int32_t>{1});
  ASSERT_TRUE(a.Heartbeat().ok());
  ASSERT_TRUE(b.Heartbeat({{id, 1}}).ok());
  EXPECT_EQ(Job(id).job.state(), v1::RUNNING);
  ASSERT_TRUE(StoppedAsAsked(b, id, 1).ok());
  const JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::FAILED) << r.job.DebugString();
  EXPECT_THAT(r.job.state_reason(), HasSubstr("worker a: "));
  EXPECT_THAT(r.job.state_reason(), HasSubstr("signal 11"));
}

// A part's worker reconnects without the job (its ranks exited meanwhile)
// and reports the exit again before its first heartbeat: the exit counts,
// once, and the job is not re-queued as if the ranks had been lost.
TEST_F(SpreadJobsTest, APartsExitAfterAReconnectCountsOnce) {
  const std::string id = RunSpreadJob(2);
  W(1).session->Close();
  FakeWorker& b = Connect("b");  // no longer running it
  ASSERT_TRUE(Exit(b, id, 1, 1, 0, kEchoOfRank0).ok());
  ASSERT_TRUE(Exit(b, id, 1, 1, 0, kEchoOfRank0).ok());
  ASSERT_TRUE(b.Heartbeat().ok());
  JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::RUNNING) << r.job.DebugString();
  ASSERT_TRUE(Exit(W(0), id, 1, 0, 9, "killed by signal 9 (Killed)").ok());
  ASSERT_TRUE(Exit(W(0), id, 1, 0, 9, "killed by signal 9 (Killed)").ok());
  r = Job(id);
  EXPECT_EQ(r.job.state(), v1::FAILED) << r.job.DebugString();
  EXPECT_EQ(r.job.state_reason(), "worker a: killed by signal 9 (Killed)");
}

// Cancelling a job whose ranks are being stopped after a failure ends it
// CANCELLED, as asked.
TEST_F(SpreadJobsTest, ACancelWhileTheRanksStopWins) {
  const std::string id = RunSpreadJob(2);
  ASSERT_TRUE(Exit(W(1), id, 1, 0, 9, "rank 1 killed by signal 9").ok());
  ASSERT_EQ(lifecycle_->Cancel(id, "not needed")->state(), v1::RUNNING);
  ASSERT_TRUE(StoppedAsAsked(W(0), id, 1).ok());
  const JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::CANCELLED) << r.job.DebugString();
  EXPECT_EQ(r.job.state_reason(), "not needed");
}

// A job being stopped after a failure is not preempted: it is ending.
TEST_F(SpreadJobsTest, AJobStoppingAfterAFailureIsNotPreempted) {
  const std::string id = RunSpreadJob(2);
  ASSERT_TRUE(Exit(W(1), id, 1, 0, 9, "rank 1 killed by signal 9").ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(
      lifecycle_->Preempt(id, "a", "room for a job of priority 9").status()));
}

// The ranks finishing cleanly end the job SUCCEEDED on rank 0's exit.
TEST_F(SpreadJobsTest, CleanExitsSucceedOnRankZerosWord) {
  const std::string id = RunSpreadJob(2);
  ASSERT_TRUE(Exit(W(1), id, 1, 0, 0, "").ok());
  EXPECT_EQ(Job(id).job.state(), v1::RUNNING);
  ASSERT_TRUE(Exit(W(0), id, 1, 0, 0, "").ok());
  EXPECT_EQ(Job(id).job.state(), v1::SUCCEEDED);
}

// The reason of RUNNING names the worker that started first and where
// rank 0 runs.
TEST_F(SpreadJobsTest, TheStartNamesRankZerosWorker) {
  const std::string id = PlaceSpreadJob(2);
  ASSERT_TRUE(W(1).Started(id, 1).ok());
  const std::string reason = Job(id).job.state_reason();
  EXPECT_THAT(reason, HasSubstr("worker b"));
  EXPECT_THAT(reason, HasSubstr("rank 0 on worker a"));
  EXPECT_THAT(reason, Not(HasSubstr("first on worker b")));
}

}  // namespace
}  // namespace trainyard::server
