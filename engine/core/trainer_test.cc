// The training loop on a slice of real MNIST: loss goes down, runs are
// deterministic for a seed (and for any thread count), and resume is exact —
// a run stopped at step k and resumed ends bitwise equal to a straight run,
// with gradient accumulation and with the loader's prefetch thread.
#include "engine/core/trainer.h"

#include <filesystem>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/test_dir.h"
#include "engine/core/file_io.h"
#include "engine/core/mlp.h"
#include "engine/core/trainer_test_support.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/data/mnist.h"
#include "engine/data/shuffled_loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

// Everything one training process would own.
struct Rig {
  std::unique_ptr<CpuBackend> backend;
  std::unique_ptr<MlpModel> model;
  std::unique_ptr<ShuffledLoader> loader;
  std::unique_ptr<Trainer> trainer;
};

class TrainerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    MnistSlices slices = LoadMnistSlices(
        std::string(YARD_SOURCE_DIR) + "/examples/data/mnist", 600, 256);
    train_ = slices.train.release();
    eval_ = slices.eval.release();
  }

  // Each suite of the fixture (and its subclasses') loads its own slices.
  static void TearDownTestSuite() {
    delete train_;
    delete eval_;
    train_ = eval_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(train_, nullptr) << "the MNIST slices did not load";
  }

  static TrainerConfig Config(int64_t steps, int64_t accum = 1) {
    TrainerConfig c;
    c.total_steps = steps;
    c.micro_batch = 16;
    c.grad_accum = accum;
    c.lr = 3e-3;
    c.warmup_steps = 3;
    c.optimizer.weight_decay = 0.01;
    c.log_every_steps = 1;
    c.eval_every_steps = 10;
    c.seed = 7;
    c.fingerprint = "test";
    return c;
  }

  static Rig Make(TrainerConfig config, const std::string& dir, int threads,
                  RecordingSink* sink, std::vector<int64_t> hidden = {32, 16}) {
    Rig r;
    config.checkpoint.dir = dir;
    CpuBackendOptions bo;
    bo.threads = threads;
    r.backend = *CpuBackend::Create(bo);
    r.model = *MlpModel::Create({784, hidden, 10}, config.micro_batch,
                                r.backend.get());
    r.loader =
        *ShuffledLoader::Create(train_, {config.micro_batch, config.seed, 2});
    auto t = Trainer::Create(config, r.model.get(), r.backend.get(),
                             r.loader.get(), eval_, sink);
    EXPECT_TRUE(t.ok()) << t.status();
    r.trainer = *std::move(t);
    return r;
  }

  // A straight run of `config` to the end; returns the final state.
  std::vector<HostTensor> Straight(const TrainerConfig& config, int threads,
                                   const std::string& dir) {
    RecordingSink sink;
    Rig r = Make(config, dir, threads, &sink);
    EXPECT_EQ(*r.trainer->Run(nullptr), Trainer::Outcome::kFinished);
    return r.trainer->StateTensors();
  }

  static MnistExamples* train_;
  static MnistExamples* eval_;
  TestDir tmp_;
  // Made by the trainer.
  const std::string dir_ = tmp_.File("run");
};

MnistExamples* TrainerTest::train_ = nullptr;
MnistExamples* TrainerTest::eval_ = nullptr;

TEST_F(TrainerTest, LossDecreasesOnMnist) {
  RecordingSink sink;
  Rig r = Make(Config(60), dir_, 2, &sink);
  absl::StatusOr<EvalMetrics> before = r.trainer->Evaluate();
  ASSERT_TRUE(before.ok());
  ASSERT_EQ(*r.trainer->Run(nullptr), Trainer::Outcome::kFinished);
  const auto progress = sink.Of<TrainProgressEvent>();
  ASSERT_EQ(progress.size(), 60u);
  EXPECT_LT(progress.back().loss, 0.5 * progress.front().loss);
  const auto finished = sink.Of<TrainFinishedEvent>();
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_LT(finished[0].eval_loss, 0.5 * before->loss);
  EXPECT_GT(finished[0].eval_accuracy, 0.75);
  EXPECT_EQ(finished[0].checkpoint_path, dir_ + "/step-00000060");
  EXPECT_TRUE(std::holds_alternative<TrainStartedEvent>(sink.events.front()));
  EXPECT_TRUE(std::holds_alternative<TrainFinishedEvent>(sink.events.back()));
  EXPECT_EQ(sink.Of<EvalResultEvent>().size(), 6u);  // 10..50 and the end
}

