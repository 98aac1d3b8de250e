// A job's life through real processes: submitted with the CLI and followed
// to SUCCEEDED, cancelled while it runs, and deleted once it has ended, by
// hand or by the server's retention.
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/proto_time.h"
#include "common/read_file.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/harness.h"

namespace trainyard::itest {
namespace {
namespace v1 = trainyard::v1;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

class LifecycleTest : public ClusterTest {
 protected:
  // With `yard`: submits SPEC, then at once SPEC again with the flags
  // `second_flags` gives for the first job's id, and --wait. Both must
  // succeed, the second after the first has ended (with a slot free all
  // along, nothing else would make it wait). Returns the two jobs.
  absl::StatusOr<std::pair<v1::Job, v1::Job>> RunOneAfterTheOther(
      const std::string& spec,
      const std::function<std::vector<std::string>(const std::string&)>&
          second_flags) {
    CommandResult first = Yard({"submit", spec});
    if (first.exit_code() != YardExit::kOk) {
      return absl::InternalError(first.DebugString());
    }
    std::vector<std::string> args = {"submit", spec, "--wait"};
    for (std::string& f :
         second_flags(std::string(absl::StripAsciiWhitespace(first.out)))) {
      args.push_back(std::move(f));
    }
    CommandResult second = Yard(args, JobTimeout());
    if (second.exit_code() != YardExit::kOk) {
      return absl::InternalError(second.DebugString());
    }
    ASSIGN_OR_RETURN(std::vector<v1::Job> all, ListAllJobs(jobs()));
    if (all.size() != 2 || all[0].state() != v1::SUCCEEDED ||
        all[1].state() != v1::SUCCEEDED || all[1].attempts_size() != 1) {
      return absl::InternalError(absl::StrCat(
          "jobs: ", all.size(), "\n", all.empty() ? "" : all[0].DebugString(),
          all.size() < 2 ? "" : all[1].DebugString()));
    }
    if (FromProtoTime(all[1].attempts(0).start_time()) <
        FromProtoTime(all[0].end_time())) {
      return absl::InternalError(
          "the second job started before the first had ended");
    }
    return std::pair{all[0], all[1]};
  }
};

TEST_F(LifecycleTest, SubmitWaitRunsToSucceededWithAccuracyAndCheckpoint) {
  YARD_ASSERT_OK(StartServer());
  YARD_ASSERT_OK(StartReadyWorker({.name = "w1"}).status());
  MnistSpec spec{.name = "submit-wait", .steps = 200, .checkpoint_every = 100};
  std::string path = WriteSpec("submit-wait.yaml", spec.ToYaml());

  CommandResult submit = Yard({"submit", path, "--wait"}, JobTimeout());
  ASSERT_EQ(submit.exit_code(), YardExit::kOk) << submit.DebugString();

  YARD_ASSIGN_OR_FAIL(std::vector<v1::Job> all, ListAllJobs(jobs()));
  ASSERT_EQ(all.size(), 1u);
  const v1::Job& job = all[0];
  EXPECT_NE(submit.out.find(job.id()), std::string::npos)
      << "submit should print the job id\n"
      << submit.DebugString();
  EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.DebugString();
  EXPECT_EQ(job.name(), "submit-wait");
  ASSERT_TRUE(job.has_result()) << job.DebugString();
  EXPECT_EQ(job.result().step(), 200);
  EXPECT_GT(job.result().eval_accuracy(), 0.5) << job.DebugString();
  EXPECT_LE(job.result().eval_accuracy(), 1.0);
  ASSERT_FALSE(job.result().checkpoint_path().empty()) << job.DebugString();
  EXPECT_TRUE(std::filesystem::exists(job.result().checkpoint_path()))
      << job.result().checkpoint_path();
  ASSERT_EQ(job.attempts_size(), 1) << job.DebugString();
  EXPECT_EQ(job.attempts(0).worker_id(), "w1");
  EXPECT_EQ(job.attempts(0).outcome(), v1::SUCCEEDED);

  // The same answer through `yard get`.
  CommandResult get = Yard({"-o", "json", "get", job.id()});
  ASSERT_EQ(get.exit_code(), YardExit::kOk) << get.DebugString();
  EXPECT_NE(get.out.find("SUCCEEDED"), std::string::npos) << get.out;
  EXPECT_NE(get.out.find(job.result().checkpoint_path()), std::string::npos)
      << get.out;
  CommandResult table = Yard({"get", job.id()});
  EXPECT_EQ(table.exit_code(), YardExit::kOk) << table.DebugString();
  EXPECT_NE(table.out.find(job.id()), std::string::npos) << table.out;

  // Its log holds what the trainer wrote.
  CommandResult logs = Yard({"logs", job.id()});
  EXPECT_EQ(logs.exit_code(), YardExit::kOk) << logs.DebugString();

  // Its training curve: a report every 10 steps, the final evaluation on
  // the last one's row.
  CommandResult curve = Yard({"metrics", job.id()});
  ASSERT_EQ(curve.exit_code(), YardExit::kOk) << curve.DebugString();
  std::vector<std::string> rows =
      absl::StrSplit(curve.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(rows.size(), 21u) << curve.out;
  EXPECT_THAT(rows[0], ContainsRegex("^STEP +LOSS +LR +GRAD-NORM +SAMPLES/S +"
                                     "EVAL-LOSS +ACCURACY +ELAPSED$"));
  EXPECT_THAT(rows[1], ContainsRegex("^10 +[0-9.]+ +[0-9.e-]+ +[0-9.e+]+ +"
                                     "[0-9]+ +- +- +[0-9]+s$"));
  EXPECT_THAT(rows[20],
              ContainsRegex(absl::StrCat(
                  "^200 .* [0-9.]+ +",
                  absl::StrFormat("%.2f%%", job.result().eval_accuracy() * 100),
                  " +[0-9ms]+$")));

  // `yard usage` charges its one CPU slot from assignment to end.
  const double held_s =
      absl::ToDoubleSeconds(FromProtoTime(job.attempts(0).end_time()) -
                            FromProtoTime(job.attempts(0).start_time()));
  CommandResult usage = Yard({"-o", "json", "usage", "--jobs"});
  ASSERT_EQ(usage.exit_code(), YardExit::kOk) << usage.DebugString();
  v1::UsageReport report;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(usage.out, &report).ok())
      << usage.out;
  ASSERT_EQ(report.tenants_size(), 1) << usage.out;
  EXPECT_EQ(report.tenants(0).jobs(), 1);
  EXPECT_EQ(report.tenants(0).attempts(), 1);
  EXPECT_NEAR(report.tenants(0).cpu_slot_seconds(), held_s, 0.002) << usage.out;
  EXPECT_EQ(report.tenants(0).gpu_seconds(), 0);
  ASSERT_EQ(report.jobs_size(), 1);
  EXPECT_EQ(report.jobs(0).job_id(), job.id());
  EXPECT_EQ(report.jobs(0).state(), v1::SUCCEEDED);

  // Deleted, it is gone with its checkpoints.
  const std::string id = job.id(), tenant = job.tenant();
  const std::string dir = job.checkpoint_dir();
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  CommandResult deleted = Yard({"delete", job.id()});
  ASSERT_EQ(deleted.exit_code(), YardExit::kOk) << deleted.DebugString();
  EXPECT_EQ(deleted.out.rfind(absl::StrCat("deleted job ", job.id(),
                                           " and its checkpoints (", dir, ", "),
                              0),
            0u)
      << deleted.out;
  EXPECT_FALSE(std::filesystem::exists(dir));
  EXPECT_TRUE(
      CliFailedWith(Yard({"get", job.id()}), YardExit::kNotFound, {job.id()}));
  EXPECT_TRUE(CliFailedWith(Yard({"delete", job.id()}), YardExit::kNotFound,
                            {job.id()}));
  YARD_ASSIGN_OR_FAIL(all, ListAllJobs(jobs()));
  EXPECT_TRUE(all.empty());
  // Its usage is kept.
  CommandResult kept = Yard({"usage", "--jobs", "--since", "1d"});
  ASSERT_EQ(kept.exit_code(), YardExit::kOk) << kept.DebugString();
  EXPECT_THAT(kept.out,
              ContainsRegex(absl::StrCat(id, " +", tenant, " +deleted +1 ")))
      << kept.out;
  EXPECT_TRUE(CliFailedWith(Yard({"usage", "--since", "1h", "--until", "2h"}),
                            YardExit::kInvalidArgument, {"start_time: "}));
}

TEST_F(LifecycleTest, CancelWhileRunningStopsTheTrainer) {
  YARD_ASSERT_OK(StartServer());
  YARD_ASSIGN_OR_FAIL(WorkerProcess * worker, StartReadyWorker({.name = "w1"}));
  // Far more steps than the test will wait for.
  MnistSpec spec{.name = "to-cancel", .hidden = 64, .steps = 1'000'000};
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse submitted, Submit(spec.ToProto()));
  const std::string id = submitted.job().id();
  YARD_ASSERT_OK(WaitForEvent(jobs(), id, "training progress", JobTimeout(),
                              IsTrainProgress)
                     .status());
  std::vector<pid_t> trainers = worker->TrainerPids();
  ASSERT_EQ(trainers.size(), 1u) << "the worker should run one yard-train";
  EXPECT_EQ(ProcessName(trainers[0]), "yard-train");
  // A running job cannot be deleted.
  EXPECT_TRUE(CliFailedWith(Yard({"delete", id}), YardExit::kFailedPrecondition,
                            {id, "RUNNING"}));

