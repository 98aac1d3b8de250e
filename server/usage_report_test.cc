// Usage accounting: what attempts hold (attempt_usage.h), the sums of a
// report (usage_report.h), and the store's usage table through the
// server's logic (a real store, fake workers, a fake clock).
#include "server/usage_report.h"

#include "common/field_errors.h"
#include "common/proto_time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/job_state.h"
#include "server/server_test_fixture.h"

namespace trainyard::server {
namespace {

using ::testing::HasSubstr;

constexpr absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

AttemptUsage Attempt(std::string job, int32_t n, std::string tenant,
                     absl::Time start, absl::Time end, Holding held,
                     v1::JobState outcome = v1::SUCCEEDED) {
  AttemptUsage u;
  u.job_id = std::move(job);
  u.attempt = n;
  u.tenant = std::move(tenant);
  u.job_name = absl::StrCat("name of ", u.job_id);
  u.start = start;
  u.end = end;
  u.held = held;
  u.outcome = outcome;
  return u;
}

UsageQuery Window(absl::Time start, absl::Time end, bool by_job = true,
                  std::string tenant = "") {
  UsageQuery q;
  q.start = start;
  q.end = end;
  q.by_job = by_job;
  q.tenant = std::move(tenant);
  return q;
}

TEST(PlacementHoldingTest, CountsWholeAndSharedGpusOnEveryPartAndCpuRanks) {
  v1::Job job;
  job.mutable_spec()->mutable_resources()->set_gpus(3);
  EXPECT_EQ(PlacementHolding(job, 3), (Holding{3000, 0}));

  // Shared: the grant's share of each GPU; a gang part with its own.
  job.add_gpu_grants()->set_compute_milli(250);
  job.add_gpu_grants()->set_compute_milli(250);
  v1::GangPart* part = job.add_gang_parts();
  part->add_gpu_indices(0);
  part->add_gpu_grants()->set_compute_milli(400);
  EXPECT_EQ(PlacementHolding(job, 2), (Holding{2 * 250 + 400, 0}));

  // A whole-GPU part beside a shared one.
  job.clear_gpu_grants();
  EXPECT_EQ(PlacementHolding(job, 2), (Holding{2000 + 400, 0}));

  v1::Job cpu;
  EXPECT_EQ(PlacementHolding(cpu, 0), (Holding{0, 1}));
  cpu.mutable_spec()->mutable_resources()->set_cpu_ranks(4);
  cpu.add_gang_parts()->set_ranks(2);  // spread: all ranks still count once
  EXPECT_EQ(PlacementHolding(cpu, 0), (Holding{0, 4}));
}

TEST(AttemptHoldingTest, AnAttemptFromBeforeAccountingIsChargedItsSpec) {
  v1::Job job;
  job.mutable_spec()->mutable_resources()->set_gpus(2);
  v1::Attempt old;
  EXPECT_EQ(AttemptHolding(job, old), (Holding{2000, 0}));
  job.mutable_spec()->mutable_resources()->set_gpu_compute_milli(300);
  EXPECT_EQ(AttemptHolding(job, old), (Holding{600, 0}));
  v1::Attempt recorded;
  recorded.set_gpu_milli(500);
  EXPECT_EQ(AttemptHolding(job, recorded), (Holding{500, 0}));

  v1::Job cpu;
  cpu.mutable_spec()->mutable_resources()->set_cpu_ranks(3);
  EXPECT_EQ(AttemptHolding(cpu, old), (Holding{0, 3}));
}

// A shared GPU's share was granted by the scheduler (in proportion to the
// job's memory when the spec names none): an attempt from before
// accounting is charged the grants its job's record carries, not whole
// GPUs.
TEST(AttemptHoldingTest, AnAttemptFromBeforeAccountingIsChargedItsGrants) {
  v1::Job job;
  job.mutable_spec()->mutable_resources()->set_gpus(2);
  job.set_attempt(3);
  job.add_gpu_grants()->set_compute_milli(100);
  job.add_gpu_grants()->set_compute_milli(100);
  v1::Attempt current;
  current.set_number(3);
  EXPECT_EQ(AttemptHolding(job, current), (Holding{200, 0}));

  // A part on another worker with a grant of its own.
  job.mutable_spec()->mutable_resources()->set_gpus(3);
  v1::GangPart* part = job.add_gang_parts();
  part->add_gpu_indices(1);
  part->add_gpu_grants()->set_compute_milli(250);
  EXPECT_EQ(AttemptHolding(job, current), (Holding{200 + 250, 0}));

  // The grants are the current attempt's: an earlier one is charged what
  // its spec asks for.
  v1::Attempt earlier;
  earlier.set_number(2);
  EXPECT_EQ(AttemptHolding(job, earlier), (Holding{3000, 0}));
}

TEST(SumUsageTest, CutsAttemptsToTheWindowBySplittingTenantsAndJobs) {
  const absl::Duration h = absl::Hours(1);
  const std::vector<AttemptUsage> attempts = {
      // a's job 1: a failed attempt that began before the window, then a
      // second that ran past its end; 2 GPUs each.
      Attempt("j-1", 1, "a", kT0 - h, kT0 + h, {2000, 0}, v1::FAILED),
      Attempt("j-1", 2, "a", kT0 + h, kT0 + 3 * h, {2000, 0}),
      // b's CPU job of 2 slots, half an hour.
      Attempt("j-2", 1, "b", kT0, kT0 + h / 2, {0, 2}, v1::CANCELLED),
      // a's job 3: a quarter GPU for an hour, still running.
      Attempt("j-3", 1, "a", kT0, kT0 + h, {250, 0}, v1::JOB_STATE_UNSPECIFIED),
      // Outside the window: before it, after it, and ending at its start.
      Attempt("j-4", 1, "a", kT0 - 3 * h, kT0 - 2 * h, {1000, 0}),
      Attempt("j-5", 1, "b", kT0 + 2 * h, kT0 + 3 * h, {1000, 0}),
      Attempt("j-6", 1, "b", kT0 - h, kT0, {1000, 0}),
      // Listed twice (ended, then as running): the first counts.
      Attempt("j-1", 2, "a", kT0 + h, kT0 + 90 * absl::Minutes(1), {2000, 0}),
  };
  const v1::UsageReport r = SumUsage(attempts, Window(kT0, kT0 + 2 * h));

  EXPECT_EQ(FromProtoTime(r.start_time()), kT0);
  EXPECT_EQ(FromProtoTime(r.end_time()), kT0 + 2 * h);
  ASSERT_EQ(r.tenants_size(), 2);
  const v1::UsageRow& a = r.tenants(0);
  EXPECT_EQ(a.tenant(), "a");
  EXPECT_EQ(a.jobs(), 2);
  EXPECT_EQ(a.attempts(), 3);
  EXPECT_DOUBLE_EQ(a.gpu_seconds(), 2 * 3600 + 2 * 3600 + 0.25 * 3600);
  EXPECT_DOUBLE_EQ(a.failed_gpu_seconds(), 2 * 3600);
  EXPECT_DOUBLE_EQ(a.cpu_slot_seconds(), 0);
  const v1::UsageRow& b = r.tenants(1);
  EXPECT_EQ(b.tenant(), "b");
  EXPECT_EQ(b.jobs(), 1);
  EXPECT_EQ(b.attempts(), 1);
  EXPECT_DOUBLE_EQ(b.gpu_seconds(), 0);
  EXPECT_DOUBLE_EQ(b.cpu_slot_seconds(), 2 * 1800);
  EXPECT_DOUBLE_EQ(b.failed_cpu_slot_seconds(), 0);

  EXPECT_EQ(r.total().jobs(), 3);
  EXPECT_EQ(r.total().attempts(), 4);
  EXPECT_DOUBLE_EQ(r.total().gpu_seconds(), a.gpu_seconds());
  EXPECT_DOUBLE_EQ(r.total().cpu_slot_seconds(), b.cpu_slot_seconds());
  EXPECT_TRUE(r.total().tenant().empty());

  // By job: the most GPU-seconds first, then CPU slot-seconds.
  ASSERT_EQ(r.jobs_size(), 3);
  EXPECT_EQ(r.jobs(0).job_id(), "j-1");
  EXPECT_EQ(r.jobs(0).job_name(), "name of j-1");
  EXPECT_EQ(r.jobs(0).attempts(), 2);
  EXPECT_DOUBLE_EQ(r.jobs(0).gpu_seconds(), 4 * 3600);
  EXPECT_EQ(r.jobs(1).job_id(), "j-3");
  EXPECT_EQ(r.jobs(2).job_id(), "j-2");
  EXPECT_EQ(r.jobs(2).tenant(), "b");
  EXPECT_FALSE(r.jobs_truncated());

  // One tenant only, and no job rows unless asked.
  const v1::UsageReport only_b =
      SumUsage(attempts, Window(kT0, kT0 + 2 * h, false, "b"));
  ASSERT_EQ(only_b.tenants_size(), 1);
  EXPECT_EQ(only_b.tenants(0).tenant(), "b");
  EXPECT_EQ(only_b.total().attempts(), 1);
  EXPECT_EQ(only_b.jobs_size(), 0);

  EXPECT_EQ(SumUsage({}, Window(kT0, kT0 + h)).tenants_size(), 0);
}

TEST(SumUsageTest, HoldsAtMostTheJobRowLimitAndSaysSo) {
  std::vector<AttemptUsage> attempts;
  for (int i = 0; i < kMaxUsageJobRows + 5; ++i) {
    attempts.push_back(Attempt(absl::StrCat("j-", 10000 + i), 1, "a", kT0,
                               kT0 + absl::Seconds(1 + i), {1000, 0}));
  }
  const v1::UsageReport r =
      SumUsage(attempts, Window(kT0, kT0 + absl::Hours(2)));
  EXPECT_EQ(r.jobs_size(), kMaxUsageJobRows);
  EXPECT_TRUE(r.jobs_truncated());
  EXPECT_EQ(r.jobs(0).job_id(),
            absl::StrCat("j-", 10000 + kMaxUsageJobRows + 4));
  EXPECT_EQ(r.total().jobs(), kMaxUsageJobRows + 5);  // totals count all
}

TEST(UsageQueryTest, DefaultsToTheLastWeekAndRefusesABackwardWindow) {
  const absl::Time now = kT0;
  v1::GetUsageRequest req;
  absl::StatusOr<UsageQuery> q = UsageQueryOf(req, now);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->end, now);
  EXPECT_EQ(q->start, now - absl::Hours(24 * 7));

