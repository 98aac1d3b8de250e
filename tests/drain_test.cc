// Draining a worker for maintenance, with real processes: `yard drain`
// moves a running job to another worker, where it resumes from its
// checkpoint and ends with the weights of an uninterrupted run; the drain
// holds across a server restart until `yard undrain`.
#include "absl/strings/str_cat.h"
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
  const MnistSpec spec{.name = "mover",
                       .hidden = 128,
                       .steps = 600,
                       .micro_batch = 64,
                       .checkpoint_every = 100,
                       .log_every = 20};
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse job, Submit(spec.ToProto()));
  const std::string id = job.job().id();
  YARD_ASSERT_OK(WaitForEvent(jobs(), id, "CheckpointSaved", JobTimeout(),
                              IsCheckpointSaved)
                     .status());
  YARD_ASSERT_OK(StartReadyWorker({.name = "second", .cpu_slots = 1}).status());

  CommandResult drain = Yard(
      {"drain", "first", "--reason", "swap a disk", "--wait"}, JobTimeout());
  ASSERT_EQ(drain.exit_code(), 0) << drain.DebugString();
  EXPECT_THAT(drain.out, HasSubstr("worker first draining: 1 job is being "
                                   "preempted and will resume elsewhere"));
  EXPECT_THAT(drain.out, HasSubstr("worker first drained: no jobs left"));
  CommandResult workers = Yard({"workers"});
  ASSERT_EQ(workers.exit_code(), 0) << workers.DebugString();
  EXPECT_THAT(workers.out, HasSubstr("DRAINING (admin: swap a disk)"));

  YARD_ASSIGN_OR_FAIL(v1::Job done, WaitForTerminal(jobs(), id, JobTimeout()));
  ExpectResumedElsewhereExactly(dir(), done, spec, "first", "second");
  if (HasFatalFailure()) return;
  EXPECT_THAT(done.attempts(0).reason(),
              HasSubstr("worker first is drained: swap a disk"));

  // A restarted server remembers the drain: a new job goes to the second
  // worker although the first is idle.
  YARD_ASSERT_OK(KillAndRestartServer());
  // Listed once it reconnects; drained, or this times out.
  YARD_ASSIGN_OR_FAIL(
      v1::Worker first,
      WaitForWorker(
          cluster(), "first", "back and drained",
          [](const v1::Worker& w) { return w.has_drain(); }, JobTimeout()));
  EXPECT_EQ(first.state(), v1::WORKER_DRAINING);
  EXPECT_EQ(first.drain().reason(), "swap a disk");
  YARD_ASSERT_OK(WaitForReadyWorkers(cluster(), {"second"}, JobTimeout()));
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse next,
                      Submit(MnistSpec{.name = "next", .steps = 50}.ToProto()));
  YARD_ASSIGN_OR_FAIL(v1::Job next_done,
                      WaitForTerminal(jobs(), next.job().id(), JobTimeout()));
  ASSERT_EQ(next_done.state(), v1::SUCCEEDED) << next_done.DebugString();
  EXPECT_EQ(next_done.worker_id(), "second");

  CommandResult undrain = Yard({"undrain", "first"});
  ASSERT_EQ(undrain.exit_code(), 0) << undrain.DebugString();
  EXPECT_THAT(undrain.out, HasSubstr("worker first ready: takes jobs again"));
  YARD_ASSERT_OK(WaitForReadyWorkers(cluster(), {"first"}, JobTimeout()));
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
                    YardExit::kInvalidArgument, {"reason: 300 bytes"}));

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

}  // namespace
}  // namespace trainyard::itest