  CommandResult cancel = Yard({"cancel", id});
  EXPECT_EQ(cancel.exit_code(), YardExit::kOk) << cancel.DebugString();
  YARD_ASSIGN_OR_FAIL(v1::Job job, WaitForTerminal(jobs(), id, JobTimeout()));
  EXPECT_EQ(job.state(), v1::CANCELLED) << job.DebugString();
  YARD_ASSERT_OK(PollUntil("the cancelled job's yard-train to be gone",
                           StartTimeout(),
                           [&] { return !ProcessAlive(trainers[0]); }));
  EXPECT_TRUE(worker->process().Running()) << "the worker must stay up";

  // Cancelling it again: it has already finished.
  auto ctx = ContextWithTimeout();
  v1::CancelJobRequest req;
  req.set_job_id(id);
  v1::Job ignored;
  EXPECT_TRUE(RpcFailedWith(jobs().CancelJob(ctx.get(), req, &ignored),
                            grpc::StatusCode::FAILED_PRECONDITION, {id}));
  EXPECT_TRUE(
      CliFailedWith(Yard({"cancel", id}), YardExit::kFailedPrecondition, {id}));
  YARD_ASSIGN_OR_FAIL(v1::Job after, GetJob(jobs(), id));
  EXPECT_EQ(after.state(), v1::CANCELLED);

