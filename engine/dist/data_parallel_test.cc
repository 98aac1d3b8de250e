// Data-parallel training on the CPU through the real TCP collective, ranks
// on threads of this process: the math of N ranks x micro-batch B equals one
// rank x N*B (within fp32 rounding: the sums are taken in another order),
// the ranks stay bitwise equal to each other, and a stop asked by one rank
// stops all of them after the same step, from which they resume exactly.
// Gradients summed in buckets during backward give bitwise the result of
// one sum after it, whatever the bucket size; a rank dying partway through
// a step fails the others at once with an error naming it.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/test_dir.h"
#include "engine/core/mlp.h"
#include "engine/core/trainer.h"
#include "engine/core/trainer_test_support.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/data/mnist.h"
#include "engine/data/shuffled_loader.h"
#include "engine/dist/socket_collective.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A rank that dies at its die_at-th started all-reduce, partway through a
// step's backward: its sockets close, as when its process is killed.
class DyingCollective : public Collective {
 public:
  DyingCollective(std::unique_ptr<SocketCollective> inner, int die_at)
      : inner_(std::move(inner)),
        rank_(inner_->rank()),
        world_size_(inner_->world_size()),
        die_at_(die_at) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  absl::Status AllReduceSum(std::span<const FloatSpan> tensors) override {
    StartAllReduceSum({tensors.begin(), tensors.end()});
    return WaitAll();
  }
  void StartAllReduceSum(std::vector<FloatSpan> tensors) override {
    if (inner_ != nullptr && ++starts_ == die_at_) inner_.reset();
    if (inner_ != nullptr) inner_->StartAllReduceSum(std::move(tensors));
  }
  absl::Status WaitAll() override {
    if (inner_ == nullptr) return absl::UnavailableError("this rank died");
    return inner_->WaitAll();
  }

 private:
  std::unique_ptr<SocketCollective> inner_;
  const int rank_, world_size_, die_at_;
  int starts_ = 0;
};

// One rank's training: what a yard-train process owns.
struct RankRun {
  RecordingSink sink;
  std::vector<HostTensor> state;
  absl::StatusOr<Trainer::Outcome> outcome = absl::UnknownError("not run");
  int64_t step = 0;
};

class DataParallelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    MnistSlices slices = LoadMnistSlices(
        std::string(YARD_SOURCE_DIR) + "/examples/data/mnist", 640, 128);
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

  static TrainerConfig Config(int64_t steps, int64_t micro_batch,
                              int64_t accum = 1) {
    TrainerConfig c;
    c.total_steps = steps;
    c.micro_batch = micro_batch;
    c.grad_accum = accum;
    c.lr = 3e-3;
    c.warmup_steps = 2;
    c.optimizer.weight_decay = 0.01;
    c.log_every_steps = 5;
    c.eval_every_steps = 10;
    c.checkpoint.every_steps = 0;
    c.seed = 11;
    c.fingerprint = "dp";
    return c;
  }

  // Trains `config` with `world` ranks on threads. With `stop_rank_at` >
  // 0, rank 1's stop flag is raised once rank 0 reports that step, so the
  // stop is asked by a rank that is not the one reporting.
  // With `rank1_dies_at` > 0, rank 1 dies at that started all-reduce.
  std::vector<RankRun> Train(const TrainerConfig& config, int world,
                             const std::string& name, int64_t stop_rank_at = 0,
                             int rank1_dies_at = 0) {
    std::vector<RankRun> runs(world);
    std::atomic<bool> rank1_stop{false};
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        static std::atomic<bool> never{false};
        if (r == 0 && stop_rank_at > 0) {
          runs[0].sink.stop_signal = &rank1_stop;
          runs[0].sink.stop_after = stop_rank_at;
        }
        TrainRank(config, world, r, name, r == 1 ? &rank1_stop : &never,
                  r == 1 ? rank1_dies_at : 0, &runs[r]);
      });
    }
    for (std::thread& t : threads) t.join();
    return runs;
  }

  void TrainRank(TrainerConfig config, int world, int rank,
                 const std::string& name, const std::atomic<bool>* stop,
                 int dies_at, RankRun* run) {
    SocketCollectiveOptions options;
    options.rank = rank;
    options.world_size = world;
    options.rendezvous_file = absl::StrCat(dir_, "/", name, ".rendezvous");
    options.connect_timeout = absl::Seconds(30);
    options.io_timeout = io_timeout_;
    auto connected = SocketCollective::Connect(options);
    ASSERT_TRUE(connected.ok()) << connected.status();
    std::unique_ptr<Collective> collective = *std::move(connected);
    if (dies_at > 0) {
      collective = std::make_unique<DyingCollective>(
          std::unique_ptr<SocketCollective>(
              static_cast<SocketCollective*>(collective.release())),
          dies_at);
    }
    config.checkpoint.dir = absl::StrCat(dir_, "/", name);
    CpuBackendOptions backend_options;
    backend_options.threads = 1;
    auto backend = *CpuBackend::Create(backend_options);
    auto model =
        *MlpModel::Create({784, {32}, 10}, config.micro_batch, backend.get());
    auto loader = *ShuffledLoader::Create(
        train_, {config.micro_batch * world, config.seed, 2});
    auto trainer =
        Trainer::Create(config, model.get(), backend.get(), loader.get(), eval_,
                        &run->sink, Clock::Real(), collective.get());
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    run->outcome = (*trainer)->Run(stop);
    run->state = (*trainer)->StateTensors();
    run->step = (*trainer)->step();
  }

  // Largest |a - b| over the weights (not the AdamW moments).
  static double MaxWeightDifference(const std::vector<HostTensor>& a,
                                    const std::vector<HostTensor>& b) {
    double worst = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (a[i].name.find("adam") != std::string::npos) continue;
      for (size_t j = 0; j < a[i].data.size(); ++j) {
        worst = std::max(
            worst, std::fabs(double{a[i].data[j]} - double{b[i].data[j]}));
      }
    }
    return worst;
  }

  static MnistExamples* train_;
  static MnistExamples* eval_;
  TestDir tmp_;
  const std::string dir_ = tmp_.path();
  absl::Duration io_timeout_ = absl::Seconds(30);
};