TEST_F(TrainerTest, SameSeedSameBitsForAnyThreadCount) {
  const auto a = Straight(Config(12), 2, dir_ + "/a");
  ExpectBitwiseEqual(a, Straight(Config(12), 2, dir_ + "/b"));
  ExpectBitwiseEqual(a, Straight(Config(12), 1, dir_ + "/c"));
  ExpectBitwiseEqual(a, Straight(Config(12), 3, dir_ + "/d"));
  TrainerConfig other = Config(12);
  other.seed = 8;
  EXPECT_NE(a[0].data, Straight(other, 2, dir_ + "/e")[0].data);
}

class ExactResumeTest : public TrainerTest,
                        public ::testing::WithParamInterface<int64_t> {};

// Stop (as SIGTERM does) after step 9, resume in a fresh process-like rig,
// finish: weights, moments and the final checkpoint file equal a straight
// run's bit for bit.
TEST_P(ExactResumeTest, StoppedAndResumedEqualsStraight) {
  const TrainerConfig config = Config(20, /*accum=*/GetParam());
  const auto straight = Straight(config, 2, dir_ + "/straight");
  {
    RecordingSink sink;
    sink.stop_after = 9;
    Rig r = Make(config, dir_ + "/resumed", 2, &sink);
    ASSERT_EQ(*r.trainer->Run(&sink.stop), Trainer::Outcome::kInterrupted);
    const auto interrupted = sink.Of<TrainInterruptedEvent>();
    ASSERT_EQ(interrupted.size(), 1u);
    EXPECT_EQ(interrupted[0].step, 9);
    EXPECT_EQ(interrupted[0].checkpoint_path, dir_ + "/resumed/step-00000009");
  }
  RecordingSink sink;
  Rig r = Make(config, dir_ + "/resumed", 2, &sink);
  ASSERT_EQ(*r.trainer->Run(nullptr), Trainer::Outcome::kFinished);
  const auto started = sink.Of<TrainStartedEvent>();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].start_step, 9);
  EXPECT_EQ(started[0].resumed_from, dir_ + "/resumed/step-00000009");
  ExpectBitwiseEqual(straight, r.trainer->StateTensors());
  EXPECT_EQ(*ReadWholeFile(dir_ + "/straight/step-00000020/model.safetensors",
                           1 << 24),
            *ReadWholeFile(dir_ + "/resumed/step-00000020/model.safetensors",
                           1 << 24));
}

// Stopped inside a progress report's window (reports every 5 steps, stopped
// after step 7) and resumed, a run reports the straight run's train loss
// bit for bit at every later report and at the end: the checkpoint keeps
// the window's loss so far.
TEST_P(ExactResumeTest, StoppedBetweenReportsReportsTheStraightLosses) {
  TrainerConfig config = Config(20, /*accum=*/GetParam());
  config.log_every_steps = 5;
  RecordingSink straight;
  {
    Rig r = Make(config, dir_ + "/straight", 2, &straight);
    ASSERT_EQ(*r.trainer->Run(nullptr), Trainer::Outcome::kFinished);
  }
  {
    RecordingSink sink;
    Rig r = Make(config, dir_ + "/resumed", 2, &sink);
    ASSERT_TRUE(r.trainer->Start().ok());
    while (r.trainer->step() < 7) ASSERT_TRUE(r.trainer->Advance().ok());
    ASSERT_TRUE(r.trainer->Interrupt().ok());
  }
  RecordingSink resumed;
  Rig r = Make(config, dir_ + "/resumed", 2, &resumed);
  ASSERT_EQ(*r.trainer->Run(nullptr), Trainer::Outcome::kFinished);
  ASSERT_EQ(resumed.Of<TrainStartedEvent>()[0].start_step, 7);
  auto losses_after_7 = [](const RecordingSink& sink) {
    std::vector<std::pair<int64_t, double>> out;
    for (const TrainProgressEvent& p : sink.Of<TrainProgressEvent>()) {
      if (p.step > 7) out.emplace_back(p.step, p.loss);
    }
    return out;
  };
  const auto want = losses_after_7(straight);
  ASSERT_EQ(want.size(), 3u);  // steps 10, 15 and 20
  EXPECT_EQ(losses_after_7(resumed), want);
  EXPECT_EQ(resumed.Of<TrainFinishedEvent>()[0].train_loss,
            straight.Of<TrainFinishedEvent>()[0].train_loss);
}

