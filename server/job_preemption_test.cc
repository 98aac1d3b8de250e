// Preemption, refused assignments and queue positions through the server's
// logic: a first-fit+preempt scheduler loop, a real store, fake workers.
#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/queue_positions.h"
#include "server/server_test_fixture.h"

namespace trainyard::server {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

class JobPreemptionTest : public ServerLogicTest {
 protected:
  JobPreemptionTest()
      : preempting_(scheduler::PassFeatures{.preemption = true}) {
    UsePreemptingLoop();
  }

  void UsePreemptingLoop() {
    SchedulerLoopOptions options;
    options.queue_positions = &positions_;
    loop_ = std::make_unique<SchedulerLoop>(store_.get(), registry_.get(),
                                            lifecycle_.get(), &preempting_,
                                            &clock_, options);
  }

  // Runs a low-priority job on a connected one-slot worker.
  std::string RunLowJob(FakeWorker& w) { return RunJobOn(w, /*priority=*/0); }

  struct TwoForOne {
    std::string low1, low2, high;
  };
  // Two low jobs run on two-slot worker `w`, then a job of priority 10
  // needing both slots arrives, and a pass preempts both for it.
  TwoForOne PreemptTwoForOne(FakeWorker& w) {
    TwoForOne jobs;
    jobs.low1 = RunLowJob(w);
    jobs.low2 = Submit(0);
    Pass();
    EXPECT_TRUE(w.Started(jobs.low2, 1).ok());
    w.link->Take();
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec(/*priority=*/10);
    req.mutable_spec()->mutable_resources()->set_cpu_ranks(2);
    absl::StatusOr<SubmitResult> submitted = lifecycle_->Submit(req);
    EXPECT_TRUE(submitted.ok()) << submitted.status();
    if (submitted.ok()) jobs.high = submitted->job.id();
    Pass();
    return jobs;
  }

  absl::Status Exit(FakeWorker& w, const std::string& job, int code,
                    int signal) {
    return w.Update(job, 1, [&](v1::JobUpdate& u) {
      u.mutable_exited()->set_exit_code(code);
      u.mutable_exited()->set_signal(signal);
    });
  }

  scheduler::FirstFitPolicy preempting_;
  QueuePositions positions_;
};

TEST_F(JobPreemptionTest, HigherPriorityJobPreemptsAndTheVictimIsRequeued) {
  FakeWorker& w = Connect("w1", /*slots=*/1);
  const std::string low = RunLowJob(w);
  const std::string high = Submit(/*priority=*/10);
  Pass();

  JobRecord victim = Job(low);
  EXPECT_EQ(victim.job.state(), v1::PREEMPTING);
  EXPECT_EQ(victim.job.state_reason(),
            absl::StrCat("preempted by ", high, " (priority 10)"));
  std::vector<v1::Preempt> sent = w.Preempts();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].job_id(), low);
  EXPECT_EQ(sent[0].attempt(), 1);
  EXPECT_EQ(sent[0].grace_ms(), 10'000);
  EXPECT_EQ(Job(high).job.state(), v1::QUEUED);
  EXPECT_THAT(Job(high).job.state_reason(), HasSubstr("preempted"));
  EXPECT_EQ(positions_.Of(high), 1);

  // While the victim winds down, nothing else is stopped or placed.
  Pass();
  EXPECT_TRUE(w.link->Take().empty());
  EXPECT_EQ(Job(low).job.state(), v1::PREEMPTING);

  // yard-train checkpointed and exited 3.
  ASSERT_TRUE(Exit(w, low, 3, 0).ok());
  victim = Job(low);
  EXPECT_EQ(victim.job.state(), v1::QUEUED);
  ASSERT_EQ(victim.job.attempts_size(), 1);
  EXPECT_EQ(victim.job.attempts(0).outcome(), v1::QUEUED);
  EXPECT_THAT(victim.job.attempts(0).reason(),
              StartsWith(absl::StrCat("preempted by ", high)));

  Pass();
  std::vector<v1::Assignment> a = w.Assignments();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].job_id(), high);
  EXPECT_EQ(positions_.Of(low), 1);
  EXPECT_EQ(positions_.Of(high), 0) << "placed jobs have no position";

  // The high job ends; the victim runs again as attempt 2, same directory.
  ASSERT_TRUE(w.Started(high, 1).ok());
  ASSERT_TRUE(w.Exited(high, 1, 0).ok());
  Pass();
  a = w.Assignments();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].job_id(), low);
  EXPECT_EQ(a[0].attempt(), 2);
  EXPECT_EQ(a[0].checkpoint_dir(), victim.job.checkpoint_dir());
}

