// GPT training jobs end to end, in-process: text and token-shard data,
// the 90/10 holdout, exact resume (a run stopped and resumed ends bitwise
// equal to a straight run), the checkpoint's model and tokenizer metadata,
// and the errors a spec that does not fit its data gets.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/test_dir.h"
#include "engine/core/checkpoint.h"
#include "engine/data/token_data.h"
#include "engine/job_config.h"
#include "engine/train_job.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

struct RecordingSink : TrainerEventSink {
  void Emit(const TrainerEvent& e) override { events.push_back(e); }
  std::vector<TrainerEvent> events;
};

class GptJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A small, learnable text: rhymes over a 20-character alphabet.
    std::string text;
    const char* lines[] = {"the cat sat on the mat\n", "a bat can nap\n",
                           "the rat ate a hat\n", "no cat can bat a rat\n"};
    for (int i = 0; i < 120; ++i) text += lines[(i * 7 + i / 3) % 4];
    text_path_ = Write("rhymes.txt", text);
  }

  std::string Write(const std::string& name, const std::string& contents) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << contents;
    return path;
  }

  EngineJob Job(const std::string& checkpoint_name) {
    EngineJob job;
    job.is_gpt = true;
    job.gpt = {/*n_layer=*/2, /*n_head=*/2, /*d_model=*/16, /*seq_len=*/16,
               /*vocab_size=*/24};
    job.text = TextFiles{text_path_, "", /*char_tokenizer=*/true};
    job.trainer.total_steps = 12;
    job.trainer.micro_batch = 4;
    job.trainer.grad_accum = 2;
    job.trainer.lr = 1e-2;
    job.trainer.warmup_steps = 2;
    job.trainer.optimizer.weight_decay = 0.1;
    job.trainer.log_every_steps = 4;
    job.trainer.eval_every_steps = 6;
    job.trainer.eval_max_batches = 4;
    job.trainer.checkpoint.dir = dir_ + "/" + checkpoint_name;
    job.trainer.checkpoint.every_steps = 0;
    job.trainer.seed = 5;
    job.trainer.fingerprint = "gpt-job-test";
    job.trainer.model_description = GptDescription(job.gpt);
    job.threads = 2;
    return job;
  }

  TestDir tmp_;
  const std::string dir_ = tmp_.path();
  std::string text_path_;
  RecordingSink sink_;
};

std::vector<std::vector<float>> Weights(TrainJob& job) {
  std::vector<std::vector<float>> out;
  for (const HostTensor& t : job.trainer().StateTensors()) {
    out.push_back(t.data);
  }
  return out;
}