MnistExamples* DataParallelTest::train_ = nullptr;
MnistExamples* DataParallelTest::eval_ = nullptr;

TEST_F(DataParallelTest, TwoRanksOfBMatchOneRankOf2B) {
  const std::vector<RankRun> one = Train(Config(20, 32), 1, "one");
  const std::vector<RankRun> two = Train(Config(20, 16), 2, "two");
  ASSERT_TRUE(one[0].outcome.ok()) << one[0].outcome.status();
  for (const RankRun& r : two) {
    ASSERT_TRUE(r.outcome.ok()) << r.outcome.status();
    EXPECT_EQ(*r.outcome, Trainer::Outcome::kFinished);
    EXPECT_EQ(r.step, 20);
  }
  // The ranks hold bitwise the same weights and moments.
  ExpectBitwiseEqual(two[0].state, two[1].state);
  // fp32 rounding only: the weights are O(0.05) and AdamW steps of 3e-3;
  // a slice of the batch summed apart moves them by far less than a step.
  EXPECT_LT(MaxWeightDifference(one[0].state, two[0].state), 1e-6);
  // And training did move them by much more than that.
  const std::vector<RankRun> other = Train(Config(21, 32), 1, "other");
  EXPECT_GT(MaxWeightDifference(one[0].state, other[0].state), 1e-3);

  // Rank 0 alone reports, with the figures of the whole global batch.
  EXPECT_TRUE(two[1].sink.events.empty());
  const auto p1 = one[0].sink.Of<TrainProgressEvent>();
  const auto p2 = two[0].sink.Of<TrainProgressEvent>();
  ASSERT_EQ(p1.size(), p2.size());
  EXPECT_NEAR(p1.back().loss, p2.back().loss, 1e-4);
  const auto f1 = one[0].sink.Of<TrainFinishedEvent>();
  const auto f2 = two[0].sink.Of<TrainFinishedEvent>();
  ASSERT_EQ(f1.size(), 1u);
  ASSERT_EQ(f2.size(), 1u);
  EXPECT_NEAR(f1[0].eval_accuracy, f2[0].eval_accuracy, 0.02);
}

// Rank 0 alone evaluates, so it decides; the other ranks learn it after
// each evaluation and every rank stops after the same step, as one rank of
// the whole batch does (a min_delta nothing beats: the best at 10, then 20
// and 30 without improvement, stop at 30 of 60).
TEST_F(DataParallelTest, EarlyStoppingStopsEveryRankAtTheSameStep) {
  TrainerConfig one_config = Config(60, 32);
  TrainerConfig two_config = Config(60, 16);
  for (TrainerConfig* c : {&one_config, &two_config}) {
    c->early_stop_patience = 2;
    c->early_stop_min_delta = 100;
  }
  const std::vector<RankRun> one = Train(one_config, 1, "one");
  const std::vector<RankRun> two = Train(two_config, 2, "two");
  ASSERT_TRUE(one[0].outcome.ok()) << one[0].outcome.status();
  EXPECT_EQ(one[0].step, 30);
  for (const RankRun& r : two) {
    ASSERT_TRUE(r.outcome.ok()) << r.outcome.status();
    EXPECT_EQ(*r.outcome, Trainer::Outcome::kFinished);
    EXPECT_EQ(r.step, 30);
  }
  ExpectBitwiseEqual(two[0].state, two[1].state);
  EXPECT_LT(MaxWeightDifference(one[0].state, two[0].state), 1e-6);
  const auto finished = two[0].sink.Of<TrainFinishedEvent>();
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_NE(finished[0].stopped_early.find("for 2 evaluations"),
            std::string::npos)
      << finished[0].stopped_early;
}