  // Deleted but for its checkpoints (written on the cancel's SIGTERM).
  ASSERT_TRUE(std::filesystem::is_directory(after.checkpoint_dir()))
      << after.DebugString();
  CommandResult deleted = Yard({"delete", id, "--keep-checkpoints"});
  ASSERT_EQ(deleted.exit_code(), YardExit::kOk) << deleted.DebugString();
  EXPECT_EQ(deleted.out,
            absl::StrCat("deleted job ", id, " (checkpoints kept)\n"));
  EXPECT_TRUE(std::filesystem::is_directory(after.checkpoint_dir()));
  EXPECT_TRUE(CliFailedWith(Yard({"get", id}), YardExit::kNotFound, {id}));
}

// A job that reaches its time limit is stopped as a cancel is: it writes a
// checkpoint on the SIGTERM and ends CANCELLED, the reason naming the limit.
TEST_F(LifecycleTest, AJobIsStoppedAtItsTimeLimit) {
  YARD_ASSERT_OK(StartServer());
  YARD_ASSIGN_OR_FAIL(WorkerProcess * worker, StartReadyWorker({.name = "w1"}));
  v1::JobSpec spec =
      MnistSpec{.name = "limited", .hidden = 64, .steps = 1'000'000}.ToProto();
  spec.set_time_limit_s(2);
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse submitted, Submit(spec));
  const std::string id = submitted.job().id();
  YARD_ASSIGN_OR_FAIL(v1::Job job, WaitForTerminal(jobs(), id, JobTimeout()));
  EXPECT_EQ(job.state(), v1::CANCELLED) << job.DebugString();
  EXPECT_THAT(job.state_reason(),
              ::testing::MatchesRegex("time limit reached: held workers for "
                                      "[0-9.]+s \\(time_limit_s: 2\\)"));
  ASSERT_EQ(job.attempts_size(), 1);
  const absl::Duration held = FromProtoTime(job.attempts(0).end_time()) -
                              FromProtoTime(job.attempts(0).start_time());
  EXPECT_GE(held, absl::Seconds(2));
  EXPECT_GT(job.last_checkpoint().step(), 0)
      << "the SIGTERM should have written a checkpoint";
  EXPECT_TRUE(worker->process().Running());
  CommandResult get = Yard({"get", id});
  EXPECT_THAT(get.out, HasSubstr("Time limit:      2s"));
}

