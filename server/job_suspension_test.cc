// Suspend and resume through the server's logic: a first-fit scheduler
// loop, a real store, fake workers.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/job_state.h"
#include "server/server_test_fixture.h"

namespace trainyard::server {
namespace {

using ::testing::HasSubstr;

class JobSuspensionTest : public ServerLogicTest {
 protected:
  absl::Status Exit(FakeWorker& w, const std::string& job, int attempt,
                    int code, int signal = 0) {
    return w.Update(job, attempt, [&](v1::JobUpdate& u) {
      u.mutable_exited()->set_exit_code(code);
      u.mutable_exited()->set_signal(signal);
    });
  }
};

TEST_F(JobSuspensionTest, AQueuedJobIsParkedAndNotScheduledUntilResumed) {
  const std::string id = Submit();
  absl::StatusOr<v1::Job> s = lifecycle_->Suspend(id, "");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->state(), v1::SUSPENDED);
  EXPECT_EQ(s->state_reason(), "suspended by user");

  FakeWorker& w = Connect("w1");
  Pass();
  EXPECT_TRUE(w.Assignments().empty()) << "a suspended job is not placed";
  EXPECT_EQ(Job(id).job.state(), v1::SUSPENDED);

  absl::StatusOr<v1::Job> r = lifecycle_->Resume(id);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->state(), v1::QUEUED);
  EXPECT_EQ(r->state_reason(), "resumed by user");
  Pass();
  ASSERT_EQ(w.Assignments().size(), 1u);
  EXPECT_EQ(Job(id).job.state(), v1::SCHEDULED);
}

TEST_F(JobSuspensionTest, ARunningJobCheckpointsThenIsParkedAndResumesLater) {
  FakeWorker& w = Connect("w1");
  const std::string id = RunJobOn(w);
  w.link->Take();

  absl::StatusOr<v1::Job> s = lifecycle_->Suspend(id, "GPUs for the demo");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->state(), v1::PREEMPTING);
  EXPECT_EQ(s->suspend_reason(), "GPUs for the demo");
  EXPECT_EQ(s->state_reason(), "suspending: GPUs for the demo");
  const std::vector<v1::Preempt> sent = w.Preempts();
  ASSERT_EQ(sent.size(), 1u) << "stopped the way a preemption stops it";
  EXPECT_EQ(sent[0].job_id(), id);
  EXPECT_EQ(sent[0].attempt(), 1);

  // A second suspend while it stops changes nothing and sends nothing.
  ASSERT_TRUE(lifecycle_->Suspend(id, "again").ok());
  EXPECT_TRUE(w.link->Take().empty());
  EXPECT_EQ(Job(id).job.suspend_reason(), "GPUs for the demo");

  // yard-train checkpointed at step 40 and exited 3.
  ASSERT_TRUE(w.Update(id, 1, [](v1::JobUpdate& u) {
                 u.mutable_trainer()->mutable_interrupted()->set_step(40);
               }).ok());
  ASSERT_TRUE(Exit(w, id, 1, 3).ok());
  v1::Job job = Job(id).job;
  EXPECT_EQ(job.state(), v1::SUSPENDED);
  EXPECT_EQ(job.state_reason(), "GPUs for the demo");
  EXPECT_TRUE(job.suspend_reason().empty());
  EXPECT_TRUE(job.worker_id().empty());
  ASSERT_EQ(job.attempts_size(), 1);
  EXPECT_EQ(job.attempts(0).outcome(), v1::SUSPENDED);
  EXPECT_EQ(job.last_checkpoint().step(), 40);

  // The slot is free: nothing runs while it is parked.
  Pass();
  EXPECT_TRUE(w.Assignments().empty());

  ASSERT_TRUE(lifecycle_->Resume(id).ok());
  Pass();
  const std::vector<v1::Assignment> a = w.Assignments();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].attempt(), 2);
  EXPECT_EQ(a[0].checkpoint_dir(), job.checkpoint_dir())
      << "it resumes from the same checkpoints";
}

TEST_F(JobSuspensionTest, KilledAfterTheGracePeriodIsParkedToo) {
  FakeWorker& w = Connect("w1");
  const std::string id = RunJobOn(w);
  ASSERT_TRUE(lifecycle_->Suspend(id, "").ok());
  ASSERT_TRUE(Exit(w, id, 1, 0, /*signal=*/9).ok());
  EXPECT_EQ(Job(id).job.state(), v1::SUSPENDED);
}

