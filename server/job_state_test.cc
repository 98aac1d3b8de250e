#include "server/job_state.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/proto_time.h"

namespace trainyard::server {
namespace {

using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

v1::Job NewJob() {
  v1::Job job;
  job.set_id("j-000001");
  job.set_state(v1::QUEUED);
  return job;
}

TEST(JobStateTest, LegalTransitions) {
  const std::vector<std::pair<v1::JobState, v1::JobState>> legal = {
      {v1::QUEUED, v1::SCHEDULED},     {v1::QUEUED, v1::CANCELLED},
      {v1::SCHEDULED, v1::RUNNING},    {v1::SCHEDULED, v1::QUEUED},
      {v1::SCHEDULED, v1::CANCELLED},  {v1::SCHEDULED, v1::FAILED},
      {v1::RUNNING, v1::SUCCEEDED},    {v1::RUNNING, v1::FAILED},
      {v1::RUNNING, v1::CANCELLED},    {v1::RUNNING, v1::QUEUED},
      {v1::RUNNING, v1::PREEMPTING},   {v1::PREEMPTING, v1::QUEUED},
      {v1::PREEMPTING, v1::CANCELLED}, {v1::PREEMPTING, v1::SUCCEEDED},
  };
  for (auto [from, to] : legal) {
    EXPECT_TRUE(CheckTransition("j", from, to).ok())
        << JobStateName(from) << " -> " << JobStateName(to);
  }
}

TEST(JobStateTest, IllegalTransitionsNameBothStates) {
  const std::vector<std::pair<v1::JobState, v1::JobState>> illegal = {
      {v1::QUEUED, v1::RUNNING},      {v1::QUEUED, v1::SUCCEEDED},
      {v1::QUEUED, v1::PREEMPTING},   {v1::SCHEDULED, v1::SUCCEEDED},
      {v1::SUCCEEDED, v1::QUEUED},    {v1::FAILED, v1::RUNNING},
      {v1::CANCELLED, v1::CANCELLED}, {v1::RUNNING, v1::SCHEDULED},
      {v1::PREEMPTING, v1::RUNNING},  {v1::JOB_STATE_UNSPECIFIED, v1::QUEUED},
  };
  for (auto [from, to] : illegal) {
    absl::Status s = CheckTransition("j-000007", from, to);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(s.message(), HasSubstr("j-000007"));
    EXPECT_THAT(s.message(), HasSubstr(JobStateName(from)));
    EXPECT_THAT(s.message(), HasSubstr(JobStateName(to)));
  }
}

TEST(JobStateTest, AttemptsAreNumberedAndClosedWithOutcome) {
  v1::Job job = NewJob();
  auto c1 = StartAttempt(job, "w1", kT0);
  ASSERT_TRUE(c1.ok()) << c1.status();
  EXPECT_EQ(c1->attempt(), 1);
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_EQ(job.worker_id(), "w1");
  ASSERT_TRUE(Transition(job, v1::RUNNING, "started", kT0 + absl::Seconds(1)).ok());
  EXPECT_EQ(FromProtoTime(job.start_time()), kT0 + absl::Seconds(1));
  auto lost = Transition(job, v1::QUEUED, "worker w1 lost", kT0 + absl::Seconds(5));
  ASSERT_TRUE(lost.ok());
  EXPECT_EQ(lost->from(), v1::RUNNING);
  EXPECT_EQ(lost->attempt(), 1);
  EXPECT_EQ(lost->worker_id(), "w1");
  EXPECT_TRUE(job.worker_id().empty());
  ASSERT_EQ(job.attempts_size(), 1);
  EXPECT_EQ(job.attempts(0).outcome(), v1::QUEUED);
  EXPECT_EQ(job.attempts(0).reason(), "worker w1 lost");

  ASSERT_TRUE(StartAttempt(job, "w2", kT0 + absl::Seconds(6)).ok());
  ASSERT_TRUE(Transition(job, v1::RUNNING, "", kT0 + absl::Seconds(7)).ok());
  // The first RUNNING stays the job's start time.
  EXPECT_EQ(FromProtoTime(job.start_time()), kT0 + absl::Seconds(1));
  ASSERT_TRUE(Transition(job, v1::SUCCEEDED, "done", kT0 + absl::Seconds(9)).ok());
  EXPECT_EQ(job.attempt(), 2);
  ASSERT_EQ(job.attempts_size(), 2);
  EXPECT_EQ(job.attempts(1).number(), 2);
  EXPECT_EQ(job.attempts(1).worker_id(), "w2");
  EXPECT_EQ(job.attempts(1).outcome(), v1::SUCCEEDED);
  EXPECT_EQ(FromProtoTime(job.end_time()), kT0 + absl::Seconds(9));
  EXPECT_EQ(job.worker_id(), "w2");  // where it ended
}

TEST(JobStateTest, RejectedTransitionLeavesJobUntouched) {
  v1::Job job = NewJob();
  v1::Job before = job;
  EXPECT_FALSE(Transition(job, v1::SUCCEEDED, "x", kT0).ok());
  EXPECT_FALSE(Transition(job, v1::SCHEDULED, "x", kT0).ok());
  EXPECT_FALSE(StartAttempt(job, "", kT0).ok());
  EXPECT_EQ(job.SerializeAsString(), before.SerializeAsString());
  ASSERT_TRUE(StartAttempt(job, "w", kT0).ok());
  EXPECT_EQ(StartAttempt(job, "w", kT0).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(JobStateTest, CancellingATerminalJobNamesItsState) {
  v1::Job job = NewJob();
  EXPECT_TRUE(CheckNotEnded(job).ok());
  job.set_state(v1::SUCCEEDED);
  absl::Status s = CheckNotEnded(job);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "job j-000001 is already SUCCEEDED");
}

TEST(JobStateTest, Predicates) {
  EXPECT_TRUE(IsTerminal(v1::CANCELLED));
  EXPECT_FALSE(IsTerminal(v1::PREEMPTING));
  EXPECT_TRUE(IsActive(v1::PREEMPTING));
  EXPECT_FALSE(IsActive(v1::QUEUED));
  EXPECT_FALSE(IsKnownState(v1::JOB_STATE_UNSPECIFIED));
  EXPECT_FALSE(IsKnownState(static_cast<v1::JobState>(99)));
  EXPECT_EQ(JobStateName(v1::RUNNING), "RUNNING");
}

TEST(JobStateTest, WhatAQueuedJobWaitsForFirst) {
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  v1::Job job;
  EXPECT_FALSE(AwaitsDependencies(job));
  EXPECT_FALSE(AwaitsWarmStartSource(job));
  EXPECT_FALSE(InRestartBackoff(job, now));
  job.mutable_spec()->add_depends_on("j-000001");
  EXPECT_TRUE(AwaitsDependencies(job));
  job.set_dependencies_met(true);
  EXPECT_FALSE(AwaitsDependencies(job));
  job.mutable_spec()->mutable_warm_start()->set_job("j-000002");
  EXPECT_TRUE(AwaitsWarmStartSource(job));
  job.set_warm_start_checkpoint("ckpt/j-000002/step-00000100");
  EXPECT_FALSE(AwaitsWarmStartSource(job));
  *job.mutable_restart_after() = ToProtoTime(now + absl::Seconds(2));
  EXPECT_TRUE(InRestartBackoff(job, now));
  EXPECT_FALSE(InRestartBackoff(job, now + absl::Seconds(2)));
}

// An attempt ends when its worker saw it end (a reported exit, perhaps
// heard of much later), kept within [its assignment, now] whatever the
// worker's clock says; the job, when it ends with it, too.
TEST(JobStateTest, AnAttemptEndsWhenItsWorkerSawItEndWithinItsSpan) {
  v1::Job job = NewJob();
  ASSERT_TRUE(StartAttempt(job, "w1", kT0).ok());
  ASSERT_TRUE(Transition(job, v1::RUNNING, "", kT0 + absl::Seconds(1)).ok());
  const absl::Time heard = kT0 + absl::Seconds(100);
  ASSERT_TRUE(
      Transition(job, v1::QUEUED, "lost", heard, kT0 + absl::Seconds(10)).ok());
  EXPECT_EQ(FromProtoTime(job.attempts(0).end_time()), kT0 + absl::Seconds(10));
  EXPECT_EQ(TimeHeld(job, heard), absl::Seconds(10));

  // A worker clock ahead: the end is now, not in the future.
  ASSERT_TRUE(StartAttempt(job, "w1", heard).ok());
  ASSERT_TRUE(Transition(job, v1::RUNNING, "", heard).ok());
  const absl::Time now = heard + absl::Seconds(30);
  ASSERT_TRUE(Transition(job, v1::QUEUED, "x", now, now + absl::Hours(1)).ok());
  EXPECT_EQ(FromProtoTime(job.attempts(1).end_time()), now);

  // A worker clock behind: not before the assignment. The job's end is
  // that too, though never before it first ran.
  ASSERT_TRUE(StartAttempt(job, "w1", now + absl::Seconds(5)).ok());
  ASSERT_TRUE(Transition(job, v1::RUNNING, "", now + absl::Seconds(6)).ok());
  ASSERT_TRUE(Transition(job, v1::SUCCEEDED, "finished",
                         now + absl::Seconds(20), now - absl::Hours(1))
                  .ok());
  EXPECT_EQ(FromProtoTime(job.attempts(2).end_time()), now + absl::Seconds(5));
  EXPECT_EQ(FromProtoTime(job.end_time()), now + absl::Seconds(5));
  EXPECT_EQ(TimeHeld(job, now + absl::Hours(2)), absl::Seconds(10 + 30));

  // Ending at a reported time between its start and now.
  v1::Job other = NewJob();
  ASSERT_TRUE(StartAttempt(other, "w1", kT0).ok());
  ASSERT_TRUE(Transition(other, v1::RUNNING, "", kT0 + absl::Seconds(2)).ok());
  ASSERT_TRUE(Transition(other, v1::FAILED, "boom", kT0 + absl::Seconds(50),
                         kT0 + absl::Seconds(7))
                  .ok());
  EXPECT_EQ(FromProtoTime(other.end_time()), kT0 + absl::Seconds(7));
}

// The queue's age counts from when the job last became QUEUED, not from
// its last attempt's end: time spent suspended does not count.
TEST(JobStateTest, QueuedSinceIsWhenTheJobLastBecameQueued) {
  v1::Job job = NewJob();
  *job.mutable_create_time() = ToProtoTime(kT0);
  EXPECT_EQ(QueuedSince(job), kT0) << "a record from before queue_time";
  ASSERT_TRUE(
      Transition(job, v1::SUSPENDED, "user", kT0 + absl::Seconds(5)).ok());
  ASSERT_TRUE(
      Transition(job, v1::QUEUED, "resumed", kT0 + absl::Seconds(20)).ok());
  EXPECT_EQ(QueuedSince(job), kT0 + absl::Seconds(20));

  ASSERT_TRUE(StartAttempt(job, "w1", kT0 + absl::Seconds(21)).ok());
  ASSERT_TRUE(Transition(job, v1::RUNNING, "", kT0 + absl::Seconds(22)).ok());
  ASSERT_TRUE(Transition(job, v1::QUEUED, "lost", kT0 + absl::Seconds(40),
                         kT0 + absl::Seconds(30))
                  .ok());
  EXPECT_EQ(QueuedSince(job), kT0 + absl::Seconds(40))
      << "it joined the queue when handed back, not when the attempt ended";
}

}  // namespace
}  // namespace trainyard::server