// With --job-retention the server deletes an ended job with its
// checkpoints once the period has passed since it ended, and not before.
TEST_F(LifecycleTest, TheServerDeletesAnEndedJobAfterItsRetention) {
  YARD_ASSERT_OK(StartServer({.extra_args = {"--job-retention", "3s"}}));
  YARD_ASSERT_OK(StartReadyWorker({.name = "w1"}).status());
  MnistSpec spec{.name = "retained", .steps = 20, .checkpoint_every = 10};
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse submitted, Submit(spec.ToProto()));
  const std::string id = submitted.job().id();
  YARD_ASSIGN_OR_FAIL(v1::Job job, WaitForTerminal(jobs(), id, JobTimeout()));
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.DebugString();
  EXPECT_EQ(FromProtoTime(job.delete_time()),
            FromProtoTime(job.end_time()) + absl::Seconds(3));
  const std::string dir = job.checkpoint_dir();
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  YARD_ASSERT_OK(PollUntil("the retention to delete the job", JobTimeout(),
                           [&] { return !GetJob(jobs(), id).ok(); }));
  EXPECT_GE(absl::Now(), FromProtoTime(job.end_time()) + absl::Seconds(3))
      << "deleted before its retention had passed";
  EXPECT_FALSE(std::filesystem::exists(dir));
  EXPECT_TRUE(CliFailedWith(Yard({"get", id}), YardExit::kNotFound, {id}));
}

// A job submitted with `--set depends_on=ID` starts only once that job has
// SUCCEEDED; one naming a job that does not exist is refused.
TEST_F(LifecycleTest, AJobThatDependsOnAnotherStartsAfterItSucceeds) {
  YARD_ASSERT_OK(StartServer());
  YARD_ASSERT_OK(StartReadyWorker({.name = "w1", .cpu_slots = 2}).status());
  const std::string path =
      WriteSpec("small.yaml", MnistSpec{.name = "small", .steps = 60}.ToYaml());
  YARD_ASSIGN_OR_FAIL(
      auto both, RunOneAfterTheOther(path, [](const std::string& first) {
        return std::vector<std::string>{"--set", "depends_on=" + first};
      }));
  EXPECT_TRUE(both.second.dependencies_met());

  EXPECT_TRUE(CliFailedWith(
      Yard({"submit", path, "--set", "depends_on=j-424242"}),
      YardExit::kInvalidArgument, {"depends_on[0]: job j-424242 not found"}));
}

