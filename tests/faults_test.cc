// Faults with real processes: a worker SIGKILLed mid-job, the server
// SIGKILLed and restarted mid-run, and a training process that crashes.
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/proto_time.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/exact_resume.h"
#include "tests/harness.h"

namespace trainyard::itest {
namespace {
namespace v1 = trainyard::v1;

class FaultsTest : public ClusterTest {};

// Long enough to be interrupted after its first checkpoints, short enough
// to finish in seconds afterwards.
MnistSpec LongJob(const std::string& name) {
  return MnistSpec{.name = name,
                   .hidden = 128,
                   .steps = 2000,
                   .micro_batch = 64,
                   .checkpoint_every = 100,
                   .log_every = 20};
}

TEST_F(FaultsTest, WorkerKilledMidJobResumesOnSecondWorkerFromCheckpoint) {
  YARD_ASSERT_OK(
      StartServer({.heartbeat_interval_ms = 300, .worker_lease_ms = 1500}));
  YARD_ASSIGN_OR_FAIL(WorkerProcess * first,
                      StartReadyWorker({.name = "first"}));
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse submitted,
                      Submit(LongJob("worker-loss").ToProto()));
  const std::string id = submitted.job().id();
  YARD_ASSIGN_OR_FAIL(v1::JobEvent saved,
                      WaitForEvent(jobs(), id, "CheckpointSaved", JobTimeout(),
                                   IsCheckpointSaved));
  std::vector<pid_t> trainers = first->TrainerPids();
  ASSERT_EQ(trainers.size(), 1u);

  ExitStatus killed = first->process().Kill();
  ASSERT_TRUE(killed.Killed(SIGKILL)) << killed.ToString();
  YARD_ASSERT_OK(PollUntil("the dead worker's yard-train to die with it",
                           StartTimeout(),
                           [&] { return !ProcessAlive(trainers[0]); }));
  YARD_ASSIGN_OR_FAIL(v1::Job mid, GetJob(jobs(), id));
  ASSERT_FALSE(IsTerminal(mid.state()))
      << "the job finished before the worker was killed; make LongJob "
         "longer\n"
      << mid.DebugString();

  YARD_ASSERT_OK(WaitForWorkerLost(cluster(), "first", JobTimeout()));
  YARD_ASSERT_OK(StartReadyWorker({.name = "second"}).status());
  YARD_ASSIGN_OR_FAIL(v1::Job job, WaitForTerminal(jobs(), id, JobTimeout()));
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.DebugString();

  ASSERT_EQ(job.attempts_size(), 2) << job.DebugString();
  EXPECT_EQ(job.attempt(), 2);
  EXPECT_EQ(job.attempts(0).number(), 1);
  EXPECT_EQ(job.attempts(0).worker_id(), "first");
  EXPECT_EQ(job.attempts(0).outcome(), v1::QUEUED) << "handed back";
  EXPECT_EQ(job.attempts(1).number(), 2);
  EXPECT_EQ(job.attempts(1).worker_id(), "second");
  EXPECT_EQ(job.attempts(1).outcome(), v1::SUCCEEDED);
  EXPECT_GE(job.attempts(1).resumed_from_step(),
            saved.trainer().checkpoint().step());