INSTANTIATE_TEST_SUITE_P(GradAccum, ExactResumeTest, ::testing::Values(1, 3));

// A run killed without warning (no final checkpoint) resumes from its last
// periodic checkpoint and still ends bitwise equal.
TEST_F(TrainerTest, KilledRunResumesFromPeriodicCheckpoint) {
  TrainerConfig config = Config(16, 2);
  config.checkpoint.every_steps = 4;
  const auto straight = Straight(config, 1, dir_ + "/straight");
  {
    RecordingSink sink;
    Rig r = Make(config, dir_ + "/killed", 1, &sink);
    ASSERT_TRUE(r.trainer->Start().ok());
    for (int i = 0; i < 7; ++i) ASSERT_TRUE(r.trainer->Advance().ok());
    EXPECT_EQ(sink.Of<CheckpointSavedEvent>().size(), 1u);  // step 4
  }  // dropped on the floor like a SIGKILL: steps 5-7 are lost
  RecordingSink sink;
  Rig r = Make(config, dir_ + "/killed", 1, &sink);
  ASSERT_EQ(*r.trainer->Run(nullptr), Trainer::Outcome::kFinished);
  EXPECT_EQ(sink.Of<TrainStartedEvent>()[0].start_step, 4);
  ExpectBitwiseEqual(straight, r.trainer->StateTensors());
}

TEST_F(TrainerTest, KeepsTheLastKCheckpoints) {
  TrainerConfig config = Config(10);
  config.checkpoint.every_steps = 2;
  config.checkpoint.keep_last = 2;
  RecordingSink sink;
  Rig r = Make(config, dir_, 1, &sink);
  ASSERT_EQ(*r.trainer->Run(nullptr), Trainer::Outcome::kFinished);
  EXPECT_EQ(sink.Of<CheckpointSavedEvent>().size(), 5u);  // 2, 4, 6, 8, 10
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names,
            (std::vector<std::string>{"step-00000008", "step-00000010"}));
}

TEST_F(TrainerTest, StopBeforeTheFirstStepStillCheckpoints) {
  RecordingSink sink;
  sink.stop.store(true);
  Rig r = Make(Config(5), dir_, 1, &sink);
  ASSERT_EQ(*r.trainer->Run(&sink.stop), Trainer::Outcome::kInterrupted);
  const auto interrupted = sink.Of<TrainInterruptedEvent>();
  ASSERT_EQ(interrupted.size(), 1u);
  EXPECT_EQ(interrupted[0].step, 0);
  EXPECT_TRUE(fs::exists(dir_ + "/step-00000000/meta.json"));
}

TEST_F(TrainerTest, RefusesACheckpointOfAnotherConfiguration) {
  Straight(Config(3), 1, dir_);
  TrainerConfig other = Config(3);
  other.fingerprint = "other";
  RecordingSink sink;
  Rig r = Make(other, dir_, 1, &sink);
  absl::Status s = r.trainer->Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(s.message(), "different job configuration"))
      << s;
}

TEST_F(TrainerTest, RefusesACheckpointWhoseTensorsDoNotFit) {
  Straight(Config(3), 1, dir_);
  RecordingSink sink;
  Rig r = Make(Config(3), dir_, 1, &sink, /*hidden=*/{32, 8});
  const std::vector<HostTensor> fresh = r.trainer->StateTensors();
  absl::Status s = r.trainer->Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(
      absl::StrContains(s.message(), "tensor fc1.weight has shape [16, 32]"))
      << s;
  ExpectBitwiseEqual(fresh, r.trainer->StateTensors());  // nothing half-loaded
}