// A job warm-started from another (`--set warm_start.job=ID`) waits for it
// to end, then starts from its final weights: step 0 and a fresh optimizer,
// but the first losses of a trained model, far below the first job's first.
TEST_F(LifecycleTest, AWarmStartedJobBeginsFromAnotherJobsWeights) {
  YARD_ASSERT_OK(StartServer());
  YARD_ASSERT_OK(StartReadyWorker({.name = "w1", .cpu_slots = 2}).status());
  const std::string path =
      WriteSpec("base.yaml", MnistSpec{.name = "base", .steps = 100}.ToYaml());
  YARD_ASSIGN_OR_FAIL(
      auto both, RunOneAfterTheOther(path, [](const std::string& first) {
        return std::vector<std::string>{"--set", "warm_start.job=" + first,
                                        "--set", "steps=20",
                                        "--set", "name=tuned"};
      }));
  const v1::Job& a = both.first;
  const v1::Job& b = both.second;
  EXPECT_EQ(b.warm_start_step(), 100);
  EXPECT_EQ(b.warm_start_checkpoint(), a.checkpoint_dir() + "/step-00000100");
  auto first_progress = [&](const std::string& id) {
    return WaitForEvent(jobs(), id, "a progress report", StartTimeout(),
                        [](const v1::JobEvent& e) {
                          return e.has_trainer() && e.trainer().has_progress();
                        });
  };
  YARD_ASSIGN_OR_FAIL(v1::JobEvent a_first, first_progress(a.id()));
  YARD_ASSIGN_OR_FAIL(v1::JobEvent b_first, first_progress(b.id()));
  EXPECT_EQ(b_first.trainer().progress().step(), 10);
  const double a_start = a_first.trainer().progress().loss();
  const double a_end = a.progress().loss();
  EXPECT_LT(b_first.trainer().progress().loss(), (a_start + a_end) / 2)
      << "the first job went from loss " << a_start << " to " << a_end;

  CommandResult get = Yard({"get", b.id()});
  ASSERT_EQ(get.exit_code(), YardExit::kOk) << get.DebugString();
  EXPECT_THAT(get.out, ContainsRegex("Warm start: +" + a.id() +
                                     " step 100 \\(" + a.checkpoint_dir()));
  EXPECT_TRUE(CliFailedWith(
      Yard({"submit", path, "--set", "warm_start.job=j-424242"}),
      YardExit::kInvalidArgument, {"warm_start.job: job j-424242 not found"}));
}

// `--max-running 1`: the sweep's jobs run one after another although the
// worker has room for two at once.
TEST_F(LifecycleTest, ASweepWithMaxRunningRunsNoMoreAtOnce) {
  YARD_ASSERT_OK(StartServer());
  YARD_ASSERT_OK(StartReadyWorker({.name = "w1", .cpu_slots = 2}).status());
  const std::string path = WriteSpec(
      "one-at-a-time.yaml",
      MnistSpec{.name = "serial", .steps = 60, .holdout = 500}.ToYaml());
  CommandResult sweep =
      Yard({"submit", path, "--sweep", "seed=1,2,3", "--max-running", "1",
            "--request-id", "m1", "--wait"},
           JobTimeout());
  ASSERT_EQ(sweep.exit_code(), YardExit::kOk) << sweep.DebugString();
  YARD_ASSIGN_OR_FAIL(std::vector<v1::Job> all, ListAllJobs(jobs()));
  ASSERT_EQ(all.size(), 3u);
  std::vector<std::pair<absl::Time, absl::Time>> held;
  for (const v1::Job& job : all) {
    EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.DebugString();
    EXPECT_EQ(job.spec().concurrency().group(), "m1");
    EXPECT_EQ(job.spec().concurrency().max_running(), 1);
    ASSERT_EQ(job.attempts_size(), 1) << job.DebugString();
    held.emplace_back(FromProtoTime(job.attempts(0).start_time()),
                      FromProtoTime(job.attempts(0).end_time()));
  }
  std::sort(held.begin(), held.end());
  for (size_t i = 1; i < held.size(); ++i) {
    EXPECT_GE(held[i].first, held[i - 1].second)
        << "job " << i << " started before the one before it ended";
  }
}

