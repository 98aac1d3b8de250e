// Preemption with real processes: a yard-server running first-fit+preempt,
// one worker with one CPU slot, a long low-priority job interrupted by a
// high-priority one. The low job checkpoints, goes back to the queue, waits
// for the high job to finish, and resumes from its checkpoint.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/exact_resume.h"
#include "tests/harness.h"

namespace trainyard::itest {
namespace {
namespace v1 = trainyard::v1;

using ::testing::HasSubstr;

class PreemptionTest : public ClusterTest {};

// Long enough to be preempted after its first checkpoint, short enough to
// finish in seconds afterwards.
v1::JobSpec LowPriorityJob() {
  v1::JobSpec spec = MnistSpec{.name = "low",
                               .hidden = 128,
                               .steps = 1000,
                               .micro_batch = 64,
                               .checkpoint_every = 100,
                               .log_every = 20}
                         .ToProto();
  spec.set_priority(0);
  return spec;
}

v1::JobSpec HighPriorityJob() {
  v1::JobSpec spec = MnistSpec{.name = "high", .steps = 100}.ToProto();
  spec.set_priority(10);
  return spec;
}

TEST_F(PreemptionTest, HighPriorityJobPreemptsAndTheLowOneResumes) {
  YARD_ASSERT_OK(
      StartServer({.extra_args = {"--policy", "first-fit+preempt"}}));
  YARD_ASSERT_OK(StartReadyWorker({.name = "solo", .cpu_slots = 1}).status());
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse low, Submit(LowPriorityJob()));
  const std::string low_id = low.job().id();
  YARD_ASSIGN_OR_FAIL(v1::JobEvent saved,
                      WaitForEvent(jobs(), low_id, "CheckpointSaved",
                                   JobTimeout(), IsCheckpointSaved));

  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse high, Submit(HighPriorityJob()));
  const std::string high_id = high.job().id();
  YARD_ASSIGN_OR_FAIL(v1::JobEvent stopping,
                      WaitForStateChange(jobs(), low_id, v1::RUNNING,
                                         v1::PREEMPTING, JobTimeout()));
  EXPECT_THAT(stopping.state_change().reason(),
              HasSubstr(absl::StrCat("preempted by ", high_id)));
  YARD_ASSERT_OK(WaitForStateChange(jobs(), low_id, v1::PREEMPTING, v1::QUEUED,
                                    JobTimeout())
                     .status());

  YARD_ASSIGN_OR_FAIL(v1::Job high_done,
                      WaitForTerminal(jobs(), high_id, JobTimeout()));
  ASSERT_EQ(high_done.state(), v1::SUCCEEDED) << high_done.DebugString();
  EXPECT_EQ(high_done.attempts_size(), 1)
      << "the worker must have taken it at once\n"
      << high_done.DebugString();

  YARD_ASSIGN_OR_FAIL(v1::Job low_done,
                      WaitForTerminal(jobs(), low_id, JobTimeout()));
  ASSERT_EQ(low_done.state(), v1::SUCCEEDED) << low_done.DebugString();
  ASSERT_EQ(low_done.attempts_size(), 2) << low_done.DebugString();
  EXPECT_EQ(low_done.attempts(0).outcome(), v1::QUEUED);
  EXPECT_THAT(low_done.attempts(0).reason(),
              HasSubstr(absl::StrCat("preempted by ", high_id)));
  EXPECT_EQ(low_done.result().step(), 1000);
  // The high job ran while the low one was out.
  EXPECT_LE(absl::FromUnixSeconds(low_done.attempts(0).end_time().seconds()),
            absl::FromUnixSeconds(high_done.start_time().seconds()));

  WatchResult all = Watch(jobs(), low_id, 0, JobTimeout());
  ASSERT_TRUE(all.status.ok()) << all.status.error_message();
  std::vector<v1::TrainStarted> starts = TrainStartedEvents(all.events);
  ASSERT_EQ(starts.size(), 2u) << DescribeEvents(all.events);
  EXPECT_EQ(starts[0].start_step(), 0);
  EXPECT_GT(starts[1].start_step(), 0) << DescribeEvents(all.events);
  EXPECT_GE(starts[1].start_step(), saved.trainer().checkpoint().step());
  EXPECT_FALSE(starts[1].resumed_from().empty());
}