TEST_F(GptJobTest, LearnsAndRecordsModelAndTokenizerInCheckpoints) {
  EngineJob spec = Job("run");
  spec.trainer.total_steps = 40;
  absl::StatusOr<std::unique_ptr<TrainJob>> job =
      TrainJob::Create(spec, &sink_);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ((*job)->tokenizer()->vocab_size(), 14);
  ASSERT_EQ(*(*job)->Run(nullptr), Trainer::Outcome::kFinished);
  const auto* finished = std::get_if<TrainFinishedEvent>(&sink_.events.back());
  ASSERT_NE(finished, nullptr);
  EXPECT_LT(finished->eval_loss, 0.75 * std::log(14.0));  // learned something
  const auto* progress = std::get_if<TrainProgressEvent>(&sink_.events[1]);
  ASSERT_NE(progress, nullptr);
  EXPECT_GT(progress->tokens_per_second, 0);
  EXPECT_EQ(progress->step, 4);

  absl::StatusOr<Checkpoint> ckpt = ReadCheckpoint(finished->checkpoint_path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ(GptConfigFromDescription(ckpt->meta.model)->d_model, 16);
  absl::StatusOr<Tokenizer> tok = Tokenizer::FromJson(ckpt->meta.tokenizer);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(tok->Decode(*tok->Encode("the cat")), "the cat");
}

TEST_F(GptJobTest, StoppedAndResumedEndsBitwiseEqualToAStraightRun) {
  auto straight = *TrainJob::Create(Job("straight"), &sink_);
  ASSERT_EQ(*straight->Run(nullptr), Trainer::Outcome::kFinished);
  {
    auto first = *TrainJob::Create(Job("resumed"), &sink_);
    ASSERT_TRUE(first->trainer().Start().ok());
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(first->trainer().Advance().ok());
    ASSERT_TRUE(first->trainer().Interrupt().ok());
  }
  // A new job (as a new process would) picks up the step-5 checkpoint.
  sink_.events.clear();
  auto second = *TrainJob::Create(Job("resumed"), &sink_);
  ASSERT_EQ(*second->Run(nullptr), Trainer::Outcome::kFinished);
  const auto* started = std::get_if<TrainStartedEvent>(&sink_.events[0]);
  ASSERT_NE(started, nullptr);
  EXPECT_EQ(started->start_step, 5);
  EXPECT_TRUE(Weights(*straight) == Weights(*second));
}

TEST_F(GptJobTest, WeightsDoNotDependOnTheThreadCount) {
  EngineJob one = Job("one"), three = Job("three");
  one.threads = 1;
  three.threads = 3;
  auto a = *TrainJob::Create(one, &sink_);
  auto b = *TrainJob::Create(three, &sink_);
  ASSERT_EQ(*a->Run(nullptr), Trainer::Outcome::kFinished);
  ASSERT_EQ(*b->Run(nullptr), Trainer::Outcome::kFinished);
  EXPECT_TRUE(Weights(*a) == Weights(*b));
}

TEST_F(GptJobTest, TrainsOnTokenShardsWithAHoldout) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < 3000; ++i) tokens.push_back((i * i + i / 7) % 50);
  const std::string shard = dir_ + "/train.bin";
  ASSERT_TRUE(WriteTokenShard(shard, tokens).ok());
  EngineJob job = Job("shards");
  job.text.reset();
  job.tokens = TokenFiles{{shard, shard}, {}};
  job.gpt.vocab_size = 50;
  job.trainer.total_steps = 3;
  auto t = TrainJob::Create(job, &sink_);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE((*t)->tokenizer().has_value());
  ASSERT_EQ(*(*t)->Run(nullptr), Trainer::Outcome::kFinished);
  const auto* eval =
      std::get_if<EvalResultEvent>(&sink_.events[sink_.events.size() - 3]);
  ASSERT_NE(eval, nullptr);
  // 10% of 6,000 tokens held out: 600 tokens, 37 windows of 16, 4 batches
  // of 4 evaluated (eval_max_batches).
  EXPECT_EQ(eval->examples, 4 * 4 * 16);

  job.gpt.vocab_size = 40;  // the shards hold tokens up to 49
  EXPECT_EQ(std::string(TrainJob::Create(job, &sink_).status().message()),
            "model.gpt.vocab_size: the token shards hold token 45, outside "
            "the vocabulary of 40");
  std::ofstream(shard, std::ios::binary | std::ios::app) << "x";
  job.gpt.vocab_size = 50;
  absl::Status s = TrainJob::Create(job, &sink_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(s.message(), "data.tokens.train: " + shard))
      << s;
}

TEST_F(GptJobTest, SpecsThatDoNotFitTheTextAreInvalidArgument) {
  EngineJob job = Job("bad");
  job.gpt.vocab_size = 10;
  EXPECT_EQ(TrainJob::Create(job, &sink_).status().message(),
            "model.gpt.vocab_size: 10 is smaller than the 14 distinct "
            "characters of data.text.train");
  job = Job("bad");
  job.text->char_tokenizer = false;  // bytes need 256
  EXPECT_EQ(TrainJob::Create(job, &sink_).status().code(),
            absl::StatusCode::kInvalidArgument);
  job = Job("bad");
  job.text->train = Write("short.txt", "too short");
  EXPECT_EQ(TrainJob::Create(job, &sink_).status().message(),
            "data.text.train: 9 training tokens are fewer than "
            "model.gpt.seq_len + 1 (17)");
  // Early stopping and keep_best need evaluations: a held-out 10% shorter
  // than one window is said at once, naming the field.
  job = Job("bad");
  job.text->train = Write("hundred.txt", std::string(100, 'a'));
  job.trainer.early_stop_patience = 2;
  EXPECT_EQ(TrainJob::Create(job, &sink_).status().message(),
            "eval.patience: no evaluation set: the held-out last 10% of "
            "data.text.train is shorter than one window of 17 tokens "
            "(model.gpt.seq_len + 1)");
  job.trainer.early_stop_patience = 0;
  job.trainer.checkpoint.keep_best = true;
  EXPECT_TRUE(absl::StartsWith(TrainJob::Create(job, &sink_).status().message(),
                               "checkpoint.keep_best: no evaluation set"));
  // An evaluation file given but shorter than one window is refused by
  // name, not trained past without evaluations.
  job = Job("bad");
  job.text->eval = Write("short-eval.txt", "the cat");
  EXPECT_EQ(TrainJob::Create(job, &sink_).status().message(),
            "data.text.eval: shorter than one window of 17 tokens "
            "(model.gpt.seq_len + 1)");
  job = Job("bad");
  job.text->eval = Write("eval.txt", "the zebra");
  EXPECT_EQ(TrainJob::Create(job, &sink_).status().message(),
            "data.text.eval: character U+007A at byte offset 4 is not in the "
            "vocabulary (the vocabulary is the characters of data.text.train)");
  job = Job("bad");
  job.text->train = Write("binary.txt", std::string("ab\xff", 3));
  // A file that will not parse fails as the spec would: never restarted.
  EXPECT_EQ(TrainJob::Create(job, &sink_).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace trainyard::engine