// `--halving`: successive halving stops the sweep's poor values at the
// first rung. With --max-running 1 the jobs run in the sweep's order, so
// the good learning rate is first at every rung (and runs on), and the
// two poor ones are each ranked behind it there, stopped with a
// checkpoint, and end SUCCEEDED, stopped early; the sweep exits 0 and its
// table names them.
TEST_F(LifecycleTest, ASweepWithHalvingStopsItsPoorValuesEarly) {
  YARD_ASSERT_OK(StartServer());
  YARD_ASSERT_OK(StartReadyWorker({.name = "w1"}).status());
  const std::string path = WriteSpec("asha.yaml", MnistSpec{.name = "asha",
                                                            .steps = 1000,
                                                            .eval_every = 40,
                                                            .log_every = 20,
                                                            .holdout = 500}
                                                      .ToYaml());
  CommandResult sweep =
      Yard({"submit", path, "--sweep", "optimizer.lr=0.003,0.00001,1.0",
            "--max-running", "1", "--halving", "40:5", "--request-id", "h1",
            "--wait"},
           JobTimeout());
  ASSERT_EQ(sweep.exit_code(), YardExit::kOk) << sweep.DebugString();
  EXPECT_THAT(sweep.out, HasSubstr("stopped early by halving: j-000002 (rung "
                                   "40), j-000003 (rung 40)\n"));
  EXPECT_THAT(sweep.out, HasSubstr("best: j-000001 (accuracy"));
  YARD_ASSIGN_OR_FAIL(std::vector<v1::Job> all, ListAllJobs(jobs()));
  ASSERT_EQ(all.size(), 3u);
  for (const v1::Job& job : all) {
    EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.DebugString();
    EXPECT_EQ(job.spec().halving().group(), "h1");
    EXPECT_EQ(job.spec().halving().factor(), 5);
  }
  EXPECT_FALSE(all[0].has_halving_stop()) << all[0].DebugString();
  EXPECT_EQ(all[0].result().step(), 1000);
  for (const v1::Job& stopped : {all[1], all[2]}) {
    EXPECT_EQ(stopped.halving_stop().rung(), 40) << stopped.DebugString();
    EXPECT_EQ(stopped.halving_stop().eval_step(), 40);
    EXPECT_EQ(stopped.state_reason(),
              "finished: stopped early at rung 40 (spec.halving)");
    // Stopped soon after step 40, with a checkpoint it can resume from.
    EXPECT_GE(stopped.result().step(), 40);
    EXPECT_LT(stopped.result().step(), 1000) << "ran to the end anyway";
    EXPECT_EQ(stopped.result().checkpoint_path(),
              stopped.last_checkpoint().path());
    EXPECT_TRUE(std::filesystem::exists(stopped.result().checkpoint_path()))
        << stopped.result().checkpoint_path();
    EXPECT_THAT(stopped.result().stopped_early(),
                HasSubstr("(rung 40) is not among the best 1/5 of the"));
  }
  CommandResult got = Yard({"get", "j-000002"});
  ASSERT_EQ(got.exit_code(), YardExit::kOk) << got.DebugString();
  EXPECT_THAT(got.out, ContainsRegex("Halving: +group h1, rungs at step 40 "
                                     "and each 5x further"));
  EXPECT_THAT(got.out, HasSubstr("stopped early: eval loss"));
}

