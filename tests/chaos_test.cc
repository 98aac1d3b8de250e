// Chaos with real processes. A driver follows a seeded random schedule of
// faults — SIGKILL and restart of workers and of the server, SIGSTOP past
// the lease and SIGCONT of workers and of the server — while three workers
// run a stream of small MNIST jobs. At the end every job reached exactly
// one terminal state (SUCCEEDED), none was lost or finished twice, no report
// was lost (each job has exactly one TrainFinished: workers keep every
// report until the server acknowledges it and send it again after a
// reconnect, and the server applies it once), and each one's final weights
// equal those of the same spec run straight through.
//
// A second test cuts one worker off past its lease (SIGSTOP: the server
// hears nothing from it, as with a dropped connection): its yard-train,
// told the lease no more, stops itself before the server declares the
// worker lost, so the job never runs in two places; it resumes elsewhere,
// and the worker, when it comes back, is fenced by its attempt number.
//
// Settings: YARD_CHAOS_SEED (default 20261121) picks the schedule;
// YARD_CHAOS_LONG=1 runs 30 jobs and 40 faults instead of 8 and 6. The
// driver paces faults with real sleeps on purpose: the schedule is the
// test's input, not a way to wait for something.
#include <signal.h>

#include <cstdlib>
#include <map>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/exact_resume.h"
#include "tests/harness.h"

namespace trainyard::itest {
namespace {
namespace v1 = trainyard::v1;

constexpr int kLeaseMs = 1500;

class ChaosTest : public ClusterTest {
 protected:
  absl::Status StartCluster() {
    RETURN_IF_ERROR(StartServer(
        {.heartbeat_interval_ms = 300, .worker_lease_ms = kLeaseMs}));
    for (const char* name : {"w1", "w2", "w3"}) {
      ASSIGN_OR_RETURN(workers_[name], StartReadyWorker({.name = name}));
    }
    return absl::OkStatus();
  }

