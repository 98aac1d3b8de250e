// Graceful shutdown with real processes. SIGTERM on yard-server: RPCs in
// flight finish, every acknowledged submission is on disk, the process
// exits 0. SIGTERM on yard-worker: its job writes a checkpoint and is
// handed back, another worker resumes it, and the final weights equal those
// of an uninterrupted run.
#include <signal.h>

#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/exact_resume.h"
#include "tests/harness.h"

namespace trainyard::itest {
namespace {
namespace v1 = trainyard::v1;

class ShutdownTest : public ClusterTest {};

TEST_F(ShutdownTest, ServerSigtermFinishesRpcsFlushesStateAndExitsZero) {
  YARD_ASSERT_OK(StartServer());
  const v1::JobSpec spec = MnistSpec{.name = "drain"}.ToProto();
  absl::Mutex mu;
  std::vector<std::string> acked;  // guarded by mu
  std::atomic<int> failures{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      Stubs stubs(server().address());
      for (int i = 0;; ++i) {
        v1::SubmitJobRequest req;
        *req.mutable_spec() = spec;
        req.set_request_id(absl::StrCat("c", c, "-", i));
        v1::SubmitJobResponse resp;
        auto ctx = ContextWithTimeout(RpcTimeout());
        if (!stubs.jobs->SubmitJob(ctx.get(), req, &resp).ok()) {
          ++failures;
          return;  // the server is gone: stop
        }
        absl::MutexLock l(&mu);
        acked.push_back(resp.job().id());
      }
    });
  }
  YARD_ASSERT_OK(PollUntil("some submissions", StartTimeout(), [&] {
    absl::MutexLock l(&mu);
    return acked.size() >= 50;
  }));
  ASSERT_TRUE(server().process().Signal(SIGTERM));
  std::optional<ExitStatus> exit =
      server().process().WaitForExit(StartTimeout());
  ASSERT_TRUE(exit.has_value()) << "yard-server did not stop on SIGTERM";
  EXPECT_TRUE(exit->Exited(0)) << exit->ToString();
  for (std::thread& t : clients) t.join();  // each ends at its first error
  EXPECT_EQ(failures, 4);

  ServerOptions again = server().options();
  again.port = server().port();
  YARD_ASSERT_OK(StartServer(again));
  absl::MutexLock l(&mu);
  for (const std::string& id : acked) {
    YARD_ASSIGN_OR_FAIL(v1::Job job, GetJob(jobs(), id));
    EXPECT_EQ(job.state(), v1::QUEUED) << id;
  }
  YARD_ASSIGN_OR_FAIL(std::vector<v1::Job> all, ListAllJobs(jobs(), 500));
  EXPECT_EQ(all.size(), acked.size())
      << "no job beyond the acknowledged ones (a submission cut off by the "
         "shutdown either committed and was answered, or left nothing)";
  std::printf(
      "server drain: %zu submissions acknowledged before SIGTERM, "
      "all on disk\n",
      acked.size());
}

// Long enough to be stopped after its first checkpoints.
MnistSpec HandBackJob() {
  return MnistSpec{.name = "hand-back",
                   .hidden = 128,
                   .steps = 800,
                   .micro_batch = 64,
                   .checkpoint_every = 50,
                   .log_every = 20};
}

TEST_F(ShutdownTest, WorkerSigtermCheckpointsAndHandsBackForExactResume) {
  YARD_ASSERT_OK(
      StartServer({.heartbeat_interval_ms = 300, .worker_lease_ms = 1500}));
  YARD_ASSIGN_OR_FAIL(WorkerProcess * first,
                      StartReadyWorker({.name = "first"}));
  const MnistSpec spec = HandBackJob();
  YARD_ASSIGN_OR_FAIL(const std::string id,
                      SubmitAndWaitForACheckpoint(spec.ToProto()));

  ASSERT_TRUE(first->process().Signal(SIGTERM));
  std::optional<ExitStatus> exit = first->process().WaitForExit(JobTimeout());
  ASSERT_TRUE(exit.has_value()) << "yard-worker did not stop on SIGTERM";
  EXPECT_TRUE(exit->Exited(0)) << exit->ToString();
  YARD_ASSIGN_OR_FAIL(v1::Job handed, GetJob(jobs(), id));
  ASSERT_EQ(handed.state(), v1::QUEUED)
      << "an interrupted job goes back to the queue\n"
      << handed.DebugString();
  ASSERT_GT(handed.last_checkpoint().step(), 0) << handed.DebugString();

  YARD_ASSERT_OK(StartReadyWorker({.name = "second"}).status());
  YARD_ASSIGN_OR_FAIL(v1::Job job, WaitForTerminal(jobs(), id, JobTimeout()));
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.DebugString();
  // The worker said it was draining before its job exited, so the job was
  // not offered to it again: exactly two attempts.
  ASSERT_EQ(job.attempts_size(), 2) << job.DebugString();
  EXPECT_EQ(job.attempts(0).worker_id(), "first");
  EXPECT_EQ(job.attempts(0).outcome(), v1::QUEUED) << "handed back";
  const v1::Attempt& last = job.attempts(job.attempts_size() - 1);
  EXPECT_EQ(last.worker_id(), "second");
  EXPECT_EQ(last.resumed_from_step(), handed.last_checkpoint().step());
  WatchResult all = Watch(jobs(), id, 0, JobTimeout());
  ASSERT_TRUE(all.status.ok()) << all.status.error_message();
  int started = 0;
  for (const v1::JobEvent& e : all.events) {
    started += e.has_trainer() && e.trainer().has_started();
  }
  EXPECT_EQ(started, 2) << "trained on first, then resumed once on second\n"
                        << DescribeEvents(all.events);

  YARD_ASSIGN_OR_FAIL(std::string resumed, FinalWeights(job.checkpoint_dir()));
  YARD_ASSIGN_OR_FAIL(std::string straight, StraightRunWeights(dir(), spec));
  EXPECT_TRUE(resumed == straight)
      << "weights after hand-back differ from an uninterrupted run ("
      << resumed.size() << " vs " << straight.size() << " bytes)";
}

}  // namespace
}  // namespace trainyard::itest