// Resume anywhere: the preempted job comes back on another worker (the
// first is busy with the job that preempted it) and ends with the very
// weights of an uninterrupted run, byte for byte.
TEST_F(PreemptionTest, APreemptedJobResumesOnAnotherWorkerExactly) {
  YARD_ASSERT_OK(
      StartServer({.extra_args = {"--policy", "first-fit+preempt"}}));
  YARD_ASSERT_OK(StartReadyWorker({.name = "first", .cpu_slots = 1}).status());
  const MnistSpec low_spec{.name = "mover",
                           .hidden = 128,
                           .steps = 600,
                           .micro_batch = 64,
                           .checkpoint_every = 100,
                           .log_every = 20};
  YARD_ASSIGN_OR_FAIL(const std::string low_id,
                      SubmitAndWaitForACheckpoint(low_spec.ToProto()));
  // The preemptor outlasts the test, so the low job cannot go back to the
  // first worker.
  v1::JobSpec high_spec =
      MnistSpec{.name = "hog", .steps = 1'000'000}.ToProto();
  high_spec.set_priority(10);
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse high, Submit(high_spec));
  YARD_ASSERT_OK(WaitForStateChange(jobs(), low_id, v1::PREEMPTING, v1::QUEUED,
                                    JobTimeout())
                     .status());
  YARD_ASSERT_OK(StartReadyWorker({.name = "second", .cpu_slots = 1}).status());

  YARD_ASSIGN_OR_FAIL(v1::Job done,
                      WaitForTerminal(jobs(), low_id, JobTimeout()));
  ExpectResumedExactly(dir(), done, low_spec, "first", "second");
  if (HasFatalFailure()) return;
  CommandResult get = Yard({"get", low_id});
  ASSERT_EQ(get.exit_code(), 0) << get.DebugString();
  EXPECT_THAT(get.out, HasSubstr("second")) << get.out;

  v1::CancelJobRequest cancel;
  cancel.set_job_id(high.job().id());
  v1::Job cancelled;
  YARD_ASSERT_OK(
      ToAbsl(jobs().CancelJob(ContextWithTimeout().get(), cancel, &cancelled)));
}

// The queue as users see it: `yard ls` and `yard get` show a waiting job's
// place in the queue and why it waits.
TEST_F(PreemptionTest, QueuedJobsShowTheirPlaceAndWhyTheyWait) {
  YARD_ASSERT_OK(
      StartServer({.extra_args = {"--policy", "first-fit+preempt"}}));
  YARD_ASSERT_OK(StartReadyWorker({.name = "solo", .cpu_slots = 1}).status());
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse busy, Submit(LowPriorityJob()));
  YARD_ASSERT_OK(
      WaitForState(jobs(), busy.job().id(), v1::RUNNING, JobTimeout())
          .status());
  std::vector<std::string> waiting;
  for (int priority : {0, -5}) {
    v1::JobSpec spec =
        MnistSpec{.name = absl::StrCat("wait", priority)}.ToProto();
    spec.set_priority(priority);
    YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse r, Submit(spec));
    waiting.push_back(r.job().id());
  }
  YARD_ASSERT_OK(PollUntil("both waiting jobs to have a queue position",
                           JobTimeout(), [&] {
                             for (const std::string& id : waiting) {
                               absl::StatusOr<v1::Job> j = GetJob(jobs(), id);
                               if (!j.ok() || j->queue_position() == 0) {
                                 return false;
                               }
                             }
                             return true;
                           }));
  YARD_ASSIGN_OR_FAIL(v1::Job second, GetJob(jobs(), waiting[1]));
  EXPECT_EQ(second.state(), v1::QUEUED);
  EXPECT_EQ(second.queue_position(), 2);

  CommandResult ls = Yard({"ls"});
  ASSERT_EQ(ls.exit_code(), 0) << ls.DebugString();
  EXPECT_THAT(ls.out, HasSubstr("QUEUED (#1)")) << ls.out;
  EXPECT_THAT(ls.out, HasSubstr("QUEUED (#2)")) << ls.out;
  CommandResult get = Yard({"get", waiting[1]});
  ASSERT_EQ(get.exit_code(), 0) << get.DebugString();
  EXPECT_THAT(get.out, HasSubstr("QUEUED (#2 in the queue)")) << get.out;
  EXPECT_THAT(get.out, HasSubstr("Waiting:")) << get.out;

  // Done: stop everything rather than wait for it.
  for (const std::string& id : {waiting[0], waiting[1], busy.job().id()}) {
    v1::CancelJobRequest cancel;
    cancel.set_job_id(id);
    v1::Job cancelled;
    YARD_ASSERT_OK(ToAbsl(
        jobs().CancelJob(ContextWithTimeout().get(), cancel, &cancelled)));
  }
}