  WatchResult all = Watch(jobs(), id, 0, JobTimeout());
  ASSERT_TRUE(all.status.ok()) << all.status.error_message();
  std::vector<v1::TrainStarted> starts = TrainStartedEvents(all.events);
  ASSERT_EQ(starts.size(), 2u) << DescribeEvents(all.events);
  EXPECT_EQ(starts[0].start_step(), 0);
  EXPECT_GE(starts[1].start_step(), saved.trainer().checkpoint().step())
      << "the second attempt must resume from a checkpoint\n"
      << DescribeEvents(all.events);
  EXPECT_FALSE(starts[1].resumed_from().empty());
  EXPECT_EQ(job.result().step(), 2000);
}

TEST_F(FaultsTest, ServerKilledAndRestartedLosesNothingAndWatchResumes) {
  // A lease long enough for the worker to reconnect to the new server.
  YARD_ASSERT_OK(
      StartServer({.heartbeat_interval_ms = 300, .worker_lease_ms = 5000}));
  YARD_ASSIGN_OR_FAIL(WorkerProcess * worker,
                      StartReadyWorker({.name = "steady"}));
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse long_job,
                      Submit(LongJob("through-restart").ToProto()));
  const std::string id = long_job.job().id();
  std::vector<std::string> ids = {id};
  for (int i = 0; i < 2; ++i) {
    MnistSpec queued{.name = absl::StrCat("behind-", i), .steps = 100};
    YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse r, Submit(queued.ToProto()));
    ids.push_back(r.job().id());
  }
  YARD_ASSIGN_OR_FAIL(v1::JobEvent progress,
                      WaitForEvent(jobs(), id, "training progress",
                                   JobTimeout(), IsTrainProgress));
  const int64_t last_seen = progress.sequence();
  std::vector<pid_t> trainers = worker->TrainerPids();
  ASSERT_EQ(trainers.size(), 1u);
  // A CLI follower that must ride through the restart.
  YARD_ASSIGN_OR_FAIL(std::unique_ptr<ChildProcess> follower,
                      StartYard({"-o", "json", "watch", id}));
  YARD_ASSERT_OK(PollUntil(
      "yard watch to print the first events", StartTimeout(),
      [&] { return !follower->Stdout().empty() || !follower->Running(); }));

  YARD_ASSERT_OK(KillAndRestartServer());
  EXPECT_TRUE(ProcessAlive(trainers[0]))
      << "the server restart must not stop the running job";

  // The resumed watch continues without gaps to the terminal event.
  WatchResult rest = Watch(jobs(), id, last_seen, JobTimeout());
  ASSERT_TRUE(rest.status.ok()) << CodeName(rest.status.error_code()) << " "
                                << rest.status.error_message() << "\n"
                                << DescribeEvents(rest.events);
  EXPECT_TRUE(ConsecutiveToTerminal(rest.events, last_seen + 1, v1::SUCCEEDED));
  EXPECT_TRUE(TrainStartedEvents(rest.events).empty())
      << "the trainer was restarted\n"
      << DescribeEvents(rest.events);

  YARD_ASSIGN_OR_FAIL(v1::Job job, GetJob(jobs(), id));
  EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.DebugString();
  EXPECT_EQ(job.attempt(), 1) << "re-attached, not re-run";
  EXPECT_EQ(job.attempts_size(), 1) << job.DebugString();
  EXPECT_EQ(job.worker_id(), "steady");
  for (size_t i = 1; i < ids.size(); ++i) {
    YARD_ASSIGN_OR_FAIL(v1::Job other,
                        WaitForTerminal(jobs(), ids[i], JobTimeout()));
    EXPECT_EQ(other.state(), v1::SUCCEEDED) << other.DebugString();
  }
  YARD_ASSIGN_OR_FAIL(std::vector<v1::Job> all, ListAllJobs(jobs(), 2));
  std::vector<std::string> listed;
  for (const auto& j : all) listed.push_back(j.id());
  EXPECT_EQ(listed, ids) << "every job exactly once, in submission order";

  // `yard watch` resumed by itself: every event once, in order, to the end.
  std::optional<ExitStatus> watched = follower->WaitForExit(JobTimeout());
  ASSERT_TRUE(watched.has_value()) << "yard watch did not end\n"
                                   << follower->OutputTail();
  EXPECT_TRUE(watched->Exited(YardExit::kOk)) << watched->ToString() << "\n"
                                              << follower->OutputTail();
  YARD_ASSIGN_OR_FAIL(std::vector<v1::JobEvent> printed,
                      ParseJsonEventLines(follower->Stdout()));
  EXPECT_TRUE(ConsecutiveToTerminal(printed, 1, v1::SUCCEEDED))
      << "yard watch lost or repeated events across the restart";
}