TEST_F(JobPreemptionTest, KilledAfterTheGracePeriodIsRequeuedToo) {
  FakeWorker& w = Connect("w1", 1);
  const std::string low = RunLowJob(w);
  Submit(10);
  Pass();
  ASSERT_TRUE(Exit(w, low, 0, /*signal=*/9).ok());
  EXPECT_EQ(Job(low).job.state(), v1::QUEUED);
}

TEST_F(JobPreemptionTest, EndingWhileStoppingKeepsTheRealOutcome) {
  FakeWorker& w = Connect("w1", 2);
  const std::string done = RunLowJob(w);
  const std::string broken = Submit(0);
  Pass();
  ASSERT_TRUE(w.Started(broken, 1).ok());
  w.link->Take();
  Submit(10);
  Submit(10);
  Pass();
  ASSERT_EQ(Job(done).job.state(), v1::PREEMPTING);
  ASSERT_EQ(Job(broken).job.state(), v1::PREEMPTING);
  ASSERT_TRUE(Exit(w, done, 0, 0).ok());
  ASSERT_TRUE(Exit(w, broken, 1, 0).ok());
  EXPECT_EQ(Job(done).job.state(), v1::SUCCEEDED);
  EXPECT_EQ(Job(broken).job.state(), v1::FAILED);
}

TEST_F(JobPreemptionTest, CancelWhileStoppingCancels) {
  FakeWorker& w = Connect("w1", 1);
  const std::string low = RunLowJob(w);
  Submit(10);
  Pass();
  ASSERT_TRUE(lifecycle_->Cancel(low, "not needed").ok());
  ASSERT_TRUE(Exit(w, low, 3, 0).ok());
  EXPECT_EQ(Job(low).job.state(), v1::CANCELLED);
}

TEST_F(JobPreemptionTest, EqualPriorityNeverPreempts) {
  FakeWorker& w = Connect("w1", 1);
  const std::string low = RunLowJob(w);
  const std::string same = Submit(0);
  Pass();
  EXPECT_EQ(Job(low).job.state(), v1::RUNNING);
  EXPECT_TRUE(w.Preempts().empty());
  EXPECT_EQ(positions_.Of(same), 1);
}

TEST_F(JobPreemptionTest, OneVictimPerWaitingJobAcrossPasses) {
  FakeWorker& w = Connect("w1", 2);
  const std::string a = RunLowJob(w);
  const std::string b = Submit(0);
  Pass();
  ASSERT_TRUE(w.Started(b, 1).ok());
  w.link->Take();
  Submit(10);
  Pass();
  Pass();
  Pass();
  const int stopping = (Job(a).job.state() == v1::PREEMPTING) +
                       (Job(b).job.state() == v1::PREEMPTING);
  EXPECT_EQ(stopping, 1) << "a job already stopping makes the room";
  EXPECT_EQ(w.Preempts().size(), 1u);
}

// A waiting job that needs two victims' room gets it: the slot the first
// victim leaves is held for it until the second has stopped. (Before, each
// pass gave that slot back to a victim, which the waiting job then
// preempted again: a livelock for as long as victims stopped one by one.)
TEST_F(JobPreemptionTest, RoomOfTheFirstVictimIsHeldUntilTheLastHasStopped) {
  FakeWorker& w = Connect("w1", 2);
  const auto [low1, low2, high] = PreemptTwoForOne(w);
  EXPECT_EQ(Job(low1).job.state(), v1::PREEMPTING);
  EXPECT_EQ(Job(low2).job.state(), v1::PREEMPTING);
  EXPECT_EQ(w.Preempts().size(), 2u);

  ASSERT_TRUE(Exit(w, low1, 3, 0).ok());
  for (int round = 0; round < 3; ++round) {
    Pass();
    EXPECT_TRUE(w.Assignments().empty()) << "round " << round;
    EXPECT_EQ(Job(low1).job.state(), v1::QUEUED);
    EXPECT_THAT(Job(low1).job.state_reason(),
                HasSubstr("worker w1 has room for it but is held for " + high));
    EXPECT_EQ(Job(low2).job.state(), v1::PREEMPTING);
    EXPECT_TRUE(w.Preempts().empty());
  }

  ASSERT_TRUE(Exit(w, low2, 3, 0).ok());
  Pass();
  std::vector<v1::Assignment> a = w.Assignments();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].job_id(), high);
  EXPECT_EQ(Job(low1).job.attempts_size(), 1);  // never restarted meanwhile
  EXPECT_EQ(Job(low2).job.attempts_size(), 1);
}