// A rehearsal before the first step (set_before_first_step, RehearseStep:
// a micro-batch's forward and backward, thrown away) leaves the run as it
// would be without it, even with gradients accumulated over micro-batches;
// it is not run for a run that is done already, and its error is Start's.
TEST_F(TrainerTest, ARehearsalBeforeTheFirstStepChangesNothing) {
  const TrainerConfig config = Config(12, /*accum=*/2);
  const auto straight = Straight(config, 2, dir_ + "/straight");
  RecordingSink sink;
  Rig r = Make(config, dir_ + "/rehearsed", 2, &sink);
  int rehearsals = 0;
  Trainer* trainer = r.trainer.get();
  r.trainer->set_before_first_step([&] {
    ++rehearsals;
    return trainer->RehearseStep();
  });
  ASSERT_EQ(*r.trainer->Run(nullptr), Trainer::Outcome::kFinished);
  EXPECT_EQ(rehearsals, 1);
  ExpectBitwiseEqual(straight, r.trainer->StateTensors());
  EXPECT_EQ(sink.Of<TrainProgressEvent>().size(), 12u);  // none for it

  RecordingSink done_sink;
  Rig done = Make(config, dir_ + "/rehearsed", 2, &done_sink);
  done.trainer->set_before_first_step([&] {
    ++rehearsals;
    return absl::OkStatus();
  });
  ASSERT_EQ(*done.trainer->Run(nullptr), Trainer::Outcome::kFinished);
  EXPECT_EQ(rehearsals, 1);

  RecordingSink failing_sink;
  Rig failing = Make(config, dir_ + "/failing", 2, &failing_sink);
  failing.trainer->set_before_first_step(
      [] { return absl::InternalError("no rehearsal today"); });
  const absl::Status start = failing.trainer->Start();
  EXPECT_EQ(start.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(start.message(), "no rehearsal today");
}

TEST_F(TrainerTest, ARunThatIsAlreadyDoneJustReports) {
  Straight(Config(3), 1, dir_);
  RecordingSink sink;
  Rig r = Make(Config(3), dir_, 1, &sink);
  ASSERT_EQ(*r.trainer->Run(nullptr), Trainer::Outcome::kFinished);
  EXPECT_EQ(sink.Of<TrainStartedEvent>()[0].start_step, 3);
  EXPECT_TRUE(sink.Of<CheckpointSavedEvent>().empty());
  EXPECT_EQ(sink.Of<TrainFinishedEvent>()[0].checkpoint_path,
            dir_ + "/step-00000003");
}

// With a min_delta no evaluation can beat, the run ends after `patience`
// evaluations past the first: patience 2, evaluations every 10 steps ->
// the first sets the best (10), 20 and 30 do not improve, stop at 30.
TrainerConfig StallingConfig(TrainerConfig c, int64_t patience) {
  c.early_stop_patience = patience;
  c.early_stop_min_delta = 100;
  return c;
}

TEST_F(TrainerTest, EarlyStoppingEndsTheRunAndSaysWhy) {
  RecordingSink sink;
  Rig r = Make(StallingConfig(Config(60), 2), dir_, 2, &sink);
  ASSERT_EQ(*r.trainer->Run(nullptr), Trainer::Outcome::kFinished);
  EXPECT_EQ(r.trainer->step(), 30);
  const auto finished = sink.Of<TrainFinishedEvent>();
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].step, 30);
  EXPECT_EQ(finished[0].checkpoint_path, dir_ + "/step-00000030");
  EXPECT_THAT(finished[0].stopped_early,
              MatchesRegex("eval loss did not improve on [0-9.]+ \\(step 10\\) "
                           "for 2 evaluations"));
  // Evaluated at 10, 20 and 30 only: the stopping one is the final one.
  const auto evals = sink.Of<EvalResultEvent>();
  ASSERT_EQ(evals.size(), 3u);
  EXPECT_EQ(evals.back().step, 30);
  EXPECT_EQ(finished[0].eval_loss, evals.back().loss);
  EXPECT_EQ(sink.Of<TrainProgressEvent>().back().step, 30);

  // Run again on its checkpoints, it stops at once, saying so again.
  RecordingSink again;
  Rig r2 = Make(StallingConfig(Config(60), 2), dir_, 2, &again);
  ASSERT_EQ(*r2.trainer->Run(nullptr), Trainer::Outcome::kFinished);
  EXPECT_EQ(again.Of<TrainStartedEvent>()[0].start_step, 30);
  EXPECT_TRUE(again.Of<TrainProgressEvent>().empty());
  EXPECT_EQ(again.Of<TrainFinishedEvent>()[0].stopped_early,
            finished[0].stopped_early);
  // With a straight run's figures: its train loss and the evaluation of
  // step 30 (kept in the checkpoint, not made again).
  EXPECT_EQ(again.Of<TrainFinishedEvent>()[0].train_loss,
            finished[0].train_loss);
  EXPECT_GT(finished[0].train_loss, 0);
  EXPECT_EQ(again.Of<TrainFinishedEvent>()[0].eval_loss, finished[0].eval_loss);
  EXPECT_EQ(again.Of<TrainFinishedEvent>()[0].eval_accuracy,
            finished[0].eval_accuracy);
  EXPECT_TRUE(again.Of<EvalResultEvent>().empty());
}