// The server is down well past the lease: the worker stops the job when
// its lease runs out and reports that, with the time it happened, once the
// server is back. The attempt is charged until the job stopped, not for
// the time the server was down; the job then resumes.
TEST_F(FaultsTest, AServerDownPastTheLeaseChargesOnlyWhatTheJobRan) {
  constexpr int kLeaseMs = 2000;
  YARD_ASSERT_OK(
      StartServer({.heartbeat_interval_ms = 300, .worker_lease_ms = kLeaseMs}));
  YARD_ASSIGN_OR_FAIL(WorkerProcess * worker,
                      StartReadyWorker({.name = "steady"}));
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse r,
                      Submit(OutlivesALeaseSpec("through-outage").ToProto()));
  const std::string id = r.job().id();
  YARD_ASSERT_OK(WaitForEvent(jobs(), id, "training progress", JobTimeout(),
                              IsTrainProgress)
                     .status());
  std::vector<pid_t> trainers = worker->TrainerPids();
  ASSERT_EQ(trainers.size(), 1u);

  absl::Time stopped_at, restarted_at;
  YARD_ASSERT_OK(KillAndRestartServer([&]() -> absl::Status {
    RETURN_IF_ERROR(PollUntil("the worker to stop its job", JobTimeout(),
                              [&] { return !ProcessAlive(trainers[0]); }));
    stopped_at = absl::Now();
    // The outage goes on well after that.
    RETURN_IF_ERROR(PollUntil("the outage to last", absl::Seconds(30), [&] {
      return absl::Now() >= stopped_at + absl::Seconds(6);
    }));
    restarted_at = absl::Now();
    return absl::OkStatus();
  }));

  v1::Job job;
  YARD_ASSERT_OK(PollUntil("the first attempt to end", JobTimeout(), [&] {
    absl::StatusOr<v1::Job> j = GetJob(jobs(), id);
    if (!j.ok()) return false;
    job = *std::move(j);
    return job.attempts_size() > 0 && job.attempts(0).has_end_time();
  }));
  const v1::Attempt& first = job.attempts(0);
  EXPECT_EQ(first.outcome(), v1::QUEUED) << first.DebugString();
  // (The test sees the trainer gone a little after the worker does.)
  EXPECT_LE(FromProtoTime(first.end_time()), stopped_at + absl::Seconds(1))
      << "charged past the job's stop, into the outage: "
      << first.DebugString();
  EXPECT_LT(FromProtoTime(first.end_time()), restarted_at);
  YARD_ASSIGN_OR_FAIL(v1::Job ended, WaitForTerminal(jobs(), id, JobTimeout()));
  EXPECT_EQ(ended.state(), v1::SUCCEEDED) << ended.DebugString();
}