// The hold outlives a server restart: the victims' records name the job
// they stop for and the workers held for it.
TEST_F(JobPreemptionTest, TheHoldIsRestoredAfterARestart) {
  FakeWorker& w = Connect("w1", 2);
  const auto [low1, low2, high] = PreemptTwoForOne(w);
  const v1::Job victim = Job(low2).job;
  EXPECT_EQ(victim.state(), v1::PREEMPTING);
  EXPECT_EQ(victim.preempted_for(), high);
  EXPECT_THAT(victim.preempted_room_on(), ::testing::ElementsAre("w1"));

  ASSERT_TRUE(Exit(w, low1, 3, 0).ok());
  EXPECT_TRUE(Job(low1).job.preempted_for().empty()) << "cleared once stopped";
  UsePreemptingLoop();  // a new server: nothing held in memory
  Pass();
  EXPECT_TRUE(w.Assignments().empty()) << "low1 must not take high's room";
  EXPECT_THAT(Job(low1).job.state_reason(),
              HasSubstr("worker w1 has room for it but is held for " + high));

  ASSERT_TRUE(Exit(w, low2, 3, 0).ok());
  Pass();
  std::vector<v1::Assignment> a = w.Assignments();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].job_id(), high);
}

// A job already stopping for one waiting job may be chosen again for
// another of higher priority: its record follows the latest choice, so a
// restarted server holds the room for that one.
TEST_F(JobPreemptionTest, ARechosenVictimsRecordNamesTheLatestJob) {
  FakeWorker& w = Connect("w1", 1);
  const std::string low = RunLowJob(w);
  const std::string mid = Submit(5);
  Pass();
  ASSERT_EQ(Job(low).job.state(), v1::PREEMPTING);
  ASSERT_EQ(Job(low).job.preempted_for(), mid);
  const std::string high = Submit(10);
  Pass();
  const v1::Job victim = Job(low).job;
  EXPECT_EQ(victim.state(), v1::PREEMPTING);
  EXPECT_EQ(victim.preempted_for(), high);
  EXPECT_THAT(victim.preempted_room_on(), ::testing::ElementsAre("w1"));
  EXPECT_EQ(w.Preempts().size(), 1u) << "told to stop once";

  UsePreemptingLoop();  // a new server: nothing held in memory
  ASSERT_TRUE(Exit(w, low, 3, 0).ok());
  Pass();
  std::vector<v1::Assignment> a = w.Assignments();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].job_id(), high);
}

TEST_F(JobPreemptionTest, PreemptIsSentAgainWhenTheWorkerReattaches) {
  FakeWorker& w = Connect("w1", 1);
  const std::string low = RunLowJob(w);
  w.link->set_fail_sends(true);  // the Preempt is lost with the stream
  Submit(10);
  Pass();
  ASSERT_EQ(Job(low).job.state(), v1::PREEMPTING);
  FakeWorker& again = Connect("w1", 1, 0, {{low, 1}});
  std::vector<v1::Preempt> sent = again.Preempts();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].job_id(), low);
}

TEST_F(JobPreemptionTest, RefusedAssignmentGoesBackToTheQueue) {
  FakeWorker& w = Connect("w1", 1);
  const std::string id = Submit(0);
  Pass();
  ASSERT_EQ(w.Assignments().size(), 1u);
  ASSERT_TRUE(w.Exited(id, 1, -1, "no free CPU slot on this worker").ok());
  JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::QUEUED);
  EXPECT_THAT(r.job.attempts(0).reason(),
              HasSubstr("refused by worker w1: no free CPU slot"));
  EXPECT_FALSE(r.job.has_start_time()) << "it never ran";
  EXPECT_THAT(r.job.state_reason(), HasSubstr("offered again in 1s"));
  // It waits a second before it is offered again, to the same worker.
  Pass();
  EXPECT_TRUE(w.Assignments().empty()) << "offered again at once";
  AdvanceWithHeartbeats(absl::Seconds(1));
  Pass();
  ASSERT_EQ(w.Assignments().size(), 1u);
  ASSERT_TRUE(w.Started(id, 2).ok());
  EXPECT_EQ(Job(id).job.state(), v1::RUNNING);
}

TEST_F(JobPreemptionTest, RefusedThreeTimesInARowFails) {
  FakeWorker& w = Connect("w1", 1);
  const std::string id = Submit(0);
  // Each refusal doubles the wait before the next offer: 1 s, then 2 s.
  for (int attempt = 1; attempt <= 3; ++attempt) {
    Pass();
    ASSERT_EQ(w.Assignments().size(), 1u) << "attempt " << attempt;
    ASSERT_TRUE(w.Exited(id, attempt, -1, "cannot create the job dir").ok());
    if (attempt == 3) break;
    const absl::Duration wait = absl::Seconds(attempt);
    EXPECT_THAT(Job(id).job.state_reason(),
                HasSubstr(absl::StrCat("offered again in ",
                                       absl::FormatDuration(wait))));
    AdvanceWithHeartbeats(wait - absl::Milliseconds(1));
    Pass();
    EXPECT_TRUE(w.Assignments().empty()) << "attempt " << attempt;
    AdvanceWithHeartbeats(absl::Milliseconds(1));
  }
  JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::FAILED);
  EXPECT_THAT(r.job.state_reason(), HasSubstr("3 refusals in a row"));
}