TEST_F(JobSuspensionTest, AScheduledJobIsParkedAtOnceAndItsAttemptStopped) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  Pass();
  w.link->Take();
  ASSERT_EQ(Job(id).job.state(), v1::SCHEDULED);
  ASSERT_EQ(lifecycle_->Suspend(id, "")->state(), v1::SUSPENDED);
  const std::vector<v1::ServerMessage> sent = w.link->Take();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].stop_attempt().job_id(), id);
  EXPECT_EQ(sent[0].stop_attempt().attempt(), 1);
  EXPECT_EQ(Job(id).job.attempts(0).outcome(), v1::SUSPENDED);
  // Its start report comes too late: it is stale, and stopped again.
  ASSERT_TRUE(w.Started(id, 1).ok());
  const std::vector<v1::ServerMessage> again = w.link->Take();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].stop_attempt().job_id(), id);
  EXPECT_EQ(Job(id).job.state(), v1::SUSPENDED);
}

TEST_F(JobSuspensionTest, AJobStoppingForAPreemptionIsParkedInstead) {
  FakeWorker& w = Connect("w1");
  const std::string id = RunJobOn(w);
  ASSERT_TRUE(lifecycle_->Preempt(id, "w1", "preempted by j-x").ok());
  w.link->Take();
  absl::StatusOr<v1::Job> s = lifecycle_->Suspend(id, "later");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->state(), v1::PREEMPTING);
  EXPECT_EQ(s->state_reason(), "preempted by j-x; then suspended");
  EXPECT_TRUE(w.link->Take().empty()) << "it is already stopping";
  ASSERT_TRUE(Exit(w, id, 1, 3).ok());
  EXPECT_EQ(Job(id).job.state(), v1::SUSPENDED);
  EXPECT_EQ(Job(id).job.state_reason(), "later");
}

TEST_F(JobSuspensionTest, ResumedBeforeItStoppedItIsQueuedNotParked) {
  FakeWorker& w = Connect("w1");
  const std::string id = RunJobOn(w);
  ASSERT_TRUE(lifecycle_->Suspend(id, "").ok());
  absl::StatusOr<v1::Job> r = lifecycle_->Resume(id);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->state(), v1::PREEMPTING);
  EXPECT_TRUE(r->suspend_reason().empty());
  ASSERT_TRUE(Exit(w, id, 1, 3).ok());
  EXPECT_EQ(Job(id).job.state(), v1::QUEUED);
  EXPECT_EQ(Job(id).job.state_reason(),
            "resumed by user before it had stopped");
}

TEST_F(JobSuspensionTest, ALostWorkerParksItsSuspendingJob) {
  FakeWorker& w = Connect("w1");
  const std::string id = RunJobOn(w);
  ASSERT_TRUE(lifecycle_->Suspend(id, "").ok());
  w.session->Close();
  clock_.Advance(kLease + absl::Seconds(1));
  Pass();
  EXPECT_EQ(Job(id).job.state(), v1::SUSPENDED);
}

// A job that fails while stopping for a suspend (its checkpoint could not
// be written: a full disk) is parked as asked, with or without restarts
// left and without spending one; its attempt is FAILED with the error, and
// the job's reason says both.
TEST_F(JobSuspensionTest, AFailureWhileStoppingIsParkedWithItsErrorNoRestart) {
  for (const int max_restarts : {2, 0}) {
    SCOPED_TRACE(max_restarts);
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec();
    req.mutable_spec()->set_max_restarts(max_restarts);
    absl::StatusOr<SubmitResult> sub = lifecycle_->Submit(req);
    ASSERT_TRUE(sub.ok()) << sub.status();
    const std::string id = sub->job.id();
    FakeWorker& w = Connect(absl::StrCat("w", max_restarts));
    Pass();
    ASSERT_TRUE(w.Started(id, 1).ok());
    ASSERT_TRUE(lifecycle_->Suspend(id, "").ok());
    ASSERT_TRUE(w.Update(id, 1, [](v1::JobUpdate& u) {
                   u.mutable_exited()->set_exit_code(1);
                   u.mutable_exited()->set_error(
                       "cannot write checkpoint: No space left on device");
                 }).ok());
    const v1::Job job = Job(id).job;
    EXPECT_EQ(job.state(), v1::SUSPENDED);
    EXPECT_EQ(job.restarts(), 0);
    EXPECT_FALSE(job.has_restart_after());
    EXPECT_EQ(job.state_reason(),
              "suspended by user; the attempt failed while stopping: cannot "
              "write checkpoint: No space left on device");
    ASSERT_EQ(job.attempts_size(), 1);
    EXPECT_EQ(job.attempts(0).outcome(), v1::FAILED);
    EXPECT_EQ(job.attempts(0).reason(),
              "cannot write checkpoint: No space left on device");
    // It resumes as any suspended job does.
    absl::StatusOr<v1::Job> r = lifecycle_->Resume(id);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->state(), v1::QUEUED);
    ASSERT_TRUE(lifecycle_->Cancel(id, "").ok());
  }
}