  std::map<std::string, WorkerProcess*> workers_;
};

// Two spec variants, so that equal weights are not a coincidence of one.
MnistSpec ChaosJob(int i) {
  return MnistSpec{.name = absl::StrCat("chaos-", i % 2),
                   .hidden = i % 2 == 0 ? 64 : 48,
                   .steps = 1200,
                   .micro_batch = 32,
                   .checkpoint_every = 100,
                   .log_every = 100};
}

TEST_F(ChaosTest, SeededFaultsLoseNothingAndResumeExactly) {
  uint32_t seed = 20261121;
  if (const char* s = std::getenv("YARD_CHAOS_SEED")) {
    ASSERT_TRUE(absl::SimpleAtoi(s, &seed)) << "YARD_CHAOS_SEED=" << s;
  }
  const bool long_run = std::getenv("YARD_CHAOS_LONG") != nullptr;
  const int job_count = long_run ? 30 : 8;
  const int fault_count = long_run ? 40 : 6;
  std::mt19937 rng(seed);
  auto uniform = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  YARD_ASSERT_OK(StartCluster());

  std::vector<std::string> ids;
  auto submit_some = [&](int n) {
    for (int k = 0; k < n && static_cast<int>(ids.size()) < job_count; ++k) {
      const int i = static_cast<int>(ids.size());
      absl::StatusOr<v1::SubmitJobResponse> r =
          Submit(ChaosJob(i).ToProto(), absl::StrCat("chaos-", i));
      ASSERT_TRUE(r.ok()) << r.status();
      ids.push_back(r->job().id());
    }
  };
  const char* kNames[] = {"kill-worker", "kill-server", "pause-worker",
                          "pause-server"};
  std::map<std::string, int> injected;
  for (int f = 0; f < fault_count; ++f) {
    submit_some(2);
    absl::SleepFor(absl::Milliseconds(uniform(300, 1200)));
    const int roll = uniform(0, 99);
    const int kind = roll < 40 ? 0 : roll < 60 ? 1 : roll < 85 ? 2 : 3;
    auto w = workers_.begin();
    std::advance(w, uniform(0, static_cast<int>(workers_.size()) - 1));
    std::printf("chaos fault %d: %s%s\n", f + 1, kNames[kind],
                kind == 0 || kind == 2 ? (" " + w->first).c_str() : "");
    switch (kind) {
      case 0: {
        w->second->process().Kill();
        YARD_ASSIGN_OR_FAIL(w->second, StartWorker({.name = w->first}));
        break;
      }
      case 1:
        YARD_ASSERT_OK(KillAndRestartServer());
        break;
      case 2:
      case 3: {
        ChildProcess& p = kind == 2 ? w->second->process() : server().process();
        ASSERT_TRUE(p.Signal(SIGSTOP));
        absl::SleepFor(absl::Milliseconds(kLeaseMs + uniform(200, 800)));
        ASSERT_TRUE(p.Signal(SIGCONT));
        break;
      }
    }
    ++injected[kNames[kind]];
  }
  submit_some(job_count);

  std::map<std::string, std::string> straight;  // spec name -> weights
  for (size_t i = 0; i < ids.size(); ++i) {
    SCOPED_TRACE(ids[i]);
    YARD_ASSIGN_OR_FAIL(v1::Job job,
                        WaitForTerminal(jobs(), ids[i], 2 * JobTimeout()));
    EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.DebugString();
    WatchResult all = Watch(jobs(), ids[i], 0, JobTimeout());
    ASSERT_TRUE(all.status.ok()) << all.status.error_message();
    EXPECT_TRUE(ConsecutiveToTerminal(all.events, 1, v1::SUCCEEDED))
        << "exactly one terminal state, reached last";
    // Finished once: never twice, and its TrainFinished not lost with a
    // server or a stream that died before acknowledging it.
    const int finished = CountTrainerEvents(all.events, v1::TrainerEvent::kFinished);
    EXPECT_EQ(finished, 1) << (finished == 0 ? "TrainFinished lost"
                                             : "finished more than once")
                           << "\n"
                           << DescribeEvents(all.events);
    const MnistSpec spec = ChaosJob(static_cast<int>(i));
    if (!straight.count(spec.name)) {
      YARD_ASSIGN_OR_FAIL(straight[spec.name], StraightRunWeights(dir(), spec));
    }
    YARD_ASSIGN_OR_FAIL(std::string weights,
                        FinalWeights(job.checkpoint_dir()));
    // The newest checkpoints of both are the final step's, so equal bytes
    // also say the job trained to the end.
    EXPECT_TRUE(weights == straight[spec.name])
        << "final weights differ from an uninterrupted run of the same spec";
  }
  YARD_ASSIGN_OR_FAIL(std::vector<v1::Job> listed, ListAllJobs(jobs(), 500));
  EXPECT_EQ(listed.size(), ids.size()) << "no job lost, none made up";

  int total = 0;
  std::string summary;
  for (const auto& [name, n] : injected) {
    total += n;
    absl::StrAppend(&summary, " ", name, "=", n);
  }
  std::printf("chaos: seed %u, %zu jobs, %d faults injected (%s), %s\n", seed,
              ids.size(), total, summary.c_str(),
              HasFailure() ? "NOT all survived" : "all survived");
}

TEST_F(ChaosTest, WorkerCutOffPastLeaseIsFencedWhenItComesBack) {
  YARD_ASSERT_OK(
      StartServer({.heartbeat_interval_ms = 300, .worker_lease_ms = kLeaseMs}));
  YARD_ASSIGN_OR_FAIL(WorkerProcess * cut, StartReadyWorker({.name = "cut"}));
  const MnistSpec spec = OutlivesALeaseSpec("cut-off");
  YARD_ASSIGN_OR_FAIL(const std::string id,
                      SubmitAndWaitForACheckpoint(spec.ToProto()));
  const std::vector<pid_t> stale = cut->TrainerPids();
  ASSERT_EQ(stale.size(), 1u);

  ASSERT_TRUE(cut->process().Signal(SIGSTOP));  // silent from now on
  YARD_ASSERT_OK(WaitForWorkerLost(cluster(), "cut", JobTimeout()));
  // Its yard-train stopped itself when the lease it was told ran out,
  // before the server could start the job elsewhere.
  EXPECT_FALSE(ProcessAlive(stale[0]))
      << "the stale attempt outlived its worker's lease";
  YARD_ASSERT_OK(StartReadyWorker({.name = "spare"}).status());
  YARD_ASSERT_OK(WaitForEvent(jobs(), id, "attempt 2 running", JobTimeout(),
                              [](const v1::JobEvent& e) {
                                return IsStateChangeTo(e, v1::RUNNING) &&
                                       e.state_change().attempt() == 2;
                              })
                     .status());
  ASSERT_TRUE(cut->process().Signal(SIGCONT));  // back: must be fenced

  YARD_ASSIGN_OR_FAIL(v1::Job job, WaitForTerminal(jobs(), id, JobTimeout()));
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.DebugString();
  ASSERT_EQ(job.attempts_size(), 2) << job.DebugString();
  EXPECT_EQ(job.attempts(0).worker_id(), "cut");
  EXPECT_EQ(job.attempts(0).outcome(), v1::QUEUED);
  EXPECT_EQ(job.attempts(1).worker_id(), "spare");
  WatchResult all = Watch(jobs(), id, 0, JobTimeout());
  ASSERT_TRUE(all.status.ok()) << all.status.error_message();
  EXPECT_EQ(CountTrainerEvents(all.events, v1::TrainerEvent::kFinished), 1) << DescribeEvents(all.events);
}

}  // namespace
}  // namespace trainyard::itest