// keep_best observes the final evaluation too: resumed at its last step, a
// run does not observe that evaluation a second time (which made it say
// "for 3 evaluations" where the straight run said 2).
TEST_F(TrainerTest, ResumedAtItsLastStepARunEndsAsTheStraightOne) {
  TrainerConfig c = StallingConfig(Config(60), 2);
  c.checkpoint.keep_best = true;
  RecordingSink sink;
  Rig r = Make(c, dir_, 2, &sink);
  ASSERT_EQ(*r.trainer->Run(nullptr), Trainer::Outcome::kFinished);
  const TrainFinishedEvent first = sink.Of<TrainFinishedEvent>()[0];
  RecordingSink again;
  Rig r2 = Make(c, dir_, 2, &again);
  ASSERT_EQ(*r2.trainer->Run(nullptr), Trainer::Outcome::kFinished);
  const TrainFinishedEvent second = again.Of<TrainFinishedEvent>()[0];
  EXPECT_EQ(second.step, first.step);
  EXPECT_EQ(second.stopped_early, first.stopped_early);
  EXPECT_EQ(second.train_loss, first.train_loss);
  EXPECT_EQ(second.eval_loss, first.eval_loss);
  EXPECT_EQ(second.best_step, first.best_step);
  EXPECT_EQ(second.best_eval_loss, first.best_eval_loss);
}

TEST_F(TrainerTest, WithoutEarlyStoppingTheRunGoesToItsLastStep) {
  RecordingSink sink;
  TrainerConfig c = StallingConfig(Config(30), 5);  // 3 evaluations < 5 + 1
  Rig r = Make(c, dir_, 2, &sink);
  ASSERT_EQ(*r.trainer->Run(nullptr), Trainer::Outcome::kFinished);
  EXPECT_EQ(sink.Of<TrainFinishedEvent>()[0].step, 30);
  EXPECT_EQ(sink.Of<TrainFinishedEvent>()[0].stopped_early, "");
}

// Interrupted between evaluations, the resumed run remembers the best loss
// and the evaluations since it: it stops at the same step as a straight run
// (40: best at 10, then 20, 30, 40), bitwise equal. Without the state in
// the checkpoint it would take 30 as its first evaluation and run to 60.
TEST_F(TrainerTest, EarlyStoppingResumesExactly) {
  const TrainerConfig config = StallingConfig(Config(60), 3);
  const auto straight = Straight(config, 2, dir_ + "/straight");
  {
    RecordingSink sink;
    sink.stop_after = 25;
    Rig r = Make(config, dir_ + "/resumed", 2, &sink);
    ASSERT_EQ(*r.trainer->Run(&sink.stop), Trainer::Outcome::kInterrupted);
    ASSERT_EQ(sink.Of<TrainInterruptedEvent>()[0].step, 25);
  }
  RecordingSink sink;
  Rig r = Make(config, dir_ + "/resumed", 2, &sink);
  ASSERT_EQ(*r.trainer->Run(nullptr), Trainer::Outcome::kFinished);
  EXPECT_EQ(sink.Of<TrainStartedEvent>()[0].start_step, 25);
  EXPECT_EQ(r.trainer->step(), 40);
  EXPECT_THAT(sink.Of<TrainFinishedEvent>()[0].stopped_early,
              HasSubstr("(step 10) for 3 evaluations"));
  ExpectBitwiseEqual(straight, r.trainer->StateTensors());
}