TEST_F(DataParallelTest, ThreeRanksWithAccumulationMatchOneRank) {
  const std::vector<RankRun> one = Train(Config(8, 24, 2), 1, "one");
  const std::vector<RankRun> three = Train(Config(8, 8, 2), 3, "three");
  for (const RankRun& r : three) ASSERT_TRUE(r.outcome.ok());
  ExpectBitwiseEqual(three[0].state, three[2].state);
  EXPECT_LT(MaxWeightDifference(one[0].state, three[0].state), 1e-6);
}

TEST_F(DataParallelTest, AStopAskedByOneRankStopsAllAndTheyResumeExactly) {
  const std::vector<RankRun> straight = Train(Config(20, 16), 2, "straight");
  std::vector<RankRun> first = Train(Config(20, 16), 2, "resumed", 6);
  for (const RankRun& r : first) {
    ASSERT_TRUE(r.outcome.ok()) << r.outcome.status();
    EXPECT_EQ(*r.outcome, Trainer::Outcome::kInterrupted);
  }
  // Both stopped after the same step, shortly after rank 1 asked.
  EXPECT_EQ(first[0].step, first[1].step);
  EXPECT_GE(first[0].step, 6);
  EXPECT_LT(first[0].step, 20);
  const auto interrupted = first[0].sink.Of<TrainInterruptedEvent>();
  ASSERT_EQ(interrupted.size(), 1u);
  EXPECT_FALSE(interrupted[0].checkpoint_path.empty());

  std::vector<RankRun> second = Train(Config(20, 16), 2, "resumed");
  for (const RankRun& r : second) {
    ASSERT_TRUE(r.outcome.ok()) << r.outcome.status();
    EXPECT_EQ(*r.outcome, Trainer::Outcome::kFinished);
  }
  const auto started = second[0].sink.Of<TrainStartedEvent>();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].start_step, first[0].step);
  ExpectBitwiseEqual(straight[0].state, second[0].state);
  ExpectBitwiseEqual(straight[1].state, second[1].state);
}

// The model is 784x32 + 32 + 32x10 + 10 = 25450 floats.
TEST_F(DataParallelTest, BucketedSumsDuringBackwardEqualOneSumAfterIt) {
  for (int world : {2, 3}) {
    SCOPED_TRACE(world);
    TrainerConfig one_sum = Config(6, 8, 2);
    one_sum.allreduce_bucket_bytes = 0;
    const std::vector<RankRun> reference =
        Train(one_sum, world, absl::StrCat("one_sum", world));
    // Smaller than every tensor; exactly the last bias (10 floats); not a
    // divisor of anything; the whole model exactly; the default.
    for (int64_t bytes : {int64_t{12}, int64_t{40}, int64_t{4000},
                          int64_t{25450 * 4}, int64_t{25} << 20}) {
      SCOPED_TRACE(bytes);
      TrainerConfig config = one_sum;
      config.allreduce_bucket_bytes = bytes;
      const std::vector<RankRun> runs =
          Train(config, world, absl::StrCat("bucket", world, "_", bytes));
      for (int r = 0; r < world; ++r) {
        ASSERT_TRUE(runs[r].outcome.ok()) << runs[r].outcome.status();
        ExpectBitwiseEqual(reference[r].state, runs[r].state);
      }
      const auto want = reference[0].sink.Of<TrainProgressEvent>();
      const auto got = runs[0].sink.Of<TrainProgressEvent>();
      ASSERT_EQ(want.size(), got.size());
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(want[i].loss, got[i].loss);
        EXPECT_EQ(want[i].grad_norm, got[i].grad_norm);
      }
    }
  }
}

TEST_F(DataParallelTest, ARankDyingMidStepFailsTheOthersAtOnce) {
  // Only the closed sockets can end the step: a hang would outlast the
  // test's own timeout.
  io_timeout_ = absl::Minutes(10);
  for (int world : {2, 3}) {
    SCOPED_TRACE(world);
    TrainerConfig config = Config(20, 8, 2);
    // 25 buckets and the figures per step: rank 1 dies in step 2's backward.
    config.allreduce_bucket_bytes = 4096;
    const std::vector<RankRun> runs =
        Train(config, world, absl::StrCat("dies", world), 0, 26 + 10);
    ASSERT_FALSE(runs[0].outcome.ok());
    EXPECT_EQ(runs[0].outcome.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(runs[0].outcome.status().message(),
                HasSubstr("rank 1 closed its connection"));
    EXPECT_THAT(runs[0].outcome.status().message(),
                HasSubstr("step 2: summing gradients"));
    EXPECT_EQ(runs[0].step, 1);
    EXPECT_FALSE(runs[1].outcome.ok());
    if (world == 3) {
      // Rank 2 waited on rank 0, which gave up and closed.
      ASSERT_FALSE(runs[2].outcome.ok());
      EXPECT_THAT(runs[2].outcome.status().message(),
                  HasSubstr("rank 0 closed its connection"));
    }
  }
}

}  // namespace
}  // namespace trainyard::engine