// A server restart forgets no worker: one that died while idle (running
// nothing, so no job names it) is still listed, declared LOST once its
// lease from the restart runs out (and so alerted on), until forgotten;
// one that shut down cleanly stays gone; one that comes back is READY.
TEST_F(FaultsTest,
       ARestartedServerStillKnowsIdleWorkersAndDeclaresTheDeadLost) {
  YARD_ASSERT_OK(
      StartServer({.heartbeat_interval_ms = 300, .worker_lease_ms = 3000}));
  YARD_ASSIGN_OR_FAIL(WorkerProcess * dead, StartReadyWorker({.name = "dead"}));
  YARD_ASSIGN_OR_FAIL(WorkerProcess * left, StartReadyWorker({.name = "left"}));
  YARD_ASSERT_OK(StartReadyWorker({.name = "steady"}).status());
  dead->process().Kill();
  // SIGTERM: it says it is shutting down, then goes.
  ASSERT_TRUE(left->process().Signal(SIGTERM));
  ASSERT_TRUE(left->process().WaitForExit(StartTimeout()).has_value());

  YARD_ASSERT_OK(KillAndRestartServer());
  YARD_ASSIGN_OR_FAIL(
      v1::Worker lost,
      WaitForWorker(
          cluster(), "dead", "LOST",
          [](const v1::Worker& w) { return w.state() == v1::WORKER_LOST; },
          Scaled(absl::Seconds(20))));
  EXPECT_FALSE(lost.hostname().empty()) << "its last hello is kept";
  EXPECT_EQ(lost.free_cpu_slots(), 0);
  YARD_ASSERT_OK(WaitForReadyWorkers(cluster(), {"steady"}, StartTimeout()));
  YARD_ASSIGN_OR_FAIL(v1::ListWorkersResponse listed, ListWorkers(cluster()));
  std::vector<std::string> ids;
  for (const v1::Worker& w : listed.workers()) ids.push_back(w.id());
  EXPECT_EQ(ids, (std::vector<std::string>{"dead", "steady"}))
      << DescribeWorkers(listed);
  v1::ClusterStatus status;
  YARD_ASSERT_OK(ToAbsl(cluster().GetClusterStatus(
      ContextWithTimeout().get(), v1::GetClusterStatusRequest(), &status)));
  EXPECT_EQ(status.workers_lost(), 1);

  // Lost before a restart, it is LOST at once after it (its alert goes on),
  // not given a lease again.
  YARD_ASSERT_OK(KillAndRestartServer());
  YARD_ASSIGN_OR_FAIL(listed, ListWorkers(cluster()));
  bool lost_at_once = false;
  for (const v1::Worker& w : listed.workers()) {
    lost_at_once |= w.id() == "dead" && w.state() == v1::WORKER_LOST;
  }
  EXPECT_TRUE(lost_at_once) << DescribeWorkers(listed);

  // Forgotten, it stays forgotten across the next restart.
  CommandResult forget = Yard({"forget", "dead"});
  ASSERT_EQ(forget.exit_code(), 0) << forget.DebugString();
  YARD_ASSERT_OK(KillAndRestartServer());
  YARD_ASSERT_OK(WaitForReadyWorkers(cluster(), {"steady"}, StartTimeout()));
  YARD_ASSIGN_OR_FAIL(listed, ListWorkers(cluster()));
  ASSERT_EQ(listed.workers_size(), 1) << DescribeWorkers(listed);
  EXPECT_EQ(listed.workers(0).id(), "steady");
}

// Stands in for yard-train: a spec named crash-* fails the way a broken
// trainer does; anything else runs the real trainer.
std::string TrainerScript() {
  return absl::StrCat(
      "#!/bin/sh\n"
      "for arg in \"$@\"; do [ -f \"$arg\" ] && spec=\"$arg\"; done\n"
      "if grep -q '\"crash-exit' \"$spec\"; then\n"
      "  echo 'loading data' >&2\n"
      "  echo 'fatal: simulated engine failure (out of cheese)' >&2\n"
      "  exit 1\n"
      "fi\n"
      "if grep -q '\"crash-signal' \"$spec\"; then\n"
      "  echo 'about to crash' >&2\n"
      "  kill -SEGV $$\n"
      "fi\n"
      "exec '",
      BinPath("yard-train"), "' \"$@\"\n");
}

TEST_F(FaultsTest, CrashingJobFailsWithStderrTailAndWorkerRunsTheNext) {
  YARD_ASSERT_OK(StartServer());
  std::string script = dir().WriteFile("fake-train.sh", TrainerScript(),
                                       /*executable=*/true);
  YARD_ASSIGN_OR_FAIL(WorkerProcess * worker,
                      StartReadyWorker({.name = "w1", .train_bin = script}));

  std::string crash =
      WriteSpec("crash.yaml", MnistSpec{.name = "crash-exit"}.ToYaml());
  CommandResult submit = Yard({"submit", crash, "--wait"}, JobTimeout());
  EXPECT_EQ(submit.exit_code(), YardExit::kJobNotSucceeded)
      << submit.DebugString();
  YARD_ASSIGN_OR_FAIL(std::vector<v1::Job> all, ListAllJobs(jobs()));
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].state(), v1::FAILED) << all[0].DebugString();
  EXPECT_NE(
      all[0].state_reason().find("simulated engine failure (out of cheese)"),
      std::string::npos)
      << all[0].DebugString();

  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse sig,
                      Submit(MnistSpec{.name = "crash-signal"}.ToProto()));
  YARD_ASSIGN_OR_FAIL(v1::Job sig_job,
                      WaitForTerminal(jobs(), sig.job().id(), JobTimeout()));
  EXPECT_EQ(sig_job.state(), v1::FAILED) << sig_job.DebugString();
  EXPECT_FALSE(sig_job.state_reason().empty()) << sig_job.DebugString();

  EXPECT_TRUE(worker->process().Running()) << "a crashing job must not take "
                                              "the worker down";
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse next,
                      Submit(MnistSpec{.name = "after-crash"}.ToProto()));
  YARD_ASSIGN_OR_FAIL(v1::Job ok,
                      WaitForTerminal(jobs(), next.job().id(), JobTimeout()));
  EXPECT_EQ(ok.state(), v1::SUCCEEDED) << ok.DebugString();
  EXPECT_EQ(ok.worker_id(), "w1");
}

