#include "worker/job_runner.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/proto_time.h"
#include "common/test_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/test_scripts.h"

namespace trainyard::worker {
namespace {

using testing::HasEvent;
using ::testing::HasSubstr;
using testing::MakeAssignment;
using ::testing::Not;
using trainyard::v1::TrainerEvent;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class JobRunnerTest : public ::testing::Test {
 protected:
  JobRunnerTest() {
    std::filesystem::create_directories(tmp_.File("data"));
    options_.work_dir = tmp_.File("work");
    options_.data_root = tmp_.File("data");
    options_.train_bin = testing::WriteFakeTrainer(tmp_.path());
    options_.cpu_slots = 2;
  }

  JobRunner& runner() {
    if (runner_ == nullptr)
      runner_ = std::make_unique<JobRunner>(options_, reports_.Fn());
    return *runner_;
  }

  v1::Assignment Job(const std::string& id, const std::string& mode,
                     int attempt = 1) {
    return MakeAssignment(id, attempt, mode, tmp_.File("ckpt/" + id));
  }

  void Start(const std::string& id, const std::string& mode, int attempt = 1) {
    runner().Start(Job(id, mode, attempt));
  }

  bool WaitEvent(const std::string& id, TrainerEvent::EventCase kind,
                 int attempt = 1) {
    return reports_.WaitFor(
        [&](const auto& u) { return HasEvent(u, id, attempt, kind); });
  }

  TestDir tmp_;
  JobRunnerOptions options_;
  testing::ReportCollector reports_;
  std::unique_ptr<JobRunner> runner_;
};

TEST_F(JobRunnerTest, RunsJobAndReportsEventsLogAndExit) {
  const absl::Time before = absl::Now();
  Start("j1", "succeed");
  auto exit = reports_.WaitExit("j1", 1);
  ASSERT_TRUE(exit.has_value());
  // When it ended, by this worker's clock: the attempt's end.
  EXPECT_GE(FromProtoTime(exit->exit_time()), before);
  EXPECT_LE(FromProtoTime(exit->exit_time()), absl::Now());
  EXPECT_EQ(exit->exit_code(), 0);
  EXPECT_EQ(exit->signal(), 0);
  EXPECT_EQ(exit->error(), "");
  EXPECT_FALSE(exit->cancelled());

  auto updates = reports_.Updates("j1", 1);
  ASSERT_GE(updates.size(), 5u);
  ASSERT_TRUE(updates.front().has_started());
  EXPECT_GT(updates.front().started().pid(), 0);
  EXPECT_TRUE(updates.back().has_exited());
  std::vector<TrainerEvent::EventCase> events;
  for (const auto& u : updates) {
    if (u.has_trainer()) events.push_back(u.trainer().event_case());
  }
  EXPECT_THAT(events, ::testing::ElementsAre(TrainerEvent::kStarted,
                                             TrainerEvent::kProgress,
                                             TrainerEvent::kFinished));

  const std::string dir = options_.work_dir + "/jobs/j1/1";
  const std::string log = reports_.Log("j1", 1);
  EXPECT_THAT(log, HasSubstr("plain stdout line\n"));
  EXPECT_THAT(log, HasSubstr("warning on stderr\n"));
  EXPECT_THAT(log, HasSubstr("args: run " + dir + "/spec.json --data-root " +
                             options_.data_root + " --checkpoint-dir " +
                             tmp_.File("ckpt/j1") +
                             " --progress json --threads 1 --lease-fd 0\n"));
  EXPECT_THAT(log, HasSubstr("cwd: " + dir + "\n"));
  EXPECT_THAT(log, HasSubstr("job: j1/1 gpus=[]\n"));
  EXPECT_THAT(log, Not(HasSubstr("{\"")));  // events are not log
  EXPECT_EQ(ReadFile(dir + "/log"), log);
  EXPECT_THAT(ReadFile(dir + "/spec.json"), HasSubstr("\"name\": \"succeed\""));
}

TEST_F(JobRunnerTest, KeepsOnlyTheLastEndedAttemptDirectories) {
  options_.keep_attempt_dirs = 2;
  const std::string jobs = options_.work_dir + "/jobs/";
  int hours_ago = 3;
  for (const char* id : {"j1", "j2", "j3"}) {
    Start(id, "succeed");
    ASSERT_TRUE(runner().WaitIdle(absl::Now() + absl::Seconds(30))) << id;
    // Last used hours apart: ordered by more than the file system's clock
    // granularity.
    const std::string dir = absl::StrCat(jobs, id, "/1");
    const auto then = std::filesystem::file_time_type::clock::now() -
                      std::chrono::hours(hours_ago--);
    std::filesystem::last_write_time(dir, then);
    std::filesystem::last_write_time(dir + "/log", then);
  }
  EXPECT_FALSE(std::filesystem::exists(jobs + "j1")) << "the oldest goes";
  EXPECT_TRUE(std::filesystem::exists(jobs + "j2/1/log"));
  EXPECT_TRUE(std::filesystem::exists(jobs + "j3/1/log"));
  // Every line also went to the server.
  EXPECT_THAT(reports_.Log("j1", 1), HasSubstr("plain stdout line\n"));
}

TEST_F(JobRunnerTest, PassesCpuThreadsFromTheSpec) {
  v1::Assignment a = Job("j1", "succeed");
  a.mutable_spec()->mutable_resources()->set_cpu_threads(3);
  runner().Start(a);
  ASSERT_TRUE(reports_.WaitExit("j1", 1).has_value());
  EXPECT_THAT(reports_.Log("j1", 1),
              HasSubstr("--progress json --threads 3 --lease-fd 0\n"));
}

TEST_F(JobRunnerTest, PassesTheWarmStartCheckpoint) {
  v1::Assignment a = Job("j1", "succeed");
  a.set_warm_start_checkpoint("/shared/ckpt/j-000007/step-00000200");
  runner().Start(a);
  ASSERT_TRUE(reports_.WaitExit("j1", 1).has_value());
  EXPECT_THAT(reports_.Log("j1", 1),
              HasSubstr("--threads 1 --lease-fd 0 --warm-start "
                        "/shared/ckpt/j-000007/step-00000200\n"));
}

TEST_F(JobRunnerTest, FailureCarriesTheStderrTail) {
  Start("j1", "fail");
  auto exit = reports_.WaitExit("j1", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code(), 1);
  EXPECT_FALSE(exit->cancelled());
  EXPECT_THAT(exit->error(), HasSubstr("exited with code 1"));
  EXPECT_THAT(exit->error(), HasSubstr("line 49\nfatal: boom"));
  EXPECT_THAT(exit->error(), Not(HasSubstr("line 10\n")));    // only the tail
  EXPECT_THAT(reports_.Log("j1", 1), HasSubstr("line 0\n"));  // the log has all
}

TEST_F(JobRunnerTest, CrashFailsOnlyThatJob) {
  Start("crash", "segv");
  auto exit = reports_.WaitExit("crash", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->signal(), SIGSEGV);
  EXPECT_THAT(exit->error(), HasSubstr("killed by signal 11"));
  EXPECT_THAT(exit->error(), HasSubstr("about to crash"));

  Start("next", "succeed");
  auto next = reports_.WaitExit("next", 1);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->exit_code(), 0);
}

TEST_F(JobRunnerTest, RanksRunAsAGangAndRankZeroReports) {
  trainyard::v1::Assignment a = Job("dp", "ranks", 1);
  a.mutable_spec()->mutable_resources()->set_cpu_ranks(2);
  runner().Start(a);
  auto exit = reports_.WaitExit("dp", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code(), 0) << exit->error();
  const std::string log = reports_.Log("dp", 1);
  EXPECT_THAT(log, HasSubstr("rank 0 says hi")) << log;
  EXPECT_THAT(log, Not(HasSubstr("[rank 0]"))) << log;
  EXPECT_THAT(log, HasSubstr("[rank 1] rank 1 says hi")) << log;
  EXPECT_THAT(log, HasSubstr("--rank 1 --world-size 2 --rendezvous ")) << log;
  // Both on this host: each checks the memory for two.
  EXPECT_THAT(log, HasSubstr("--ranks-on-host 2")) << log;
  int finished = 0;
  for (const auto& u : reports_.Updates("dp", 1)) {
    finished += u.has_trainer() && u.trainer().has_finished();
  }
  EXPECT_EQ(finished, 1);
  EXPECT_TRUE(runner().WaitIdle(absl::Now() + absl::Seconds(10)));
  EXPECT_EQ(runner().free_cpu_slots(), 2);
}

TEST_F(JobRunnerTest, ARankThatFailsTakesTheGangDownAtOnce) {
  trainyard::v1::Assignment a = Job("dp", "rank_fails", 1);
  a.mutable_spec()->mutable_resources()->set_cpu_ranks(2);
  const absl::Time start = absl::Now();
  runner().Start(a);
  auto exit = reports_.WaitExit("dp", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code(), 1);
  EXPECT_THAT(exit->error(), HasSubstr("rank 1 exited with code 1"));
  EXPECT_THAT(exit->error(), HasSubstr("rank one gives up"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(60)) << "rank 0 was left to run";
  EXPECT_THAT(reports_.Log("dp", 1),
              HasSubstr("[worker] rank 1 exited with code 1; stopping the "
                        "other ranks"));
}

// A rank that failed of its own before the server asked to stop the
// attempt is reported as a failure, not as stopped as asked: the server
// must blame it, not a rank elsewhere that only saw it go.
TEST_F(JobRunnerTest, ARankFailingBeforeAStopIsNotReportedCancelled) {
  trainyard::v1::Assignment a = Job("dp", "rank_fails_lingering", 1);
  a.mutable_spec()->mutable_resources()->set_cpu_ranks(2);
  runner().Start(a);
  // The failure is seen (and the gang stopped) before the exit is reported.
  ASSERT_TRUE(reports_.WaitFor([](const std::vector<v1::JobUpdate>& updates) {
    for (const v1::JobUpdate& u : updates) {
      if (u.log().find("[worker] rank 1 exited") != std::string::npos) {
        return true;
      }
    }
    return false;
  }));
  EXPECT_TRUE(runner().Stop("dp", 1));
  const std::string log = reports_.Log("dp", 1);
  const size_t cwd = log.find("[rank 1] cwd: ");
  ASSERT_NE(cwd, std::string::npos) << log;
  const size_t from = cwd + std::string("[rank 1] cwd: ").size();
  std::ofstream(log.substr(from, log.find('\n', from) - from) + "/go") << "";
  auto exit = reports_.WaitExit("dp", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code(), 1);
  EXPECT_THAT(exit->error(), HasSubstr("rank 1 exited with code 1"));
  EXPECT_FALSE(exit->cancelled());
}

// The ranks of a job spread over workers are named in a failure, rank 0's
// too when it runs alone on this worker.
TEST_F(JobRunnerTest, AFailureOfASpreadJobNamesItsRank) {
  trainyard::v1::Assignment a = Job("spread", "fail", 1);
  a.mutable_spec()->mutable_resources()->set_cpu_ranks(2);
  a.set_world_size(2);
  a.set_first_rank(0);
  a.set_ranks(1);
  runner().Start(a);
  auto exit = reports_.WaitExit("spread", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_THAT(exit->error(),
              ::testing::StartsWith("rank 0 exited with code 1"));
}

TEST_F(JobRunnerTest, RefusesMoreRanksThanFreeSlots) {
  trainyard::v1::Assignment a = Job("dp", "ranks", 1);
  a.mutable_spec()->mutable_resources()->set_cpu_ranks(3);
  const absl::Time before = absl::Now();
  runner().Start(a);
  auto exit = reports_.WaitExit("dp", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code(), JobRunner::kRefusedExitCode);
  EXPECT_GE(FromProtoTime(exit->exit_time()), before);
  EXPECT_THAT(exit->error(),
              HasSubstr("not enough free CPU slots on this worker (3 asked"));
}

// Jobs share a GPU while their grants fit in it together; a job wanting the
// GPU whole waits for all of them, and each sharer is told its grant.
TEST_F(JobRunnerTest, JobsShareAGpuWithinItsMemoryAndCompute) {
  options_.gpus = {0};
  options_.gpu_memory_bytes = {{0, 1000}};
  options_.mps = true;
  auto on_gpu = [&](const std::string& id, int64_t bytes, int32_t milli) {
    v1::Assignment a = Job(id, "wait_term");
    a.mutable_spec()->mutable_resources()->set_gpus(1);
    a.add_gpu_indices(0);
    if (bytes > 0) {
      v1::GpuGrant* g = a.add_gpu_grants();
      g->set_index(0);
      g->set_shared(true);
      g->set_memory_bytes(bytes);
      g->set_compute_milli(milli);
    }
    runner().Start(a);
  };
  on_gpu("a", 400, 250);
  on_gpu("b", 500, 500);
  ASSERT_TRUE(WaitEvent("a", TrainerEvent::kStarted));
  ASSERT_TRUE(WaitEvent("b", TrainerEvent::kStarted));
  on_gpu("too-much-memory", 200, 100);
  on_gpu("too-much-compute", 50, 300);
  on_gpu("whole", 0, 0);
  for (const char* id : {"too-much-memory", "too-much-compute", "whole"}) {
    auto exit = reports_.WaitExit(id, 1);
    ASSERT_TRUE(exit.has_value()) << id;
    EXPECT_EQ(exit->exit_code(), JobRunner::kRefusedExitCode) << id;
  }
  EXPECT_THAT(
      reports_.WaitExit("too-much-memory", 1)->error(),
      HasSubstr("GPU 0 cannot hold another 200 bytes and 100 "
                "milli-GPU (2 job(s) hold 900 bytes and 750 milli-GPU)"));
  EXPECT_THAT(reports_.WaitExit("whole", 1)->error(),
              HasSubstr("GPU 0 is already in use"));
  on_gpu("fits", 100, 250);
  ASSERT_TRUE(WaitEvent("fits", TrainerEvent::kStarted));
  EXPECT_THAT(reports_.Log("a", 1), HasSubstr("grant: memory=[400] mps=[25]"));
  EXPECT_THAT(reports_.Log("fits", 1), HasSubstr("gpus=[0]"));

  runner().TerminateAll(absl::Seconds(30));
  EXPECT_TRUE(runner().WaitIdle(absl::Now() + absl::Seconds(30)));
  on_gpu("whole-later", 0, 0);
  ASSERT_TRUE(WaitEvent("whole-later", TrainerEvent::kStarted));
  EXPECT_THAT(reports_.Log("whole-later", 1), HasSubstr("grant: memory=[]"));
  on_gpu("shared-beside-whole", 100, 100);
  auto refused = reports_.WaitExit("shared-beside-whole", 1);
  ASSERT_TRUE(refused.has_value());
  EXPECT_THAT(refused->error(), HasSubstr("hold it whole"));
}

constexpr char kUuid0[] = "GPU-a0a0a0a0-0000-4000-8000-000000000000";
constexpr char kUuid1[] = "GPU-b1b1b1b1-1111-4111-8111-111111111111";

// A job on GPUs of this worker: spec.resources.gpus = world (the GPUs of all
// its ranks), `gpus` the ones placed here.
v1::Assignment OnGpus(v1::Assignment a, const std::vector<int32_t>& gpus,
                      int world = 0) {
  a.mutable_spec()->mutable_resources()->set_gpus(
      world > 0 ? world : static_cast<int>(gpus.size()));
  for (int32_t gpu : gpus) a.add_gpu_indices(gpu);
  return a;
}

// A job names its GPU by UUID, which survives an MPS server's renumbering.
TEST_F(JobRunnerTest, AJobSeesItsGpuByUuid) {
  options_.gpus = {0, 1};
  options_.gpu_uuids = {{0, kUuid0}, {1, kUuid1}};
  runner().Start(OnGpus(Job("j1", "succeed"), {1}));
  auto exit = reports_.WaitExit("j1", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code(), 0) << exit->error();
  EXPECT_THAT(reports_.Log("j1", 1),
              HasSubstr(absl::StrCat("job: j1/1 gpus=[", kUuid1, "]\n")));
}

// One rank per GPU, each seeing only its own, in the assignment's order;
// likewise for the ranks of a job spread over workers.
TEST_F(JobRunnerTest, EachRankSeesItsOwnGpuByUuid) {
  options_.gpus = {0, 1};
  options_.gpu_uuids = {{0, kUuid0}, {1, kUuid1}};
  runner().Start(OnGpus(Job("dp", "ranks"), {1, 0}));
  auto exit = reports_.WaitExit("dp", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code(), 0) << exit->error();
  std::string log = reports_.Log("dp", 1);
  EXPECT_THAT(log, HasSubstr(absl::StrCat("job: dp/1 gpus=[", kUuid1, "]\n")))
      << log;
  EXPECT_THAT(
      log, HasSubstr(absl::StrCat("[rank 1] job: dp/1 gpus=[", kUuid0, "]\n")))
      << log;

  v1::Assignment spread = OnGpus(Job("spread", "ranks"), {0, 1}, /*world=*/4);
  spread.set_world_size(4);
  spread.set_first_rank(2);
  spread.set_ranks(2);
  runner().Start(spread);
  exit = reports_.WaitExit("spread", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code(), 0) << exit->error();
  log = reports_.Log("spread", 1);
  EXPECT_THAT(log, HasSubstr(absl::StrCat("[rank 2] job: spread/1 gpus=[",
                                          kUuid0, "]\n")))
      << log;
  EXPECT_THAT(log, HasSubstr(absl::StrCat("[rank 3] job: spread/1 gpus=[",
                                          kUuid1, "]\n")))
      << log;
}

// Without a usable UUID (CPU-only or fake setups, or NVML giving an empty
// or malformed one) a GPU goes by its index, never by the bad string.
TEST_F(JobRunnerTest, AGpuWithoutAUsableUuidGoesByIndex) {
  options_.gpus = {0, 1, 2, 3};
  options_.gpu_uuids = {{0, kUuid0}, {1, ""}, {2, "GPU-a0a0,1"}};
  const std::vector<std::pair<std::string, int32_t>> jobs = {
      {"empty", 1}, {"malformed", 2}, {"unknown", 3}};
  for (const auto& [id, gpu] : jobs) {
    runner().Start(OnGpus(Job(id, "succeed"), {gpu}));
  }
  for (const auto& [id, gpu] : jobs) {
    auto exit = reports_.WaitExit(id, 1);
    ASSERT_TRUE(exit.has_value()) << id;
    EXPECT_EQ(exit->exit_code(), 0) << exit->error();
    EXPECT_THAT(reports_.Log(id, 1),
                HasSubstr(absl::StrCat("gpus=[", gpu, "]\n")))
        << id;
  }
}

TEST_F(JobRunnerTest, MissingTrainBinaryFailsTheJob) {
  options_.train_bin = tmp_.File("no-such-yard-train");
  Start("j1", "succeed");
  auto exit = reports_.WaitExit("j1", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code(), JobProcess::kExecFailedExitCode);
  EXPECT_THAT(exit->error(), HasSubstr("cannot execute"));
  EXPECT_THAT(exit->error(), HasSubstr("No such file or directory"));
  for (const auto& u : reports_.Updates("j1", 1)) EXPECT_FALSE(u.has_started());
  EXPECT_TRUE(runner().WaitIdle(absl::Now() + absl::Seconds(10)));
  EXPECT_EQ(runner().free_cpu_slots(), 2);
}

// A job is told on stdin how long the worker's lease still runs, when it
// starts and each time the lease is renewed ("-1": no lease).
TEST_F(JobRunnerTest, JobsAreToldTheLeaseOnStdin) {
  runner().RenewLeases(absl::Now() + absl::Seconds(5));
  Start("j1", "lease");
  ASSERT_TRUE(WaitEvent("j1", TrainerEvent::kStarted));
  runner().RenewLeases(absl::InfiniteFuture());
  auto exit = reports_.WaitExit("j1", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code(), 0);
  const std::string log = reports_.Log("j1", 1);
  EXPECT_THAT(log, ::testing::ContainsRegex("lease: (4[0-9]{3}|5000)\n"));
  EXPECT_THAT(log, HasSubstr("lease: -1\n"));
}

TEST_F(JobRunnerTest, CancelTerminatesAndReportsCancelled) {
  Start("j1", "wait_term");
  ASSERT_TRUE(WaitEvent("j1", TrainerEvent::kStarted));
  EXPECT_TRUE(runner().Cancel("j1", 1, absl::Seconds(30)));
  auto exit = reports_.WaitExit("j1", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code(), 3);
  EXPECT_TRUE(exit->cancelled());
  EXPECT_TRUE(WaitEvent("j1", TrainerEvent::kInterrupted));
}

TEST_F(JobRunnerTest, CancelEscalatesToSigkillAfterGrace) {
  Start("j1", "ignore_term");
  ASSERT_TRUE(WaitEvent("j1", TrainerEvent::kStarted));
  const absl::Time start = absl::Now();
  const absl::Duration grace = absl::Milliseconds(300);
  EXPECT_TRUE(runner().Cancel("j1", 1, grace));
  auto exit = reports_.WaitExit("j1", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_GE(absl::Now() - start, grace);
  EXPECT_EQ(exit->signal(), SIGKILL);
  EXPECT_FALSE(exit->worker_shutdown());
  EXPECT_TRUE(exit->cancelled());
}

TEST_F(JobRunnerTest, PreemptTerminatesAndReportsNotCancelled) {
  Start("j1", "wait_term");
  ASSERT_TRUE(WaitEvent("j1", TrainerEvent::kStarted));
  EXPECT_TRUE(runner().Preempt("j1", 1, absl::Seconds(30)));
  auto exit = reports_.WaitExit("j1", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code(), 3) << "checkpointed and stopped";
  EXPECT_FALSE(exit->cancelled()) << "the server must re-queue it";
  EXPECT_TRUE(WaitEvent("j1", TrainerEvent::kInterrupted));
}

TEST_F(JobRunnerTest, PreemptEscalatesToSigkillAfterGrace) {
  Start("j1", "ignore_term");
  ASSERT_TRUE(WaitEvent("j1", TrainerEvent::kStarted));
  const absl::Time start = absl::Now();
  const absl::Duration grace = absl::Milliseconds(300);
  EXPECT_TRUE(runner().Preempt("j1", 1, grace));
  auto exit = reports_.WaitExit("j1", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_GE(absl::Now() - start, grace);
  EXPECT_EQ(exit->signal(), SIGKILL);
  EXPECT_FALSE(exit->worker_shutdown());
  EXPECT_FALSE(exit->cancelled());
}

TEST_F(JobRunnerTest, PlaceIsFreeOnceTheExitIsReported) {
  // The server may hand the place to another job as soon as it hears of
  // the exit: the worker must not refuse that assignment.
  options_.cpu_slots = 1;
  Start("j1", "wait_term");
  ASSERT_TRUE(WaitEvent("j1", TrainerEvent::kStarted));
  EXPECT_TRUE(runner().Preempt("j1", 1, absl::Seconds(30)));
  ASSERT_TRUE(reports_.WaitExit("j1", 1).has_value());
  EXPECT_EQ(runner().free_cpu_slots(), 1);
  Start("j2", "wait_term");
  ASSERT_TRUE(WaitEvent("j2", TrainerEvent::kStarted));
  EXPECT_TRUE(runner().Stop("j2", 1));
}

TEST_F(JobRunnerTest, StopKillsAtOnce) {
  Start("j1", "ignore_term");
  ASSERT_TRUE(WaitEvent("j1", TrainerEvent::kStarted));
  EXPECT_TRUE(runner().Stop("j1", 1));
  auto exit = reports_.WaitExit("j1", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->signal(), SIGKILL);
  EXPECT_TRUE(exit->cancelled());
}

TEST_F(JobRunnerTest, UnknownAttemptsAreIgnored) {
  EXPECT_FALSE(runner().Cancel("nope", 1, absl::Seconds(1)));
  EXPECT_FALSE(runner().Preempt("nope", 1, absl::Seconds(1)));
  EXPECT_FALSE(runner().Stop("nope", 1));
  Start("j1", "wait_term");
  ASSERT_TRUE(WaitEvent("j1", TrainerEvent::kStarted));
  EXPECT_FALSE(runner().Cancel("j1", 2, absl::Seconds(1)));
  EXPECT_FALSE(runner().Stop("j1", 2));
  EXPECT_EQ(runner().Running().size(), 1u);
  EXPECT_TRUE(runner().Stop("j1", 1));
}

TEST_F(JobRunnerTest, RefusesBeyondFreeSlots) {
  options_.cpu_slots = 1;
  Start("a", "wait_term");
  ASSERT_TRUE(WaitEvent("a", TrainerEvent::kStarted));
  EXPECT_EQ(runner().free_cpu_slots(), 0);
  Start("b", "succeed");
  auto refused = reports_.WaitExit("b", 1);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->exit_code(), JobRunner::kRefusedExitCode);
  EXPECT_THAT(refused->error(), HasSubstr("no free CPU slot"));
  ASSERT_EQ(runner().Running().size(), 1u);
  EXPECT_EQ(runner().Running()[0].job_id(), "a");

  runner().Cancel("a", 1, absl::Seconds(30));
  ASSERT_TRUE(reports_.WaitExit("a", 1).has_value());
  ASSERT_TRUE(runner().WaitIdle(absl::Now() + absl::Seconds(10)));
  EXPECT_EQ(runner().free_cpu_slots(), 1);
  Start("c", "succeed");
  auto c = reports_.WaitExit("c", 1);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->exit_code(), 0);
}

TEST_F(JobRunnerTest, RefusesBadAssignments) {
  runner().Start(Job("../escape", "succeed"));
  v1::Assignment no_attempt = Job("j0", "succeed", 0);
  runner().Start(no_attempt);
  v1::Assignment gpu = Job("j1", "succeed");
  gpu.mutable_spec()->mutable_resources()->set_gpus(1);
  gpu.add_gpu_indices(0);
  runner().Start(gpu);
  v1::Assignment mismatch = Job("j2", "succeed");
  mismatch.mutable_spec()->mutable_resources()->set_gpus(1);
  runner().Start(mismatch);

  auto error_of = [&](const std::string& id, int attempt) -> std::string {
    auto exit = reports_.WaitExit(id, attempt);
    if (!exit.has_value()) return "<no exit reported>";
    EXPECT_EQ(exit->exit_code(), JobRunner::kRefusedExitCode);
    return exit->error();
  };
  EXPECT_THAT(error_of("../escape", 1), HasSubstr("job_id"));
  EXPECT_THAT(error_of("j0", 0), HasSubstr("attempt must be at least 1"));
  EXPECT_THAT(error_of("j1", 1), HasSubstr("no GPU 0"));
  EXPECT_THAT(error_of("j2", 1), HasSubstr("asks for 1 GPUs"));
  EXPECT_TRUE(runner().Running().empty());
  EXPECT_FALSE(std::filesystem::exists(tmp_.File("escape")));
}

TEST_F(JobRunnerTest, RepeatedAssignmentOfARunningAttemptIsIgnored) {
  Start("j1", "wait_term");
  ASSERT_TRUE(WaitEvent("j1", TrainerEvent::kStarted));
  Start("j1", "wait_term");
  EXPECT_EQ(runner().Running().size(), 1u);
  EXPECT_EQ(runner().free_cpu_slots(), 1);
  runner().Stop("j1", 1);
  ASSERT_TRUE(reports_.WaitExit("j1", 1).has_value());
  int started = 0;
  for (const auto& u : reports_.Updates("j1", 1)) started += u.has_started();
  EXPECT_EQ(started, 1);
}

TEST_F(JobRunnerTest, StopAcceptingRefusesNewWork) {
  runner().StopAccepting();
  Start("j1", "succeed");
  auto exit = reports_.WaitExit("j1", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_THAT(exit->error(), HasSubstr("shutting down"));
}

TEST_F(JobRunnerTest, TerminateAllStopsEveryJob) {
  Start("a", "wait_term");
  Start("b", "wait_term");
  ASSERT_TRUE(WaitEvent("a", TrainerEvent::kStarted));
  ASSERT_TRUE(WaitEvent("b", TrainerEvent::kStarted));
  runner().TerminateAll(absl::Seconds(30));
  EXPECT_TRUE(runner().WaitIdle(absl::Now() + absl::Seconds(20)));
  for (const char* id : {"a", "b"}) {
    auto exit = reports_.WaitExit(id, 1);
    ASSERT_TRUE(exit.has_value());
    EXPECT_EQ(exit->exit_code(), 3);
    EXPECT_FALSE(exit->cancelled());  // the worker stopped, nobody cancelled
    EXPECT_TRUE(exit->worker_shutdown());
  }
}

// Killed by the shutdown's SIGTERM (no handler yet) or by the SIGKILL
// after the grace period: the exit says the worker's shutdown did it, so
// the server re-queues the job instead of failing it.
TEST_F(JobRunnerTest, TerminateAllMarksWhatItsStopKilled) {
  Start("a", "die_on_term");
  Start("b", "ignore_term");
  ASSERT_TRUE(WaitEvent("a", TrainerEvent::kStarted));
  ASSERT_TRUE(WaitEvent("b", TrainerEvent::kStarted));
  runner().TerminateAll(absl::Milliseconds(300));
  EXPECT_TRUE(runner().WaitIdle(absl::Now() + absl::Seconds(20)));
  auto a = reports_.WaitExit("a", 1);
  auto b = reports_.WaitExit("b", 1);
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_EQ(a->signal(), SIGTERM);
  EXPECT_EQ(b->signal(), SIGKILL);
  for (const auto& exit : {*a, *b}) {
    EXPECT_TRUE(exit.worker_shutdown());
    EXPECT_FALSE(exit.cancelled());
  }
}

TEST_F(JobRunnerTest, DestructorKillsWhatStillRuns) {
  Start("j1", "ignore_term");
  ASSERT_TRUE(WaitEvent("j1", TrainerEvent::kStarted));
  runner_.reset();
  auto exit = reports_.WaitExit("j1", 1, absl::ZeroDuration());
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->signal(), SIGKILL);
}

}  // namespace
}  // namespace trainyard::worker
