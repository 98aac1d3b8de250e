// Tests for time limits: CheckTimeLimits over jobs' attempts, and the
// scheduler loop cancelling a running job that reaches its limit.
#include "server/time_limits.h"

#include "common/proto_time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/job_state.h"
#include "server/server_test_fixture.h"

namespace trainyard::server {
namespace {

using ::testing::HasSubstr;

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

// A job limited to `limit_s` whose attempts held workers for `ended`
// (closed attempts, in seconds) and, when `open_s` >= 0, holds one now
// since `open_s` seconds.
JobRecord Held(v1::JobState state, int64_t limit_s, std::vector<int64_t> ended,
               int64_t open_s = -1) {
  JobRecord r;
  r.job.set_id("j-1");
  r.job.set_state(state);
  r.job.mutable_spec()->set_time_limit_s(limit_s);
  absl::Time t = kNow - absl::Hours(10);
  for (int64_t s : ended) {
    v1::Attempt& a = *r.job.add_attempts();
    *a.mutable_start_time() = ToProtoTime(t);
    *a.mutable_end_time() = ToProtoTime(t + absl::Seconds(s));
    t += absl::Hours(1);  // queued in between: not counted
  }
  if (open_s >= 0) {
    *r.job.add_attempts()->mutable_start_time() =
        ToProtoTime(kNow - absl::Seconds(open_s));
  }
  return r;
}

TEST(CheckTimeLimitsTest, CountsEveryAttemptButNotTheQueue) {
  TimeLimitCheck c = CheckTimeLimits({Held(v1::RUNNING, 60, {40}, 15)}, kNow);
  EXPECT_TRUE(c.stops.empty());
  EXPECT_EQ(c.next, kNow + absl::Seconds(5));

  c = CheckTimeLimits({Held(v1::RUNNING, 60, {40}, 25)}, kNow);
  ASSERT_EQ(c.stops.size(), 1u);
  EXPECT_EQ(c.stops[0].job_id, "j-1");
  EXPECT_EQ(c.stops[0].reason,
            "time limit reached: held workers for 1m5s (time_limit_s: 60)");
  EXPECT_EQ(c.next, absl::InfiniteFuture());

  // Preempted right at its limit: stopped while queued, before it runs.
  c = CheckTimeLimits({Held(v1::QUEUED, 60, {30, 30})}, kNow);
  EXPECT_EQ(c.stops.size(), 1u);
  c = CheckTimeLimits({Held(v1::QUEUED, 60, {30, 29})}, kNow);
  EXPECT_TRUE(c.stops.empty());
  EXPECT_EQ(c.next, absl::InfiniteFuture()) << "a queued job holds nothing";
}

TEST(CheckTimeLimitsTest, SkipsUnlimitedEndedAndAlreadyCancelledJobs) {
  JobRecord cancelling = Held(v1::RUNNING, 60, {}, 100);
  cancelling.cancel_reason = "cancelled by user";
  const TimeLimitCheck c =
      CheckTimeLimits({Held(v1::RUNNING, 0, {}, 100000),
                       Held(v1::SUCCEEDED, 60, {100}), cancelling},
                      kNow);
  EXPECT_TRUE(c.stops.empty());
  EXPECT_EQ(c.next, absl::InfiniteFuture());
}

// An open attempt counts only as far as its workers were heard from (plus
// the lease): `held_until`.
TEST(CheckTimeLimitsTest, AnOpenAttemptCountsUpToWhereItsWorkerWasHeard) {
  const JobRecord r = Held(v1::RUNNING, 60, {40}, 30);
  auto until = [](absl::Duration before_now) {
    return [before_now](const JobRecord&) { return kNow - before_now; };
  };
  TimeLimitCheck c = CheckTimeLimits({r}, kNow, until(absl::Seconds(15)));
  EXPECT_TRUE(c.stops.empty()) << "held 40 + 15 s";
  c = CheckTimeLimits({r}, kNow, until(absl::ZeroDuration()));
  EXPECT_EQ(c.stops.size(), 1u);
  // Never past now, whatever it says.
  c = CheckTimeLimits({Held(v1::RUNNING, 60, {40}, 15)}, kNow,
                      until(-absl::Hours(1)));
  EXPECT_TRUE(c.stops.empty());
}

class TimeLimitPassTest : public ServerLogicTest {
 protected:
  TimeLimitPassTest() {
    SchedulerLoopOptions options;
    options.on_time_limit_stop = [this] { ++stops_; };
    loop_ = std::make_unique<SchedulerLoop>(store_.get(), registry_.get(),
                                            lifecycle_.get(), &policy_, &clock_,
                                            options);
  }
  int stops_ = 0;
};

TEST_F(TimeLimitPassTest, ARunningJobIsCancelledWhenItReachesItsLimit) {
  v1::SubmitJobRequest req;
  *req.mutable_spec() = Spec();
  req.mutable_spec()->set_time_limit_s(60);
  absl::StatusOr<SubmitResult> submitted = lifecycle_->Submit(req);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const std::string id = submitted->job.id();
  FakeWorker& w = Connect("w1");
  Pass();
  ASSERT_EQ(w.Assignments().size(), 1u);
  ASSERT_TRUE(w.Started(id, 1).ok());

  auto cancels = [&] {
    int n = 0;
    for (const v1::ServerMessage& m : w.link->Take()) n += m.has_cancel();
    return n;
  };
  AdvanceWithHeartbeats(absl::Seconds(59));
  Pass();
  EXPECT_EQ(cancels(), 0);
  EXPECT_EQ(Job(id).job.state(), v1::RUNNING);

  AdvanceWithHeartbeats(absl::Seconds(1));
  Pass();
  EXPECT_EQ(cancels(), 1);
  EXPECT_EQ(stops_, 1);
  EXPECT_THAT(Job(id).job.state_reason(),
              HasSubstr("cancel requested: time limit reached: held workers "
                        "for 1m (time_limit_s: 60)"));
  Pass();  // asked once: the cancel is already on its way
  EXPECT_EQ(cancels(), 0);
  EXPECT_EQ(stops_, 1);

  ASSERT_TRUE(w.Exited(id, 1, 3, "", /*cancelled=*/true).ok());
  const JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::CANCELLED);
  EXPECT_THAT(r.job.state_reason(), HasSubstr("time limit reached"));
}

// The server is down 40 s while a job limited to 40 s runs: its worker
// stops it when its lease runs out, and reports that once the server is
// back. Neither the pass before the worker is back nor the one after
// counts the server's downtime as time held: the job runs again.
TEST_F(TimeLimitPassTest, TimeTheServerWasDownDoesNotCountAgainstTheLimit) {
  v1::SubmitJobRequest req;
  *req.mutable_spec() = Spec();
  req.mutable_spec()->set_time_limit_s(40);
  absl::StatusOr<SubmitResult> submitted = lifecycle_->Submit(req);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const std::string id = submitted->job.id();
  const absl::Time t0 = clock_.Now();
  FakeWorker& w = Connect("w1");
  Pass();
  ASSERT_EQ(w.Assignments().size(), 1u);
  ASSERT_TRUE(w.Started(id, 1).ok());
  AdvanceWithHeartbeats(absl::Seconds(10));
  Pass();  // the server's last sign of life: t0 + 10 s

  // Down for 40 s. The worker, unheard, stopped the job 8 s after its last
  // answered heartbeat; it reconnects a little after the restart.
  clock_.Advance(absl::Seconds(40));
  Boot();
  Pass();
  EXPECT_EQ(Job(id).job.state(), v1::RUNNING)
      << Job(id).job.state_reason() << ": held up to t0 + 20 s at most";
  // Its hello says the job ended at t0 + 18 s, the exit report to follow;
  // a pass in between (the hello wakes the scheduler) counts up to then.
  FakeWorker& back =
      Connect("w1", 1, 0, {{id, 1}}, {{id, t0 + absl::Seconds(18)}});
  Pass();
  ASSERT_EQ(Job(id).job.state(), v1::RUNNING) << Job(id).job.state_reason();
  EXPECT_FALSE(Job(id).cancel_requested()) << Job(id).cancel_reason;
  ASSERT_TRUE(back.Update(id, 1,
                          [&](v1::JobUpdate& u) {
                            u.mutable_exited()->set_exit_code(4);
                            u.mutable_exited()->set_lost_server(true);
                            *u.mutable_exited()->mutable_exit_time() =
                                ToProtoTime(t0 + absl::Seconds(18));
                          })
                  .ok());
  const JobRecord queued = Job(id);
  EXPECT_EQ(queued.job.state(), v1::QUEUED);
  EXPECT_EQ(TimeHeld(queued.job, clock_.Now()), absl::Seconds(18));
  Pass();
  EXPECT_EQ(Job(id).job.state(), v1::SCHEDULED) << Job(id).job.state_reason();
}

}  // namespace
}  // namespace trainyard::server
