// Draining a worker for maintenance, with real processes: `yard drain`
// moves a running job to another worker, where it resumes from its
// checkpoint and ends with the weights of an uninterrupted run; the drain
// holds across a server restart until `yard undrain`. A worker gone for
// good is forgotten with `yard forget`.
#include <signal.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/exact_resume.h"
#include "tests/harness.h"
#include "trainyard/v1/admin.grpc.pb.h"

namespace trainyard::itest {
namespace {
namespace v1 = trainyard::v1;

using ::testing::HasSubstr;
using ::testing::Not;

class DrainTest : public ClusterTest {};

TEST_F(DrainTest, DrainMovesAJobElsewhereExactlyAndHoldsUntilUndrained) {
  YARD_ASSERT_OK(StartServer());
  YARD_ASSERT_OK(StartReadyWorker({.name = "first", .cpu_slots = 1}).status());
  YARD_ASSERT_OK(StartReadyWorker({.name = "second", .cpu_slots = 1}).status());
  const MnistSpec spec{.name = "mover",
                       .hidden = 128,
                       .steps = 1000,
                       .micro_batch = 64,
                       .checkpoint_every = 100,
                       .log_every = 20};
  YARD_ASSIGN_OR_FAIL(const std::string id,
                      SubmitAndWaitForACheckpoint(spec.ToProto()));
  // Drain the worker it runs on; the other one is free.
  YARD_ASSIGN_OR_FAIL(v1::Job running, GetJob(jobs(), id));
  const std::string from = running.worker_id();
  const std::string to = from == "first" ? "second" : "first";

  CommandResult drain =
      Yard({"drain", from, "--reason", "swap a disk", "--wait"}, JobTimeout());
  ASSERT_EQ(drain.exit_code(), 0) << drain.DebugString();
  EXPECT_THAT(drain.out, HasSubstr(absl::StrCat(
                             "worker ", from,
                             " draining: 1 job is being preempted and will "
                             "resume elsewhere")));
  EXPECT_THAT(drain.out, HasSubstr(absl::StrCat("worker ", from,
                                                " drained: no jobs left")));
  CommandResult workers = Yard({"workers"});
  ASSERT_EQ(workers.exit_code(), 0) << workers.DebugString();
  EXPECT_THAT(workers.out, HasSubstr("DRAINING (admin: swap a disk)"));
  EXPECT_THAT(workers.out, HasSubstr("1 ready, 1 draining, 0 lost"));

  YARD_ASSIGN_OR_FAIL(v1::Job done, WaitForTerminal(jobs(), id, JobTimeout()));
  ExpectResumedExactly(dir(), done, spec, from, to);
  if (HasFatalFailure()) return;
  EXPECT_THAT(
      done.attempts(0).reason(),
      HasSubstr(absl::StrCat("worker ", from, " is drained: swap a disk")));

  // A restarted server remembers the drain: a new job goes to the other
  // worker although the drained one is idle.
  YARD_ASSERT_OK(KillAndRestartServer());
  // Listed once it reconnects; drained, or this times out.
  YARD_ASSIGN_OR_FAIL(
      v1::Worker back,
      WaitForWorker(
          cluster(), from, "back and drained",
          [](const v1::Worker& w) { return w.has_drain(); }, JobTimeout()));
  EXPECT_EQ(back.state(), v1::WORKER_DRAINING);
  EXPECT_EQ(back.drain().reason(), "swap a disk");
  YARD_ASSERT_OK(WaitForReadyWorkers(cluster(), {to}, JobTimeout()));
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse next,
                      Submit(MnistSpec{.name = "next", .steps = 50}.ToProto()));
  YARD_ASSIGN_OR_FAIL(v1::Job next_done,
                      WaitForTerminal(jobs(), next.job().id(), JobTimeout()));
  ASSERT_EQ(next_done.state(), v1::SUCCEEDED) << next_done.DebugString();
  EXPECT_EQ(next_done.worker_id(), to);