// Suspend and resume from the CLI: a running job checkpoints and parks,
// its slot runs another job meanwhile, and once resumed it ends with the
// weights of an uninterrupted run.
TEST_F(PreemptionTest, ASuspendedJobFreesItsSlotAndResumesExactly) {
  YARD_ASSERT_OK(StartServer());
  YARD_ASSERT_OK(StartReadyWorker({.name = "solo", .cpu_slots = 1}).status());
  const MnistSpec long_spec{.name = "parked",
                            .hidden = 128,
                            .steps = 600,
                            .micro_batch = 64,
                            .checkpoint_every = 100,
                            .log_every = 20};
  YARD_ASSIGN_OR_FAIL(const std::string id,
                      SubmitAndWaitForACheckpoint(long_spec.ToProto()));

  CommandResult suspend = Yard({"suspend", id, "--reason", "room for a demo"});
  ASSERT_EQ(suspend.exit_code(), 0) << suspend.DebugString();
  EXPECT_THAT(suspend.out, HasSubstr("suspend requested")) << suspend.out;
  YARD_ASSIGN_OR_FAIL(v1::JobEvent parked,
                      WaitForStateChange(jobs(), id, v1::PREEMPTING,
                                         v1::SUSPENDED, JobTimeout()));
  EXPECT_EQ(parked.state_change().reason(), "room for a demo");

  // The slot is free: another job runs to the end while it is parked.
  YARD_ASSIGN_OR_FAIL(
      v1::SubmitJobResponse other,
      Submit(MnistSpec{.name = "meanwhile", .steps = 20}.ToProto()));
  YARD_ASSIGN_OR_FAIL(v1::Job other_done,
                      WaitForTerminal(jobs(), other.job().id(), JobTimeout()));
  EXPECT_EQ(other_done.state(), v1::SUCCEEDED) << other_done.DebugString();
  YARD_ASSIGN_OR_FAIL(v1::Job still, GetJob(jobs(), id));
  EXPECT_EQ(still.state(), v1::SUSPENDED) << "nothing resumes it but resume";

  CommandResult ls = Yard({"ls", "--state", "suspended", "-q"});
  ASSERT_EQ(ls.exit_code(), 0) << ls.DebugString();
  EXPECT_EQ(ls.out, id + "\n");
  CommandResult get = Yard({"get", id});
  EXPECT_THAT(get.out, HasSubstr("SUSPENDED: room for a demo")) << get.out;
  CommandResult workers = Yard({"workers"});
  EXPECT_THAT(workers.out, HasSubstr("1 suspended")) << workers.out;
  // Resuming a job that is not suspended is refused with exit 5.
  CommandResult wrong = Yard({"resume", other.job().id()});
  EXPECT_EQ(wrong.exit_code(), 5) << wrong.DebugString();
  EXPECT_THAT(wrong.err, HasSubstr("is not suspended (SUCCEEDED)"));

  CommandResult resume = Yard({"resume", id});
  ASSERT_EQ(resume.exit_code(), 0) << resume.DebugString();
  EXPECT_THAT(resume.out, HasSubstr(absl::StrCat("job ", id, " QUEUED")));
  YARD_ASSIGN_OR_FAIL(v1::Job done, WaitForTerminal(jobs(), id, JobTimeout()));
  EXPECT_EQ(done.attempts(0).outcome(), v1::SUSPENDED);
  ExpectResumedExactly(dir(), done, long_spec, "solo", "solo");

  // Its training curve spans both attempts: a report every 20 steps, each
  // step once.
  CommandResult curve = Yard({"metrics", "--csv", id});
  ASSERT_EQ(curve.exit_code(), 0) << curve.DebugString();
  std::vector<std::string> rows =
      absl::StrSplit(curve.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(rows.size(), 31u) << curve.out;  // the header, steps 20..600
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_THAT(rows[i],
                testing::StartsWith(absl::StrCat(id, ",", 20 * i, ",")))
        << curve.out;
  }
}

}  // namespace
}  // namespace trainyard::itest