// checkpoint.keep_best: each evaluation that is a new best is checkpointed,
// and the best one survives keep_last 1. With this learning rate the eval
// loss is not monotone, so the best is not the last (checked).
TEST_F(TrainerTest, KeepBestKeepsTheBestEvaluationsCheckpoint) {
  TrainerConfig c = Config(300);
  c.lr = 1e-2;
  c.checkpoint.keep_last = 1;
  c.checkpoint.keep_best = true;
  RecordingSink sink;
  Rig r = Make(c, dir_, 2, &sink);
  ASSERT_EQ(*r.trainer->Run(nullptr), Trainer::Outcome::kFinished);
  const auto evals = sink.Of<EvalResultEvent>();
  ASSERT_EQ(evals.size(), 30u);  // 10..290 and the end
  int64_t best_step = -1;
  double best_loss = 0;
  for (const EvalResultEvent& e : evals) {
    if (best_step < 0 || e.loss < best_loss) {
      best_step = e.step;
      best_loss = e.loss;
    }
  }
  std::string losses;
  for (const EvalResultEvent& e : evals) {
    absl::StrAppend(&losses, " ", e.step, ":", e.loss);
  }
  ASSERT_NE(best_step, 300)
      << "pick a config whose best is not the last:" << losses;
  const auto finished = sink.Of<TrainFinishedEvent>();
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].best_step, best_step);
  EXPECT_EQ(finished[0].best_eval_loss, best_loss);
  EXPECT_EQ(finished[0].best_checkpoint_path,
            dir_ + "/" + CheckpointDirName(best_step));
  absl::StatusOr<std::vector<CheckpointEntry>> list = ListCheckpoints(dir_);
  ASSERT_TRUE(list.ok()) << list.status();
  std::vector<int64_t> kept;
  for (const CheckpointEntry& e : *list) kept.push_back(e.step);
  EXPECT_EQ(kept, (std::vector<int64_t>{300, best_step}));
  absl::StatusOr<Checkpoint> best =
      ReadCheckpoint(finished[0].best_checkpoint_path);
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(best->meta.step, best_step);
  // Every new best was saved when it came (not only the last one).
  int64_t saves_at_evals = 0;
  for (const CheckpointSavedEvent& e : sink.Of<CheckpointSavedEvent>()) {
    saves_at_evals += e.step % 10 == 0 ? 1 : 0;
  }
  EXPECT_GE(saves_at_evals, 2);
}

TEST_F(TrainerTest, RejectsBadConfigs) {
  auto backend = *CpuBackend::Create({});
  auto model = *MlpModel::Create({784, {8}, 10}, 16, backend.get());
  auto loader = *ShuffledLoader::Create(train_, {16, 0, 1});
  RecordingSink sink;
  TrainerConfig c = Config(5);
  c.micro_batch = 32;  // more than the model holds
  EXPECT_FALSE(
      Trainer::Create(c, model.get(), backend.get(), loader.get(), eval_, &sink)
          .ok());
  c = Config(5);
  c.grad_accum = 0;
  EXPECT_FALSE(
      Trainer::Create(c, model.get(), backend.get(), loader.get(), eval_, &sink)
          .ok());
  c = Config(5);
  c.lr = -1;
  EXPECT_FALSE(
      Trainer::Create(c, model.get(), backend.get(), loader.get(), eval_, &sink)
          .ok());
  c = StallingConfig(Config(5), 2);
  c.eval_every_steps = 0;
  EXPECT_THAT(
      Trainer::Create(c, model.get(), backend.get(), loader.get(), eval_, &sink)
          .status()
          .message(),
      HasSubstr("early stopping and keep_best need periodic evaluations"));
  c = StallingConfig(Config(5), 2);
  EXPECT_THAT(Trainer::Create(c, model.get(), backend.get(), loader.get(),
                              nullptr, &sink)
                  .status()
                  .message(),
              HasSubstr("early stopping and keep_best need an evaluation set"));
  c.early_stop_patience = -1;
  EXPECT_FALSE(
      Trainer::Create(c, model.get(), backend.get(), loader.get(), eval_, &sink)
          .ok());
}

}  // namespace
}  // namespace trainyard::engine