// Two jobs side by side on one worker; one's trainer crashes (SIGSEGV). The
// neighbour and the worker carry on untouched.
// A job allowed one restart: its trainer is SIGKILLed (as the kernel's OOM
// killer would) after a checkpoint. The job waits out the server's restart
// backoff, restarts from that checkpoint on the worker it has not failed
// on, and ends with the weights of an uninterrupted run.
TEST_F(FaultsTest, AKilledTrainerRestartsFromItsCheckpointExactly) {
  constexpr absl::Duration kBackoff = absl::Seconds(2);
  YARD_ASSERT_OK(StartServer(
      {.extra_args = {"--restart-backoff-ms",
                      absl::StrCat(absl::ToInt64Milliseconds(kBackoff))}}));
  std::map<std::string, WorkerProcess*> workers;
  for (const char* name : {"left", "right"}) {
    YARD_ASSIGN_OR_FAIL(workers[name],
                        StartReadyWorker({.name = name, .cpu_slots = 1}));
  }
  const MnistSpec spec = LongJob("restarts");
  v1::JobSpec proto = spec.ToProto();
  proto.set_max_restarts(1);
  YARD_ASSIGN_OR_FAIL(const std::string id,
                      SubmitAndWaitForACheckpoint(proto));
  YARD_ASSIGN_OR_FAIL(v1::Job running, GetJob(jobs(), id));
  const std::string first = running.worker_id();
  const std::string second = first == "left" ? "right" : "left";
  ASSERT_TRUE(workers.contains(first)) << running.DebugString();
  const std::map<int, pid_t> trainers = workers[first]->TrainerPidsByRank();
  ASSERT_EQ(trainers.size(), 1u);
  ASSERT_EQ(::kill(trainers.begin()->second, SIGKILL), 0);

  YARD_ASSIGN_OR_FAIL(v1::Job done, WaitForTerminal(jobs(), id, JobTimeout()));
  ExpectResumedExactly(dir(), done, spec, first, second);
  if (HasFatalFailure()) return;
  // Its curve is the straight run's too, each step once: the steps the
  // killed attempt reported past its checkpoint were reported again by the
  // second (server/job_store_test has a resumed run that differs).
  ExpectTheCurveOfAStraightRun(jobs(), dir(), done, spec);
  EXPECT_EQ(done.restarts(), 1);
  EXPECT_THAT(done.attempts(0).reason(),
              ::testing::StartsWith("restart 1 of 1 in 2s from the latest "
                                    "checkpoint after: killed by signal 9"));
  EXPECT_GE(FromProtoTime(done.attempts(1).start_time()) -
                FromProtoTime(done.attempts(0).end_time()),
            kBackoff)
      << done.DebugString();
  CommandResult get = Yard({"get", id});
  ASSERT_EQ(get.exit_code(), 0) << get.DebugString();
  EXPECT_THAT(get.out, ::testing::ContainsRegex("Restarts: +1 of 1 after"));
  EXPECT_THAT(get.out, ::testing::ContainsRegex("1 +" + first + " .*FAILED"));
}

