// Tests for the human output of `yard`: tables, ages, event lines, details.
#include "client/output_format.h"

#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include "absl/time/clock.h"
#include "client/proto_text_test_support.h"
#include "common/proto_time.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace trainyard::client {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
namespace v1 = ::trainyard::v1;


const absl::Time kNow = absl::FromUnixSeconds(1'700'000'000);

TEST(FormatTableTest, AlignsColumnsWithoutTrailingBlanks) {
  EXPECT_EQ(
      FormatTable({"ID", "NAME", "STATE"},
                  {{"j-1", "a-long-name", "RUNNING"}, {"j-22", "b", "Q"}}),
      "ID    NAME         STATE\n"
      "j-1   a-long-name  RUNNING\n"
      "j-22  b            Q\n");
  EXPECT_EQ(FormatTable({"A", "B"}, {}), "A  B\n");
  EXPECT_EQ(FormatTable({"A", "B"}, {{"x", ""}}), "A  B\nx\n");
}

TEST(FormatTableTest, ACellOfSeveralLinesStaysOnItsRow) {
  EXPECT_EQ(
      FormatTable({"N", "REASON", "X"},
                  {{"1", "exited with 2; stderr tail:\n  bad spec\n", "y"},
                   {"22", "ok", "z"}}),
      "N   REASON                                X\n"
      "1   exited with 2; stderr tail: bad spec  y\n"
      "22  ok                                    z\n");
}

TEST(FormatAgeTest, PicksAUnit) {
  EXPECT_EQ(FormatAge(kNow - absl::Seconds(42), kNow), "42s");
  EXPECT_EQ(FormatAge(kNow - absl::Minutes(5), kNow), "5m");
  EXPECT_EQ(FormatAge(kNow - absl::Hours(3), kNow), "3h");
  EXPECT_EQ(FormatAge(kNow - absl::Hours(50), kNow), "2d");
  EXPECT_EQ(FormatAge(kNow + absl::Seconds(3), kNow), "0s");  // clock skew
  EXPECT_EQ(FormatAge(absl::UnixEpoch(), kNow), "-");
}

TEST(FormatJobsTableTest, OneRowPerJob) {
  v1::Job running = FromText<v1::Job>(R"pb(
    id: "j-1"
    name: "mnist"
    state: RUNNING
    attempt: 1
    worker_id: "w1"
    create_time { seconds: 1699999880 }
    progress { step: 120 total_steps: 1500 }
  )pb");
  v1::Job queued = FromText<v1::Job>(R"pb(
    id: "j-22"
    state: QUEUED
    spec { steps: 10 }
    create_time { seconds: 1699990000 }
  )pb");
  EXPECT_EQ(FormatJobsTable({running, queued}, kNow),
            "ID    NAME   STATE    ATTEMPT  WORKER  STEP      AGE\n"
            "j-1   mnist  RUNNING  1        w1      120/1500  2m\n"
            "j-22  -      QUEUED   -        -       -         2h\n");
}

TEST(FormatJobsTableTest, QueuedJobsShowTheirPlaceInTheQueue) {
  v1::Job queued = FromText<v1::Job>(R"pb(
    id: "j-3"
    state: QUEUED
    queue_position: 3
    create_time { seconds: 1699999880 }
  )pb");
  v1::Job stale = FromText<v1::Job>(R"pb(
    id: "j-4"
    state: RUNNING
    queue_position: 2
    create_time { seconds: 1699999880 }
  )pb");
  EXPECT_EQ(FormatJobsTable({queued, stale}, kNow),
            "ID   NAME  STATE        ATTEMPT  WORKER  STEP  AGE\n"
            "j-3  -     QUEUED (#3)  -        -       -     2m\n"
            "j-4  -     RUNNING      -        -       -     2m\n");
}

TEST(FormatJobDetailsTest, QueuedJobSaysWhereAndWhyItWaits) {
  auto job = FromText<v1::Job>(R"pb(
    id: "j-7"
    state: QUEUED
    state_reason: "waiting for 1 free CPU slot"
    queue_position: 2
  )pb");
  std::string text = FormatJobDetails(job, kNow);
  EXPECT_THAT(text, HasSubstr("State:    QUEUED (#2 in the queue)\n"));
  EXPECT_THAT(text, HasSubstr("Waiting:  waiting for 1 free CPU slot\n"));
  job.set_queue_position(0);  // not known yet (no pass since a restart)
  text = FormatJobDetails(job, kNow);
  EXPECT_THAT(text, HasSubstr("State:    QUEUED\n"));
  EXPECT_THAT(text, Not(HasSubstr("GPU models")));
}

TEST(FormatJobDetailsTest, ShowsTheGpuModelsAJobMayRunOn) {
  auto job = FromText<v1::Job>(R"pb(
    id: "j-8"
    state: QUEUED
    state_reason: "infeasible: no connected worker has a GPU of model \"H100\" (GPUs here: \"Tesla T4\")"
    spec { resources { gpus: 2 gpu_models: "H100" gpu_models: "A100" } }
  )pb");
  const std::string text = FormatJobDetails(job, kNow);
  EXPECT_THAT(text, HasSubstr("GPU models:  H100, A100 (only GPUs whose name "
                              "contains one, case ignored)\n"));
  EXPECT_THAT(text, HasSubstr("no connected worker has a GPU of model "
                              "\"H100\""));
}

TEST(FormatEventTest, Progress) {
  auto e = FromText<v1::JobEvent>(R"pb(
    sequence: 7
    trainer {
      progress {
        step: 120
        total_steps: 1500
        loss: 0.41234
        samples_per_second: 1800.4
      }
    }
  )pb");
  EXPECT_EQ(FormatEvent(e), "step 120/1500 loss 0.4123 1800 samples/s");
  e.mutable_trainer()->mutable_progress()->set_tokens_per_second(5000);
  EXPECT_EQ(FormatEvent(e),
            "step 120/1500 loss 0.4123 1800 samples/s 5000 tokens/s");
}

TEST(FormatEventTest, EvalCheckpointAndFinish) {
  EXPECT_EQ(FormatEvent(FromText<v1::JobEvent>(R"pb(
              trainer { eval { step: 500 loss: 0.21 accuracy: 0.951 } })pb")),
            "eval step 500: loss 0.2100 accuracy 95.10%");
  EXPECT_EQ(
      FormatEvent(FromText<v1::JobEvent>(R"pb(
        trainer { checkpoint { step: 500 path: "/ck/j-1/step-500" } })pb")),
      "checkpoint step 500: /ck/j-1/step-500");
  EXPECT_EQ(FormatEvent(FromText<v1::JobEvent>(R"pb(
              trainer {
                finished {
                  step: 1500
                  train_loss: 0.1
                  eval_loss: 0.2
                  eval_accuracy: 0.9612
                  wall_seconds: 83.21
                  checkpoint_path: "/ck"
                }
              })pb")),
            "training finished at step 1500: train loss 0.1000, eval loss "
            "0.2000, accuracy 96.12% (83.2 s)");
  // No evaluation ran: no eval figures (not zeros); a 0% accuracy of one
  // that ran is shown.
  EXPECT_EQ(
      FormatEvent(FromText<v1::JobEvent>(R"pb(
        trainer { finished { step: 5 train_loss: 2.3 wall_seconds: 1 } })pb")),
      "training finished at step 5: train loss 2.3000 (1.0 s)");
  EXPECT_EQ(
      FormatEvent(FromText<v1::JobEvent>(R"pb(
        trainer {
          finished { step: 5 train_loss: 2.3 eval_loss: 4.6 wall_seconds: 1 }
        })pb")),
      "training finished at step 5: train loss 2.3000, eval loss "
      "4.6000, accuracy 0.00% (1.0 s)");
  EXPECT_EQ(FormatEvent(FromText<v1::JobEvent>(R"pb(
              trainer { eval { step: 3 loss: 4.6 examples: 128 } })pb")),
            "eval step 3: loss 4.6000 accuracy 0.00%");
  EXPECT_EQ(
      FormatEvent(FromText<v1::JobEvent>(R"pb(
        trainer { interrupted { step: 700 checkpoint_path: "/ck/7" } })pb")),
      "training interrupted at step 700: checkpoint /ck/7");
}

TEST(FormatEventTest, StartedAndResumed) {
  EXPECT_EQ(FormatEvent(FromText<v1::JobEvent>(R"pb(
              trainer {
                started { total_steps: 1500 parameters: 235146 backend: "cpu" }
              })pb")),
            "training started: 1500 steps, 235146 parameters, cpu");
  EXPECT_EQ(FormatEvent(FromText<v1::JobEvent>(R"pb(
              trainer {
                started {
                  start_step: 500
                  total_steps: 1500
                  resumed_from: "/ck/500"
                  backend: "cpu"
                }
              })pb")),
            "training resumed at step 500/1500 from /ck/500 (cpu)");
}

TEST(FormatEventTest, StateChanges) {
  EXPECT_EQ(FormatEvent(FromText<v1::JobEvent>(R"pb(
              state_change {
                from: QUEUED
                to: SCHEDULED
                attempt: 1
                worker_id: "w1"
              })pb")),
            "state QUEUED -> SCHEDULED (attempt 1, worker w1)");
  EXPECT_EQ(FormatEvent(FromText<v1::JobEvent>(R"pb(
              state_change { to: QUEUED })pb")),
            "state - -> QUEUED");
  EXPECT_EQ(FormatEvent(FromText<v1::JobEvent>(R"pb(
              state_change { from: RUNNING to: FAILED reason: "exit 1" })pb")),
            "state RUNNING -> FAILED: exit 1");
}

TEST(FormatOutcomeTest, SucceededShowsAccuracyAndCheckpoint) {
  auto job = FromText<v1::Job>(R"pb(
    id: "j-1"
    state: SUCCEEDED
    result {
      eval_accuracy: 0.9512
      eval_loss: 0.17
      checkpoint_path: "/ck/j-1/step-1500"
    }
  )pb");
  EXPECT_EQ(FormatOutcome(job),
            "job j-1 SUCCEEDED: accuracy 95.12%, eval loss 0.1700, checkpoint "
            "/ck/j-1/step-1500");
  auto failed = FromText<v1::Job>(R"pb(
    id: "j-2"
    state: FAILED
    state_reason: "yard-train exited with 1")pb");
  EXPECT_EQ(FormatOutcome(failed), "job j-2 FAILED: yard-train exited with 1");
}

v1::Job Finished(const char* id, v1::JobState state, double train_loss,
                 double eval_loss, double accuracy) {
  v1::Job job;
  job.set_id(id);
  job.set_state(state);
  job.mutable_spec()->set_steps(100);
  if (state == v1::SUCCEEDED) {
    job.mutable_result()->set_step(100);
    job.mutable_result()->set_train_loss(train_loss);
    job.mutable_result()->set_eval_loss(eval_loss);
    job.mutable_result()->set_eval_accuracy(accuracy);
  } else {
    job.mutable_progress()->set_step(40);
    job.mutable_progress()->set_total_steps(100);
  }
  return job;
}

TEST(FormatOutcomeTest, AnEarlyStopSaysAtWhichStepAndWhy) {
  v1::Job job = Finished("j-7", v1::SUCCEEDED, 0.2, 0.25, 0.93);
  job.mutable_result()->set_step(60);
  job.mutable_result()->set_stopped_early(
      "eval loss did not improve on 0.2500 (step 30) for 3 evaluations");
  EXPECT_EQ(FormatOutcome(job),
            "job j-7 SUCCEEDED (stopped early at step 60 of 100): accuracy "
            "93.00%, eval loss 0.2500");
  v1::JobEvent event;
  *event.mutable_trainer()->mutable_finished() = job.result();
  EXPECT_THAT(FormatEvent(event),
              HasSubstr("; stopped early: eval loss did not improve on 0.2500 "
                        "(step 30) for 3 evaluations"));
  EXPECT_THAT(FormatSweepResults({job}, {"seed"}, {{"1"}}),
              HasSubstr("j-7  SUCCEEDED  1     60/100"));
}

TEST(FormatOutcomeTest, KeepBestNamesTheBestCheckpoint) {
  v1::Job job = Finished("j-8", v1::SUCCEEDED, 0.2, 0.25, 0.93);
  job.mutable_result()->set_checkpoint_path("/ck/j-8/step-00000100");
  job.mutable_result()->set_best_checkpoint_path("/ck/j-8/step-00000040");
  job.mutable_result()->set_best_step(40);
  job.mutable_result()->set_best_eval_loss(0.21);
  EXPECT_EQ(FormatOutcome(job),
            "job j-8 SUCCEEDED: accuracy 93.00%, eval loss 0.2500, checkpoint "
            "/ck/j-8/step-00000100, best checkpoint /ck/j-8/step-00000040 "
            "(step 40)");
  EXPECT_THAT(FormatJobDetails(job, absl::Now()),
              HasSubstr("Best checkpoint:   /ck/j-8/step-00000040 (step 40, "
                        "eval loss 0.2100)"));
}

TEST(FormatSweepResultsTest, OneRowPerJobWithItsValuesAndTheBest) {
  std::vector<v1::Job> jobs = {
      Finished("j-1", v1::SUCCEEDED, 0.31, 0.35, 0.912),
      Finished("j-2", v1::SUCCEEDED, 0.12, 0.20, 0.9705),
      Finished("j-3", v1::FAILED, 0, 0, 0),
  };
  EXPECT_EQ(FormatSweepResults(
                jobs, {"optimizer.lr", "model.mlp.hidden"},
                {{"0.001", "[64]"}, {"0.003", "[128,64]"}, {"0.01", "[64]"}}),
            "ID   STATE      OPTIMIZER.LR  MODEL.MLP.HIDDEN  STEP     "
            "TRAIN-LOSS  EVAL-LOSS  ACCURACY\n"
            "j-1  SUCCEEDED  0.001         [64]              100/100  0.3100"
            "      0.3500     91.20%\n"
            "j-2  SUCCEEDED  0.003         [128,64]          100/100  0.1200"
            "      0.2000     97.05%\n"
            "j-3  FAILED     0.01          [64]              40/100   -"
            "           -          -\n"
            "best: j-2 (accuracy 97.05%)\n");
}

// Jobs halving stopped are listed under the table and are not the best
// while some job ran on, though an early evaluation scored better.
TEST(FormatSweepResultsTest, HalvedJobsAreNamedAndNotTheBest) {
  std::vector<v1::Job> jobs = {
      Finished("j-1", v1::SUCCEEDED, 0.31, 0.35, 0.912),
      Finished("j-2", v1::SUCCEEDED, 0.5, 0.2, 0.95),
      Finished("j-3", v1::SUCCEEDED, 0.9, 0.8, 0.7),
  };
  jobs[1].mutable_halving_stop()->set_rung(30);
  jobs[2].mutable_halving_stop()->set_rung(10);
  const std::string table =
      FormatSweepResults(jobs, {"seed"}, {{"1"}, {"2"}, {"3"}});
  EXPECT_THAT(table, HasSubstr("stopped early by halving: j-2 (rung 30), "
                               "j-3 (rung 10)\n"));
  EXPECT_THAT(table, HasSubstr("best: j-1 (accuracy 91.20%)\n"));
  // When halving stopped every job that ended, the best is among them.
  jobs[0].set_state(v1::FAILED);
  EXPECT_THAT(FormatSweepResults(jobs, {"seed"}, {{"1"}, {"2"}, {"3"}}),
              HasSubstr("best: j-2 (accuracy 95.00%)\n"));
}

// Without accuracies (a language model) the best has the lowest eval loss,
// without evaluation the lowest train loss; none when nothing succeeded.
TEST(FormatSweepResultsTest, TheBestFallsBackToLosses) {
  std::vector<v1::Job> gpt = {Finished("j-1", v1::SUCCEEDED, 1.9, 2.1, 0),
                              Finished("j-2", v1::SUCCEEDED, 2.0, 2.05, 0)};
  EXPECT_THAT(FormatSweepResults(gpt, {"seed"}, {{"1"}, {"2"}}),
              HasSubstr("best: j-2 (eval loss 2.0500)\n"));
  std::vector<v1::Job> no_eval = {Finished("j-1", v1::SUCCEEDED, 1.9, 0, 0),
                                  Finished("j-2", v1::SUCCEEDED, 2.0, 0, 0)};
  EXPECT_THAT(FormatSweepResults(no_eval, {"seed"}, {{"1"}, {"2"}}),
              HasSubstr("best: j-1 (train loss 1.9000)\n"));
  std::vector<v1::Job> none = {Finished("j-1", v1::CANCELLED, 0, 0, 0)};
  EXPECT_THAT(FormatSweepResults(none, {"seed"}, {{"1"}}),
              Not(HasSubstr("best")));
}

TEST(FormatJobDetailsTest, ShowsWhatIsKnown) {
  auto job = FromText<v1::Job>(R"pb(
    id: "j-1"
    name: "mnist"
    state: RUNNING
    attempt: 2
    worker_id: "w2"
    create_time { seconds: 1699999000 }
    progress { step: 10 total_steps: 100 loss: 1.5 }
    checkpoint_dir: "/ck/j-1"
    attempts { number: 1 worker_id: "w1" outcome: QUEUED reason: "worker lost" }
    attempts { number: 2 worker_id: "w2" resumed_from_step: 5 }
  )pb");
  std::string text = FormatJobDetails(job, kNow);
  EXPECT_THAT(text, HasSubstr("ID:              j-1\n"));
  EXPECT_THAT(text, HasSubstr("State:           RUNNING\n"));
  EXPECT_THAT(text, HasSubstr("Attempt:         2 on worker w2\n"));
  {
    // Ended, a job spread over workers keeps them in its attempt's record.
    v1::Job spread = job;
    spread.mutable_attempts(1)->add_more_workers("w3");
    spread.mutable_attempts(1)->add_more_workers("w4");
    EXPECT_THAT(FormatJobDetails(spread, kNow),
                HasSubstr("Attempt:         2 on workers w2, w3, w4\n"));
  }
  EXPECT_THAT(text,
              HasSubstr("Created:         2023-11-14 21:56:40 UTC (16m ago)"));
  EXPECT_THAT(text, HasSubstr("Progress:        step 10/100 loss 1.5000"));
  EXPECT_THAT(text, HasSubstr("Checkpoint dir:  /ck/j-1\n"));
  EXPECT_THAT(text, HasSubstr("worker lost"));
  EXPECT_THAT(text, Not(HasSubstr("Ended")));
  EXPECT_THAT(text, Not(HasSubstr("Restarts")));  // none allowed
  EXPECT_THAT(text, Not(HasSubstr("Time limit")));
  EXPECT_THAT(text, Not(HasSubstr("Deleted at")));
  EXPECT_THAT(text, Not(HasSubstr("Depends on")));
  job.mutable_spec()->add_depends_on("j-7");
  job.mutable_spec()->add_depends_on("j-9");
  EXPECT_THAT(FormatJobDetails(job, kNow),
              HasSubstr("Depends on:      j-7, j-9\n"));
  job.set_dependencies_met(true);
  EXPECT_THAT(FormatJobDetails(job, kNow),
              HasSubstr("Depends on:      j-7, j-9 (all succeeded)\n"));
  job.mutable_spec()->clear_depends_on();
  EXPECT_THAT(text, Not(HasSubstr("Warm start")));
  job.mutable_spec()->mutable_warm_start()->set_job("j-3");
  EXPECT_THAT(FormatJobDetails(job, kNow),
              HasSubstr("Warm start:      j-3, its newest checkpoint (picked "
                        "when j-3 ends)\n"));
  job.mutable_spec()->mutable_warm_start()->set_best(true);
  EXPECT_THAT(FormatJobDetails(job, kNow),
              HasSubstr("Warm start:      j-3, its best checkpoint"));
  job.mutable_spec()->mutable_warm_start()->set_best(false);
  job.mutable_spec()->mutable_warm_start()->set_step(40);
  EXPECT_THAT(FormatJobDetails(job, kNow),
              HasSubstr("Warm start:      j-3, step 40 (picked"));
  job.set_warm_start_checkpoint("/ck/j-3/step-00000040");
  job.set_warm_start_step(40);
  EXPECT_THAT(
      FormatJobDetails(job, kNow),
      HasSubstr("Warm start:      j-3 step 40 (/ck/j-3/step-00000040)\n"));
  job.mutable_spec()->clear_warm_start();
  EXPECT_THAT(text, Not(HasSubstr("Concurrency")));
  job.mutable_spec()->mutable_concurrency()->set_group("sweep-1");
  job.mutable_spec()->mutable_concurrency()->set_max_running(2);
  EXPECT_THAT(FormatJobDetails(job, kNow),
              HasSubstr("Concurrency:     group sweep-1, at most 2 running\n"));
  job.mutable_spec()->clear_concurrency();
  EXPECT_THAT(text, Not(HasSubstr("Halving")));
  job.mutable_spec()->mutable_halving()->set_group("sweep-1");
  job.mutable_spec()->mutable_halving()->set_min_steps(40);
  job.mutable_spec()->mutable_halving()->set_factor(3);
  EXPECT_THAT(FormatJobDetails(job, kNow),
              HasSubstr("Halving:         group sweep-1, rungs at step 40 and "
                        "each 3x further, the best 1/3 going on\n"));
  job.mutable_spec()->clear_halving();
  *job.mutable_delete_time() = ToProtoTime(kNow + absl::Hours(49));
  EXPECT_THAT(FormatJobDetails(job, kNow),
              HasSubstr("Deleted at:      2023-11-16 23:13:20 UTC (in 2d, by "
                        "the server's job retention)\n"));
  job.clear_delete_time();
  job.mutable_spec()->set_time_limit_s(5400);
  EXPECT_THAT(FormatJobDetails(job, kNow),
              HasSubstr("Time limit:      1h30m\n"));

  job.mutable_spec()->set_max_restarts(3);
  job.set_restarts(1);
  EXPECT_THAT(FormatJobDetails(job, kNow),
              HasSubstr("Restarts:        1 of 3 after failures\n"));
  // Back in the queue, waiting out the restart backoff.
  job.set_state(v1::QUEUED);
  *job.mutable_restart_after() = ToProtoTime(kNow + absl::Seconds(40));
  EXPECT_THAT(FormatJobDetails(job, kNow),
              HasSubstr("Restarts:        1 of 3 after failures; the next "
                        "attempt waits 40s\n"));
  EXPECT_THAT(FormatJobDetails(job, kNow + absl::Milliseconds(39'500)),
              HasSubstr("; the next attempt waits 1s\n"));
  // The backoff is over.
  EXPECT_THAT(FormatJobDetails(job, kNow + absl::Seconds(41)),
              HasSubstr("Restarts:        1 of 3 after failures\n"));
}

TEST(FormatJobDetailsTest, AReasonOfSeveralLinesStaysInTheValueColumn) {
  auto job = FromText<v1::Job>(R"pb(
    id: "j-1"
    state: FAILED
    state_reason: "exited with code 2; stderr tail:\nyard-train: bad vocab"
    attempt: 1
    worker_id: "w1"
    attempts {
      number: 1
      worker_id: "w1"
      outcome: FAILED
      reason: "exited with code 2; stderr tail:\nyard-train: bad vocab"
    }
  )pb");
  const std::string text = FormatJobDetails(job, kNow);
  EXPECT_THAT(text, HasSubstr("State:    FAILED: exited with code 2; stderr "
                              "tail:\n          yard-train: bad vocab\n"));
  EXPECT_THAT(text, HasSubstr("FAILED   0          exited with code 2; "
                              "stderr tail: yard-train: bad vocab\n"));
}

TEST(FormatWorkersTableTest, WorkersAndSummary) {
  auto w = FromText<v1::Worker>(R"pb(
    id: "w1"
    hostname: "node1"
    state: WORKER_READY
    cpu_slots: 2
    free_cpu_slots: 1
    jobs { job_id: "j-1" }
    last_heartbeat { seconds: 1699999999 }
  )pb");
  auto status = FromText<v1::ClusterStatus>(
      R"pb(
        workers_ready: 1 cpu_slots_total: 2 cpu_slots_free: 1 jobs_running: 1
      )pb");
  EXPECT_EQ(FormatWorkersTable({w}, &status, kNow),
            "ID  HOST   STATE  FREE-SLOTS  FREE-GPUS  JOBS  HEARTBEAT\n"
            "w1  node1  READY  1/2         0/0        j-1   1s ago\n"
            "\n1 ready, 0 lost; cpu slots 1/2 free; gpus 0/0 free; jobs 0 "
            "queued, 1 running, 0 succeeded, 0 failed, 0 cancelled\n");
}

// GPUs under NVIDIA MPS (the only ones the server shares by default) are
// marked, all of a worker's or how many.
TEST(FormatWorkersTableTest, GpusUnderMpsAreMarked) {
  auto all = FromText<v1::Worker>(R"pb(
    id: "a"
    state: WORKER_READY
    free_gpus: 1
    devices { index: 0 mps: true }
    devices { index: 1 mps: true }
  )pb");
  auto some = FromText<v1::Worker>(R"pb(
    id: "s"
    state: WORKER_READY
    free_gpus: 2
    devices { index: 0 mps: true }
    devices { index: 1 }
  )pb");
  auto none = FromText<v1::Worker>(R"pb(
    id: "n"
    state: WORKER_READY
    devices { index: 0 }
  )pb");
  EXPECT_EQ(FormatWorkersTable({all, some, none}, nullptr, kNow),
            "ID  HOST  STATE  FREE-SLOTS  FREE-GPUS    JOBS  HEARTBEAT\n"
            "a   -     READY  0/0         1/2 MPS      -     -\n"
            "s   -     READY  0/0         2/2 (1 MPS)  -     -\n"
            "n   -     READY  0/0         0/1          -     -\n");
}

TEST(FormatWorkersTableTest, ADrainedWorkerShowsWhoDrainsItAndWhy) {
  auto drained = FromText<v1::Worker>(R"pb(
    id: "w1"
    state: WORKER_DRAINING
    cpu_slots: 2
    jobs { job_id: "j-1" }
    drain { worker_id: "w1" reason: "disk swap\n  rack 4\n" keep_jobs: true }
  )pb");
  auto quitting =
      FromText<v1::Worker>(R"pb(
        id: "w2" state: WORKER_DRAINING cpu_slots: 1
      )pb");
  auto no_reason = FromText<v1::Worker>(R"pb(
    id: "w3"
    state: WORKER_DRAINING
    drain { worker_id: "w3" }
  )pb");
  auto lost = FromText<v1::Worker>(R"pb(
    id: "w4"
    state: WORKER_LOST
    drain { worker_id: "w4" reason: "bios" }
  )pb");
  EXPECT_EQ(
      FormatWorkersTable({drained, quitting, no_reason, lost}, nullptr, kNow),
      "ID  HOST  STATE                               FREE-SLOTS  FREE-GPUS  "
      "JOBS  HEARTBEAT\n"
      "w1  -     DRAINING (admin: disk swap rack 4)  0/2         0/0        "
      "j-1   -\n"
      "w2  -     DRAINING                            0/1         0/0        "
      "-     -\n"
      "w3  -     DRAINING (admin)                    0/0         0/0        "
      "-     -\n"
      "w4  -     LOST (drained by admin: bios)       0/0         0/0        "
      "-     -\n");
}

TEST(FormatWorkersTableTest, TheSummaryCountsDrainingWorkersApart) {
  auto status = FromText<v1::ClusterStatus>(
      R"pb(
        workers_ready: 1 workers_draining: 2 cpu_slots_total: 6 cpu_slots_free: 1
      )pb");
  EXPECT_THAT(FormatWorkersTable({}, &status, kNow),
              HasSubstr("1 ready, 2 draining, 0 lost; cpu slots 1/6 free"));
}

TEST(WorkerStateNameTest, DropsThePrefix) {
  EXPECT_EQ(WorkerStateName(v1::WORKER_READY), "READY");
  EXPECT_EQ(WorkerStateName(v1::WORKER_DRAINING), "DRAINING");
  EXPECT_EQ(WorkerStateName(v1::WORKER_STATE_UNSPECIFIED), "-");
}

TEST(FormatDeletedTest, NamesTheCheckpointsRemovedKeptOrAbsent) {
  auto removed = FromText<v1::DeleteJobResponse>(R"pb(
    job_id: "j-000001"
    deleted_checkpoint_dir: "/var/lib/trainyard/checkpoints/j-000001"
    deleted_checkpoint_bytes: 1288490189
  )pb");
  EXPECT_EQ(FormatDeleted(removed, false),
            "deleted job j-000001 and its checkpoints "
            "(/var/lib/trainyard/checkpoints/j-000001, 1.2 GiB)");
  auto none = FromText<v1::DeleteJobResponse>(R"pb(job_id: "j-000001")pb");
  EXPECT_EQ(FormatDeleted(none, true),
            "deleted job j-000001 (checkpoints kept)");
  EXPECT_EQ(FormatDeleted(none, false),
            "deleted job j-000001 (no checkpoint directory removed)");
  auto empty_dir = FromText<v1::DeleteJobResponse>(R"pb(
    job_id: "j-2"
    deleted_checkpoint_dir: "/ckpt/j-2"
  )pb");
  EXPECT_EQ(FormatDeleted(empty_dir, false),
            "deleted job j-2 and its checkpoints (/ckpt/j-2, 0 B)");
}

TEST(ToJsonTest, ProtoFieldNames) {
  auto job =
      FromText<v1::Job>(R"pb(id: "j-1" state: SUCCEEDED worker_id: "w")pb");
  EXPECT_THAT(ToJson(job, false).value_or(""),
              AllOf(HasSubstr(R"("id":"j-1")"),
                    HasSubstr(R"("state":"SUCCEEDED")"),
                    HasSubstr(R"("worker_id":"w")")));
  EXPECT_THAT(ToJson(job, true).value_or(""), HasSubstr("\n"));
}

// A time past year 9999 (which an older server could send as a delete
// time) cannot be printed as JSON: an error naming the message, and
// nothing printed, rather than the JSON cut off where protobuf stopped.
TEST(ToJsonTest, AMessageProtobufCannotPrintIsAnErrorNotPartialJson) {
  auto job = FromText<v1::Job>(R"pb(
    id: "j-1"
    state: SUCCEEDED
    end_time { seconds: 253402214400 }
    delete_time { seconds: 253717747200 }
  )pb");
  absl::StatusOr<std::string> json = ToJson(job, true);
  ASSERT_FALSE(json.ok());
  EXPECT_EQ(json.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(json.status().message(),
              HasSubstr("cannot print the server's Job as JSON"));
  std::ostringstream out;
  EXPECT_FALSE(PrintJson(out, job, true).ok());
  EXPECT_EQ(out.str(), "");

  job.clear_delete_time();
  EXPECT_TRUE(PrintJson(out, job, false).ok());
  EXPECT_THAT(out.str(), HasSubstr("\"end_time\":\"9999-12-31T00:00:00Z\""));
}

// Fields at zero are printed too: GPU 0 has an index in the JSON.
TEST(ToJsonTest, ZerosArePrinted) {
  auto grant = FromText<v1::GpuGrant>(R"pb(memory_bytes: 1024)pb");
  EXPECT_EQ(ToJson(grant, false).value_or(""),
            R"({"index":0,"shared":false,"memory_bytes":"1024",)"
            R"("compute_milli":0})");
}

v1::LogChunk Chunk(int64_t offset, const std::string& data) {
  v1::LogChunk c;
  c.set_offset(offset);
  c.set_data(data);
  return c;
}

TEST(LogLinesToJsonTest, OneObjectALineWhereverChunksCut) {
  LogLinesToJson lines;
  EXPECT_EQ(lines.Add(Chunk(100, "first li")), "");
  EXPECT_EQ(lines.Add(Chunk(108, "ne\nsecond \"q\"\n\nthi")),
            "{\"offset\":100,\"line\":\"first line\"}\n"
            "{\"offset\":111,\"line\":\"second \\\"q\\\"\"}\n"
            "{\"offset\":122,\"line\":\"\"}\n");
  EXPECT_EQ(lines.Add(Chunk(126, "rd\tend")), "");
  EXPECT_EQ(lines.Finish(), "{\"offset\":123,\"line\":\"third\\tend\"}\n");
  EXPECT_EQ(lines.Finish(), "");
}

TEST(LogLinesToJsonTest, BadUtf8BecomesReplacementCharacters) {
  LogLinesToJson lines;
  EXPECT_EQ(lines.Add(Chunk(0, "caf\xc3\xa9 \xff\n")),
            "{\"offset\":0,\"line\":\"caf\xc3\xa9 \xef\xbf\xbd\"}\n");
}

TEST(LogLinesToJsonTest, AGapEndsTheOpenLine) {
  LogLinesToJson lines;
  EXPECT_EQ(lines.Add(Chunk(0, "cut")), "");
  EXPECT_EQ(lines.Add(Chunk(50, "next\n")),
            "{\"offset\":0,\"line\":\"cut\"}\n"
            "{\"offset\":50,\"line\":\"next\"}\n");
}

}  // namespace
}  // namespace trainyard::client