TEST_F(JobSuspensionTest, FinishingWhileStoppingKeepsTheRealOutcome) {
  FakeWorker& w = Connect("w1");
  const std::string id = RunJobOn(w);
  ASSERT_TRUE(lifecycle_->Suspend(id, "").ok());
  ASSERT_TRUE(w.Exited(id, 1, 0).ok());
  const v1::Job job = Job(id).job;
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
  EXPECT_TRUE(job.suspend_reason().empty());
}

TEST_F(JobSuspensionTest, ASuspendedJobCanBeCancelledButNotDeleted) {
  const std::string id = Submit();
  ASSERT_TRUE(lifecycle_->Suspend(id, "").ok());
  absl::StatusOr<DeletedJob> d = lifecycle_->Delete(id, false);
  EXPECT_TRUE(absl::IsFailedPrecondition(d.status())) << d.status();
  absl::StatusOr<v1::Job> c = lifecycle_->Cancel(id, "");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->state(), v1::CANCELLED);
}

TEST_F(JobSuspensionTest, RefusalsNameTheJobAndItsState) {
  const std::string queued = Submit();
  absl::StatusOr<v1::Job> r = lifecycle_->Resume(queued);
  EXPECT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr(absl::StrCat("job ", queued,
                                                           " is not suspended "
                                                           "(QUEUED)")));

  ASSERT_TRUE(lifecycle_->Cancel(queued, "").ok());
  absl::StatusOr<v1::Job> s = lifecycle_->Suspend(queued, "");
  EXPECT_TRUE(absl::IsFailedPrecondition(s.status())) << s.status();
  EXPECT_THAT(s.status().message(), HasSubstr("is already CANCELLED"));

  FakeWorker& w = Connect("w1");
  const std::string running = RunJobOn(w);
  ASSERT_TRUE(lifecycle_->Cancel(running, "").ok());
  s = lifecycle_->Suspend(running, "");
  EXPECT_TRUE(absl::IsFailedPrecondition(s.status())) << s.status();
  EXPECT_THAT(s.status().message(), HasSubstr("is being cancelled"));

  EXPECT_TRUE(absl::IsNotFound(lifecycle_->Suspend("j-nope", "").status()));
  EXPECT_TRUE(absl::IsNotFound(lifecycle_->Resume("j-nope").status()));
}

TEST_F(JobSuspensionTest, ASuspendSurvivesARestartOfTheServer) {
  FakeWorker& w = Connect("w1");
  const std::string id = RunJobOn(w);
  const std::string parked = Submit();
  ASSERT_TRUE(lifecycle_->Suspend(id, "").ok());
  ASSERT_TRUE(lifecycle_->Suspend(parked, "").ok());
  Boot();
  EXPECT_EQ(Job(parked).job.state(), v1::SUSPENDED);
  EXPECT_FALSE(Job(id).job.suspend_reason().empty());
  // The worker comes back still running it, then reports its exit.
  FakeWorker& again = Connect("w1", 1, 0, {{id, 1}});
  ASSERT_TRUE(Exit(again, id, 1, 3).ok());
  EXPECT_EQ(Job(id).job.state(), v1::SUSPENDED);
}

TEST(JobStateSuspendTest, TheStateMachineAllowsExactlyTheSuspendPaths) {
  EXPECT_TRUE(CheckTransition("j", v1::QUEUED, v1::SUSPENDED).ok());
  EXPECT_TRUE(CheckTransition("j", v1::SCHEDULED, v1::SUSPENDED).ok());
  EXPECT_TRUE(CheckTransition("j", v1::PREEMPTING, v1::SUSPENDED).ok());
  EXPECT_TRUE(CheckTransition("j", v1::SUSPENDED, v1::QUEUED).ok());
  EXPECT_TRUE(CheckTransition("j", v1::SUSPENDED, v1::CANCELLED).ok());
  EXPECT_FALSE(CheckTransition("j", v1::RUNNING, v1::SUSPENDED).ok());
  EXPECT_FALSE(CheckTransition("j", v1::SUSPENDED, v1::SCHEDULED).ok());
  EXPECT_FALSE(CheckTransition("j", v1::SUSPENDED, v1::RUNNING).ok());
  EXPECT_FALSE(CheckTransition("j", v1::SUCCEEDED, v1::SUSPENDED).ok());
  EXPECT_TRUE(IsKnownState(v1::SUSPENDED));
  EXPECT_FALSE(IsActive(v1::SUSPENDED));
  EXPECT_FALSE(IsTerminal(v1::SUSPENDED));
}

}  // namespace
}  // namespace trainyard::server