  CommandResult undrain = Yard({"undrain", from});
  ASSERT_EQ(undrain.exit_code(), 0) << undrain.DebugString();
  EXPECT_THAT(undrain.out, HasSubstr(absl::StrCat("worker ", from,
                                                  " ready: takes jobs again")));
  YARD_ASSERT_OK(WaitForReadyWorkers(cluster(), {from}, JobTimeout()));
}

TEST_F(DrainTest, BadDrainsAreOneLineErrorsWithTheirExitCodes) {
  YARD_ASSERT_OK(StartServer());
  YARD_ASSERT_OK(StartReadyWorker({.name = "solo", .cpu_slots = 1}).status());

  EXPECT_TRUE(CliFailedWith(Yard({"drain", "nosuch"}), YardExit::kNotFound,
                            {"no worker 'nosuch'"}));
  EXPECT_TRUE(CliFailedWith(Yard({"undrain", "solo"}),
                            YardExit::kFailedPrecondition,
                            {"'solo' is not drained"}));
  EXPECT_TRUE(CliFailedWith(Yard({"drain"}), YardExit::kUsage, {"drain"}));
  EXPECT_TRUE(
      CliFailedWith(Yard({"drain", "solo", "--reason", std::string(300, 'x')}),
                    YardExit::kInvalidArgument,
                    {"reason: at most 256 bytes of UTF-8, got 300"}));

  // Only an administrator drains workers.
  auto admin = v1::AdminService::NewStub(stubs().channel);
  v1::CreateTokenRequest req;
  req.set_tenant("team-a");
  v1::CreateTokenResponse token;
  YARD_ASSERT_OK(
      ToAbsl(admin->CreateToken(ContextWithTimeout().get(), req, &token)));
  EXPECT_TRUE(CliFailedWith(Yard({"--token", token.token(), "drain", "solo"}),
                            8, {"admin"}));

  // None of that drained it.
  CommandResult workers = Yard({"workers"});
  ASSERT_EQ(workers.exit_code(), 0) << workers.DebugString();
  EXPECT_THAT(workers.out, Not(HasSubstr("DRAINING"))) << workers.out;
}

// A worker killed for good is declared lost, and stays listed (and counted
// lost) until an administrator forgets it; one still connected is refused.
TEST_F(DrainTest, ALostWorkerIsForgottenOnlyOnceLost) {
  YARD_ASSERT_OK(
      StartServer({.heartbeat_interval_ms = 300, .worker_lease_ms = 1500}));
  YARD_ASSIGN_OR_FAIL(WorkerProcess * gone,
                      StartReadyWorker({.name = "gone", .cpu_slots = 1}));
  YARD_ASSERT_OK(StartReadyWorker({.name = "stays", .cpu_slots = 1}).status());

  EXPECT_TRUE(CliFailedWith(Yard({"forget", "gone"}),
                            YardExit::kFailedPrecondition,
                            {"'gone' is not lost (connected)"}));
  EXPECT_TRUE(CliFailedWith(Yard({"forget", "nosuch"}), YardExit::kNotFound,
                            {"no worker 'nosuch'"}));
  EXPECT_TRUE(CliFailedWith(Yard({"forget"}), YardExit::kUsage, {"forget"}));

  ExitStatus killed = gone->process().Kill();
  ASSERT_TRUE(killed.Killed(SIGKILL)) << killed.ToString();
  YARD_ASSERT_OK(WaitForWorkerLost(cluster(), "gone", JobTimeout()));
  CommandResult lost = Yard({"workers"});
  bool listed = false;
  for (absl::string_view line : absl::StrSplit(lost.out, '\n')) {
    if (!absl::StartsWith(line, "gone ")) continue;
    listed = true;
    EXPECT_THAT(std::string(line), HasSubstr("LOST"));
    EXPECT_THAT(std::string(line), HasSubstr("0/1"));  // nothing of it free
  }
  EXPECT_TRUE(listed) << lost.DebugString();

  CommandResult forget = Yard({"forget", "gone"});
  ASSERT_EQ(forget.exit_code(), 0) << forget.DebugString();
  EXPECT_EQ(forget.out, "worker gone forgotten\n");
  CommandResult workers = Yard({"workers"});
  ASSERT_EQ(workers.exit_code(), 0) << workers.DebugString();
  EXPECT_THAT(workers.out, Not(HasSubstr("gone"))) << workers.out;
  EXPECT_THAT(workers.out, HasSubstr("stays")) << workers.out;
  v1::ClusterStatus status;
  YARD_ASSERT_OK(ToAbsl(cluster().GetClusterStatus(
      ContextWithTimeout().get(), v1::GetClusterStatusRequest(), &status)));
  EXPECT_EQ(status.workers_lost(), 0);
  EXPECT_EQ(status.workers_ready(), 1);
  EXPECT_TRUE(CliFailedWith(Yard({"forget", "gone"}), YardExit::kNotFound,
                            {"no worker 'gone'"}));
}

}  // namespace
}  // namespace trainyard::itest