// `yard submit --sweep ... --wait` against a real cluster: one job per value,
// each named after it, all run, and a table of their results; `yard ls
// --name` finds them; a dry run is checked by the server (here a data file
// only the server can look for) and stores nothing.
TEST_F(LifecycleTest, ASweepRunsEveryCombinationAndTabulatesTheResults) {
  YARD_ASSERT_OK(StartServer());
  YARD_ASSERT_OK(StartReadyWorker({.name = "w1", .cpu_slots = 2}).status());
  const std::string path = WriteSpec(
      "grid.yaml",
      MnistSpec{.name = "grid", .steps = 60, .holdout = 500}.ToYaml());
  CommandResult sweep =
      Yard({"submit", path, "--sweep", "optimizer.lr=0.01,0.001",
            "--request-id", "g1", "--wait"},
           JobTimeout());
  ASSERT_EQ(sweep.exit_code(), YardExit::kOk) << sweep.DebugString();
  EXPECT_THAT(sweep.out, HasSubstr("j-000001  grid optimizer.lr=0.01\n"));
  EXPECT_THAT(sweep.out, HasSubstr("j-000002  grid optimizer.lr=0.001\n"));
  EXPECT_THAT(sweep.out, HasSubstr("OPTIMIZER.LR"));
  EXPECT_THAT(sweep.out, ContainsRegex("j-000001  SUCCEEDED  0.01 +60/60"));
  EXPECT_THAT(sweep.out, ContainsRegex("j-000002  SUCCEEDED  0.001 +60/60"));
  EXPECT_THAT(sweep.out, ContainsRegex("best: j-00000[12] \\(accuracy"));

  YARD_ASSIGN_OR_FAIL(std::vector<v1::Job> all, ListAllJobs(jobs()));
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].request_id(), "g1-1");
  EXPECT_FLOAT_EQ(all[0].spec().optimizer().lr(), 0.01f);
  EXPECT_FLOAT_EQ(all[1].spec().optimizer().lr(), 0.001f);
  EXPECT_GT(all[0].result().eval_accuracy(), 0);

  CommandResult listed = Yard({"ls", "--name", "grid optimizer.lr=0.00"});
  ASSERT_EQ(listed.exit_code(), YardExit::kOk) << listed.DebugString();
  EXPECT_THAT(listed.out, Not(HasSubstr("j-000001")));
  EXPECT_THAT(listed.out, HasSubstr("j-000002"));
  CommandResult ids = Yard({"ls", "-q", "--name", "grid"});
  ASSERT_EQ(ids.exit_code(), YardExit::kOk) << ids.DebugString();
  EXPECT_EQ(ids.out, "j-000001\nj-000002\n");

  CommandResult dry = Yard({"submit", path, "--dry-run"});
  ASSERT_EQ(dry.exit_code(), YardExit::kOk) << dry.DebugString();
  EXPECT_THAT(dry.out, HasSubstr("nothing was submitted"));
  EXPECT_TRUE(
      CliFailedWith(Yard({"submit", path, "--dry-run", "--set",
                          "data.mnist.images=examples/data/mnist/missing.gz"}),
                    YardExit::kInvalidArgument, {"missing.gz"}));
  EXPECT_TRUE(CliFailedWith(
      Yard({"submit", path, "--sweep", "seed=1,2", "--set",
            "depends_on=j-424242"}),
      YardExit::kInvalidArgument,
      {"sweep job 1 of 2", "depends_on[0]: job j-424242 not found"}));
  YARD_ASSIGN_OR_FAIL(all, ListAllJobs(jobs()));
  EXPECT_EQ(all.size(), 2u);
}