TEST_F(JobPreemptionTest, QueuePositionsFollowPriorityAndAreFilledOnRead) {
  Connect("w1", 1);
  const std::string running = Submit(0);
  Pass();  // takes the only slot (and is not yet started: not preemptible)
  const std::string first = Submit(0);
  const std::string urgent = Submit(5);
  const std::string last = Submit(-5);
  Pass();
  EXPECT_EQ(positions_.Of(running), 0);
  EXPECT_EQ(positions_.Of(urgent), 1);
  EXPECT_EQ(positions_.Of(first), 2);
  EXPECT_EQ(positions_.Of(last), 3);
  v1::Job job = Job(last).job;
  positions_.Fill(job);
  EXPECT_EQ(job.queue_position(), 3);
  EXPECT_FALSE(job.state_reason().empty()) << "it says why it waits";
  v1::Job placed = Job(running).job;
  placed.set_queue_position(7);
  positions_.Fill(placed);
  EXPECT_EQ(placed.queue_position(), 0) << "only QUEUED jobs have one";
}

// SetPriority: the next pass queues and preempts by the new priority.
TEST_F(JobPreemptionTest, ARaisedQueuedJobStartsFirstAndMayPreempt) {
  FakeWorker& w = Connect("w1", /*slots=*/1);
  const std::string running = RunLowJob(w);
  const std::string first = Submit(/*priority=*/0);
  const std::string second = Submit(/*priority=*/0);
  Pass();
  EXPECT_EQ(Job(running).job.state(), v1::RUNNING) << "equal: no preemption";
  EXPECT_EQ(positions_.Of(second), 2);

  absl::StatusOr<v1::Job> raised = lifecycle_->SetPriority(second, 5);
  ASSERT_TRUE(raised.ok()) << raised.status();
  EXPECT_EQ(raised->spec().priority(), 5);
  EXPECT_EQ(raised->state(), v1::QUEUED);
  Pass();
  EXPECT_EQ(Job(running).job.state(), v1::PREEMPTING);
  EXPECT_EQ(Job(running).job.state_reason(),
            absl::StrCat("preempted by ", second, " (priority 5)"));
  EXPECT_EQ(positions_.Of(second), 1);
  EXPECT_EQ(positions_.Of(first), 2);
}

TEST_F(JobPreemptionTest, ALoweredRunningJobBecomesAVictim) {
  FakeWorker& w = Connect("w1", /*slots=*/1);
  const std::string running = RunJobOn(w, /*priority=*/10);
  const std::string waiting = Submit(/*priority=*/5);
  Pass();
  EXPECT_EQ(Job(running).job.state(), v1::RUNNING);
  ASSERT_TRUE(lifecycle_->SetPriority(running, 0).ok());
  Pass();
  EXPECT_EQ(Job(running).job.state(), v1::PREEMPTING);
  EXPECT_EQ(Job(running).job.spec().priority(), 0);
}

TEST_F(JobPreemptionTest, SetPriorityRefusesBadInput) {
  const std::string id = Submit(/*priority=*/3);
  absl::StatusOr<v1::Job> r = lifecycle_->SetPriority(id, 1001);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "priority: must be in [-1000, 1000], got 1001");
  r = lifecycle_->SetPriority(id, -1001);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  r = lifecycle_->SetPriority("j-999999", 1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("j-999999"));
  EXPECT_EQ(Job(id).job.spec().priority(), 3) << "nothing stored";

  // The same priority: the job as it is.
  r = lifecycle_->SetPriority(id, 3);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->spec().priority(), 3);

  ASSERT_TRUE(lifecycle_->Cancel(id, "").ok());
  r = lifecycle_->SetPriority(id, 7);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("CANCELLED"));
  EXPECT_EQ(Job(id).job.spec().priority(), 3);
}

// A submit retried with its request id after the priority was changed
// still names the job it made.
TEST_F(JobPreemptionTest, ARetriedSubmitIgnoresAChangedPriority) {
  const std::string id = Submit(/*priority=*/0, /*gpus=*/0, "req-1");
  ASSERT_TRUE(lifecycle_->SetPriority(id, 9).ok());
  v1::SubmitJobRequest again;
  *again.mutable_spec() = Spec(/*priority=*/0, /*gpus=*/0);
  again.set_request_id("req-1");
  absl::StatusOr<SubmitResult> r = lifecycle_->Submit(again);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->already_existed);
  EXPECT_EQ(r->job.id(), id);
  EXPECT_EQ(r->job.spec().priority(), 9);
}

}  // namespace
}  // namespace trainyard::server