// A job refused at start by a host short of memory (yard-train exit 5:
// its estimate above the host's available memory, here a worker whose
// jobs see YARD_HOST_MEMORY_BYTES of 1 MiB) is not the spec's fault: it
// spends a restart and runs on a worker with the memory, not failing for
// good as a usage error (exit 2) would.
TEST_F(FaultsTest, AHostShortOfMemoryRestartsTheJobOnAnother) {
  YARD_ASSERT_OK(StartServer({.extra_args = {"--restart-backoff-ms", "3000"}}));
  YARD_ASSERT_OK(
      StartReadyWorker(
          {.name = "small", .env = {{"YARD_HOST_MEMORY_BYTES", "1048576"}}})
          .status());
  v1::JobSpec spec = MnistSpec{.name = "roomy", .steps = 20}.ToProto();
  spec.set_max_restarts(1);
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse submitted, Submit(spec));
  const std::string id = submitted.job().id();
  YARD_ASSERT_OK(
      WaitForEvent(jobs(), id, "the restart after the refusal", JobTimeout(),
                   [](const v1::JobEvent& e) {
                     return IsStateChangeTo(e, v1::QUEUED) &&
                            absl::StrContains(e.state_change().reason(),
                                              "restart 1 of 1");
                   })
          .status());
  YARD_ASSERT_OK(StartReadyWorker({.name = "big"}).status());
  YARD_ASSIGN_OR_FAIL(v1::Job done, WaitForTerminal(jobs(), id, JobTimeout()));
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.DebugString();
  EXPECT_EQ(done.worker_id(), "big");
  ASSERT_EQ(done.attempts_size(), 2) << done.DebugString();
  EXPECT_EQ(done.attempts(0).worker_id(), "small");
  EXPECT_EQ(done.attempts(0).outcome(), v1::FAILED);
  EXPECT_THAT(done.attempts(0).reason(),
              ::testing::HasSubstr("exited with code 5"))
      << done.DebugString();
  EXPECT_THAT(
      done.attempts(0).reason(),
      ::testing::HasSubstr("memory: the job needs more host memory than is "
                           "available: memory estimate "))
      << done.DebugString();
}

TEST_F(FaultsTest, AJobCrashingBesideAHealthyOneHurtsOnlyItself) {
  YARD_ASSERT_OK(StartServer());
  YARD_ASSIGN_OR_FAIL(WorkerProcess * worker,
                      StartReadyWorker({.name = "shared", .cpu_slots = 2}));
  YARD_ASSIGN_OR_FAIL(
      v1::SubmitJobResponse healthy,
      Submit(MnistSpec{.name = "healthy", .steps = 400, .checkpoint_every = 100}
                 .ToProto()));
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse doomed,
                      Submit(LongJob("doomed").ToProto()));
  const std::string doomed_id = doomed.job().id();
  YARD_ASSERT_OK(WaitForEvent(jobs(), doomed_id, "CheckpointSaved",
                              JobTimeout(), IsCheckpointSaved)
                     .status());
  pid_t victim = 0;
  for (pid_t pid : worker->TrainerPids()) {
    std::ifstream in(absl::StrCat("/proc/", pid, "/cmdline"));
    std::stringstream cmdline;
    cmdline << in.rdbuf();
    if (cmdline.str().find(doomed_id) != std::string::npos) victim = pid;
  }
  ASSERT_NE(victim, 0) << "no trainer of " << doomed_id;
  ASSERT_EQ(kill(victim, SIGSEGV), 0);

  YARD_ASSIGN_OR_FAIL(v1::Job crashed,
                      WaitForTerminal(jobs(), doomed_id, JobTimeout()));
  EXPECT_EQ(crashed.state(), v1::FAILED) << crashed.DebugString();
  EXPECT_NE(crashed.state_reason().find("signal 11"), std::string::npos)
      << crashed.DebugString();
  YARD_ASSIGN_OR_FAIL(
      v1::Job ok, WaitForTerminal(jobs(), healthy.job().id(), JobTimeout()));
  EXPECT_EQ(ok.state(), v1::SUCCEEDED) << ok.DebugString();
  EXPECT_EQ(ok.attempts_size(), 1) << ok.DebugString();
  EXPECT_TRUE(worker->process().Running());
}

}  // namespace
}  // namespace trainyard::itest