// A trained model leaves the cluster: `yard checkpoints` lists what the job
// kept, and `yard download` copies the newest or the best one, checked,
// byte for byte what the trainer wrote.
TEST_F(LifecycleTest, CheckpointsAreListedAndDownloaded) {
  YARD_ASSERT_OK(StartServer());
  YARD_ASSERT_OK(StartReadyWorker({.name = "w1"}).status());
  v1::JobSpec spec = MnistSpec{.name = "keeper",
                               .steps = 120,
                               .checkpoint_every = 40,
                               .eval_every = 40,
                               .holdout = 500}
                         .ToProto();
  spec.mutable_checkpoint()->set_keep_best(true);
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse sub, Submit(spec));
  const std::string id = sub.job().id();
  EXPECT_TRUE(CliFailedWith(Yard({"download", id, "--best"}),
                            YardExit::kFailedPrecondition,
                            {"has no best checkpoint"}))
      << "no best before the job has ended";
  YARD_ASSIGN_OR_FAIL(v1::Job done, WaitForTerminal(jobs(), id, JobTimeout()));
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.DebugString();
  ASSERT_FALSE(done.result().best_checkpoint_path().empty());

  CommandResult list = Yard({"checkpoints", id});
  ASSERT_EQ(list.exit_code(), YardExit::kOk) << list.DebugString();
  EXPECT_THAT(list.out, HasSubstr("STEP"));
  EXPECT_THAT(list.out, ContainsRegex("\n120 +[0-9.]+ KiB"));
  EXPECT_THAT(list.out, ContainsRegex(absl::StrCat(
                            "\n", done.result().best_step(), " .*best\n")));

  const std::string newest = dir().path() + "/newest";
  CommandResult get = Yard({"download", id, "--dir", newest});
  ASSERT_EQ(get.exit_code(), YardExit::kOk) << get.DebugString();
  EXPECT_THAT(get.out, HasSubstr(absl::StrCat("job ", id, " step 120 -> ")));
  for (const char* file : {"meta.json", "model.safetensors"}) {
    YARD_ASSIGN_OR_FAIL(std::string copy,
                        ReadWholeFile(newest + "/" + file, int64_t{1} << 30));
    YARD_ASSIGN_OR_FAIL(
        std::string original,
        ReadWholeFile(done.result().checkpoint_path() + "/" + file,
                      int64_t{1} << 30));
    EXPECT_TRUE(copy == original) << file;
  }
  const std::string best = dir().path() + "/best";
  CommandResult get_best = Yard({"download", id, "--best", "--dir", best});
  ASSERT_EQ(get_best.exit_code(), YardExit::kOk) << get_best.DebugString();
  YARD_ASSIGN_OR_FAIL(
      std::string best_copy,
      ReadWholeFile(best + "/model.safetensors", int64_t{1} << 30));
  YARD_ASSIGN_OR_FAIL(
      std::string best_original,
      ReadWholeFile(done.result().best_checkpoint_path() + "/model.safetensors",
                    int64_t{1} << 30));
  EXPECT_TRUE(best_copy == best_original);

  // Bad requests: exit codes and one line each; nothing is written.
  EXPECT_TRUE(CliFailedWith(Yard({"download", id, "--dir", newest}), 1,
                            {"already exists"}));
  EXPECT_TRUE(CliFailedWith(Yard({"download", id, "--step", "7"}),
                            YardExit::kNotFound,
                            {"no checkpoint of step 7", "120"}));
  EXPECT_TRUE(CliFailedWith(Yard({"download", "j-424242"}), YardExit::kNotFound,
                            {"j-424242 not found"}));
  // Resuming over the wire: from within the tensors file, the rest of it
  // alone; without the checkpoint's step, or past a file's end, refused.
  auto resume = [&](int64_t step, const std::string& file, int64_t offset,
                    std::string* data) {
    auto ctx = ContextWithTimeout();
    v1::DownloadCheckpointRequest r;
    r.set_job_id(id);
    r.set_step(step);
    r.set_resume_file(file);
    r.set_resume_offset(offset);
    auto reader = jobs().DownloadCheckpoint(ctx.get(), r);
    v1::CheckpointChunk chunk;
    while (reader->Read(&chunk)) *data += chunk.data();
    return reader->Finish();
  };
  std::string rest;
  grpc::Status s = resume(120, "model.safetensors", 1000, &rest);
  ASSERT_TRUE(s.ok()) << s.error_message();
  YARD_ASSIGN_OR_FAIL(
      std::string tensors,
      ReadWholeFile(newest + "/model.safetensors", int64_t{1} << 30));
  EXPECT_TRUE(rest == tensors.substr(1000));
  EXPECT_TRUE(RpcFailedWith(resume(0, "model.safetensors", 1000, &rest),
                            grpc::StatusCode::INVALID_ARGUMENT,
                            {"resume_file: needs step"}));
  EXPECT_TRUE(RpcFailedWith(resume(120, "meta.json", int64_t{1} << 40, &rest),
                            grpc::StatusCode::INVALID_ARGUMENT,
                            {"resume_offset", "past the end"}));
}

}  // namespace
}  // namespace trainyard::itest