  // An end in the future is now; a start alone counts up to now.
  *req.mutable_end_time() = ToProtoTime(now + absl::Hours(5));
  *req.mutable_start_time() = ToProtoTime(now - absl::Hours(1));
  req.set_tenant("a");
  req.set_by_job(true);
  q = UsageQueryOf(req, now);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->end, now);
  EXPECT_EQ(q->start, now - absl::Hours(1));
  EXPECT_EQ(q->tenant, "a");
  EXPECT_TRUE(q->by_job);

  *req.mutable_start_time() = ToProtoTime(now + absl::Hours(1));
  q = UsageQueryOf(req, now);
  EXPECT_EQ(q.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(q.status().message(),
              HasSubstr("start_time: 2027-01-15T09:00:00Z is not before the "
                        "window's end 2027-01-15T08:00:00Z (now)"));

  *req.mutable_end_time() = ToProtoTime(now - absl::Hours(2));
  *req.mutable_start_time() = ToProtoTime(now - absl::Hours(2));
  q = UsageQueryOf(req, now);
  EXPECT_EQ(q.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(q.status().message(), HasSubstr("(end_time)"));

  req.clear_end_time();
  req.mutable_start_time()->set_seconds(-10);
  q = UsageQueryOf(req, now);
  EXPECT_EQ(q.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(q.status().message(), HasSubstr("before 1970"));

  // With only an end early in 1970, the default window starts at 1970.
  req.clear_start_time();
  req.mutable_end_time()->set_seconds(100);
  q = UsageQueryOf(req, now);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->start, absl::UnixEpoch());
  EXPECT_EQ(q->end, absl::FromUnixSeconds(100));
  req.clear_end_time();

  // Timestamps outside their definition name the part that is wrong.
  req.mutable_start_time()->set_seconds(0);
  req.mutable_start_time()->set_nanos(2'000'000'000);
  q = UsageQueryOf(req, now);
  EXPECT_EQ(q.status().message(),
            "start_time.nanos: 2000000000 is outside [0, 999999999]");
  req.clear_start_time();
  req.mutable_end_time()->set_seconds(1'000'000'000'000'000);
  q = UsageQueryOf(req, now);
  EXPECT_EQ(q.status().message(),
            "end_time.seconds: 1000000000000000 is outside years 1 to 9999");
  EXPECT_TRUE(IsAboutField(q.status(), "end_time"));
}

class UsageReportTest : public ServerLogicTest {
 protected:
  v1::UsageReport Report(absl::Time start, std::string tenant = "") {
    const absl::Time now = clock_.Now();
    auto r = ReportUsage(
        *store_, Window(start, now, true, std::move(tenant)), now,
        [this](const JobRecord& job) { return lifecycle_->HeldUntil(job); });
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : v1::UsageReport{};
  }
};

TEST_F(UsageReportTest, AttemptsAreChargedFromAssignmentToEndAndOutliveTheJob) {
  const absl::Time t0 = clock_.Now();
  FakeWorker& w = Connect("w1", /*slots=*/1, /*gpus=*/2);
  v1::SubmitJobRequest req;
  *req.mutable_spec() = Spec(0, /*gpus=*/2);
  auto submitted = lifecycle_->Submit(req);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const std::string id = submitted->job.id();
  AdvanceWithHeartbeats(absl::Minutes(5));  // queued: not charged
  Pass();
  ASSERT_EQ(w.Assignments().size(), 1u);
  EXPECT_EQ(Job(id).job.attempts(0).gpu_milli(), 2000);
  EXPECT_EQ(Job(id).job.attempts(0).cpu_slots(), 0);

  // Running: charged up to now, from the assignment.
  AdvanceWithHeartbeats(absl::Minutes(1));
  ASSERT_TRUE(w.Started(id, 1).ok());
  AdvanceWithHeartbeats(absl::Minutes(9));
  v1::UsageReport r = Report(t0);
  ASSERT_EQ(r.tenants_size(), 1);
  EXPECT_EQ(r.tenants(0).tenant(), "default");
  EXPECT_DOUBLE_EQ(r.tenants(0).gpu_seconds(), 2 * 600);
  ASSERT_EQ(r.jobs_size(), 1);
  EXPECT_EQ(r.jobs(0).state(), v1::RUNNING);

  // It fails (no restarts) after 10 minutes held: time after does not
  // count, and all of it is failed GPU time.
  ASSERT_TRUE(w.Exited(id, 1, 1, "boom").ok());
  ASSERT_EQ(Job(id).job.state(), v1::FAILED);
  AdvanceWithHeartbeats(absl::Hours(1));
  r = Report(t0);
  EXPECT_DOUBLE_EQ(r.total().gpu_seconds(), 2 * 600);
  EXPECT_DOUBLE_EQ(r.total().failed_gpu_seconds(), 2 * 600);
  EXPECT_EQ(r.jobs(0).state(), v1::FAILED);

  // A CPU job beside it, another tenant's, ending SUCCEEDED.
  v1::SubmitJobRequest cpu;
  *cpu.mutable_spec() = Spec();
  auto other = lifecycle_->Submit(cpu, "team-b");
  ASSERT_TRUE(other.ok()) << other.status();
  Pass();
  ASSERT_EQ(w.Assignments().size(), 1u);
  AdvanceWithHeartbeats(absl::Minutes(2));
  ASSERT_TRUE(w.Started(other->job.id(), 1).ok());
  ASSERT_TRUE(w.Update(other->job.id(), 1, [](v1::JobUpdate& u) {
                 u.mutable_trainer()->mutable_finished();
               }).ok());
  ASSERT_TRUE(w.Exited(other->job.id(), 1, 0).ok());
  ASSERT_EQ(Job(other->job.id()).job.state(), v1::SUCCEEDED);
  r = Report(t0);
  ASSERT_EQ(r.tenants_size(), 2);
  EXPECT_EQ(r.tenants(1).tenant(), "team-b");
  EXPECT_DOUBLE_EQ(r.tenants(1).cpu_slot_seconds(), 120);
  EXPECT_EQ(Report(t0, "team-b").tenants_size(), 1);

  // Deleting the job (and restarting the server) keeps its usage.
  ASSERT_TRUE(lifecycle_->Delete(id, false).ok());
  Boot();
  r = Report(t0);
  EXPECT_DOUBLE_EQ(r.tenants(0).gpu_seconds(), 2 * 600);
  ASSERT_EQ(r.jobs_size(), 2);
  EXPECT_EQ(r.jobs(0).job_id(), id);
  EXPECT_EQ(r.jobs(0).state(), v1::JOB_STATE_UNSPECIFIED) << "deleted";
  EXPECT_EQ(r.jobs(0).job_name(), "test");

  // A window that ends before it was assigned sees none of it.
  auto before =
      ReportUsage(*store_, Window(t0, t0 + absl::Minutes(5)), clock_.Now());
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->tenants_size(), 0);
}

// The server is stopped while a one-GPU job runs and comes back 30 s
// later; the worker had stopped the job when its lease ran out (8 s after
// the last heartbeat the server answered) and reports that, with when it
// happened, once it reconnects. The attempt is charged until then.
TEST_F(UsageReportTest, AnExitReportedAfterARestartEndsWhenTheWorkerSawIt) {
  const absl::Time t0 = clock_.Now();
  FakeWorker& w = Connect("w1", 1, /*gpus=*/1);
  const std::string id = Submit(0, /*gpus=*/1);
  Pass();
  ASSERT_EQ(w.Assignments().size(), 1u);
  ASSERT_TRUE(w.Started(id, 1).ok());
  AdvanceWithHeartbeats(absl::Seconds(5));

  clock_.Advance(absl::Seconds(30));  // the server is down
  Boot();
  FakeWorker& back = Connect("w1", 1, 1, {{id, 1}});
  ASSERT_TRUE(back.Update(id, 1,
                          [&](v1::JobUpdate& u) {
                            u.mutable_exited()->set_exit_code(4);
                            u.mutable_exited()->set_lost_server(true);
                            *u.mutable_exited()->mutable_exit_time() =
                                ToProtoTime(t0 + absl::Seconds(13));
                          })
                  .ok());
  const JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::QUEUED);
  EXPECT_EQ(FromProtoTime(r.job.attempts(0).end_time()),
            t0 + absl::Seconds(13));
  EXPECT_EQ(QueuedSince(r.job), clock_.Now());
  EXPECT_DOUBLE_EQ(Report(t0).total().gpu_seconds(), 13);

  // Its next attempt fails; the exit, reported late too, ends it then.
  Pass();
  ASSERT_EQ(back.Assignments().size(), 1u);
  ASSERT_TRUE(back.Started(id, 2).ok());
  const absl::Time second = clock_.Now();
  AdvanceWithHeartbeats(absl::Seconds(20));
  ASSERT_TRUE(back.Update(id, 2,
                          [&](v1::JobUpdate& u) {
                            u.mutable_exited()->set_exit_code(1);
                            *u.mutable_exited()->mutable_exit_time() =
                                ToProtoTime(second + absl::Seconds(7));
                          })
                  .ok());
  EXPECT_EQ(Job(id).job.state(), v1::FAILED);
  EXPECT_EQ(FromProtoTime(Job(id).job.end_time()), second + absl::Seconds(7));
  EXPECT_DOUBLE_EQ(Report(t0).total().gpu_seconds(), 13 + 7);
}

// A worker whose lease runs out is charged until it was last heard from
// plus the lease, however late the pass that declares it lost runs.
TEST_F(UsageReportTest, ALostWorkerIsChargedUntilLastHeardPlusTheLease) {
  const absl::Time t0 = clock_.Now();
  FakeWorker& w = Connect("w1", 1, /*gpus=*/1);
  const std::string id = Submit(0, /*gpus=*/1);
  Pass();
  ASSERT_EQ(w.Assignments().size(), 1u);
  ASSERT_TRUE(w.Started(id, 1).ok());
  AdvanceWithHeartbeats(absl::Seconds(10));  // the last heartbeat: t0 + 10 s
  clock_.Advance(absl::Seconds(25));
  Pass();
  const JobRecord r = Job(id);
  ASSERT_EQ(r.job.state(), v1::QUEUED) << r.job.state_reason();
  EXPECT_EQ(FromProtoTime(r.job.attempts(0).end_time()),
            t0 + absl::Seconds(10) + kLease);
}

// The server and its workers crash together; the server comes back long
// after, and the workers never do. Their jobs are charged until the server
// last knew itself alive plus the lease, not for the time it was down.
TEST_F(UsageReportTest, AWorkerThatNeverCameBackIsNotChargedTheDowntime) {
  const absl::Time t0 = clock_.Now();
  FakeWorker& w = Connect("w1", 1, /*gpus=*/1);
  const std::string id = Submit(0, /*gpus=*/1);
  Pass();
  EXPECT_EQ(*store_->LastAlive(), std::nullopt)
      << "no job held a worker yet: nothing to mark";
  ASSERT_EQ(w.Assignments().size(), 1u);
  ASSERT_TRUE(w.Started(id, 1).ok());
  AdvanceWithHeartbeats(absl::Seconds(10));
  Pass();  // marks the server alive at t0 + 10 s
  EXPECT_EQ(*store_->LastAlive(), t0 + absl::Seconds(10));

  clock_.Advance(absl::Seconds(150));
  Boot();
  Pass();
  EXPECT_EQ(Job(id).job.state(), v1::RUNNING) << "the worker has its lease";
  EXPECT_DOUBLE_EQ(Report(t0).total().gpu_seconds(), 20)
      << "while running, no more than it is charged once it ends";
  clock_.Advance(kLease);
  Pass();
  const JobRecord r = Job(id);
  ASSERT_EQ(r.job.state(), v1::QUEUED) << r.job.state_reason();
  EXPECT_EQ(FromProtoTime(r.job.attempts(0).end_time()),
            t0 + absl::Seconds(10) + kLease);
  EXPECT_DOUBLE_EQ(Report(t0).total().gpu_seconds(), 20);
}

}  // namespace
}  // namespace trainyard::server
