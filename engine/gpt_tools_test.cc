// Export, import and sampling of trained GPTs: a checkpoint exported as a
// Hugging Face GPT-2 folder reads back bitwise equal (with Conv1D weights
// stored transposed under transformers' names), a job with init_from starts
// from exactly those weights, sampling is reproducible for a seed, and bad
// folders are refused with errors naming the file.
#include "engine/gpt_tools.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>

#include "absl/strings/match.h"
#include "common/test_dir.h"
#include "engine/core/checkpoint.h"
#include "engine/core/file_io.h"
#include "engine/core/gpt_sampler.h"
#include "engine/core/safetensors.h"
#include "engine/job_config.h"
#include "engine/train_job.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

struct NullSink : TrainerEventSink {
  void Emit(const TrainerEvent&) override {}
};

class GptToolsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string text;
    for (int i = 0; i < 60; ++i) text += "to be or not to be, that is it\n";
    std::ofstream(dir_ + "/text.txt") << text;
  }

  EngineJob Job(const std::string& name) {
    EngineJob job;
    job.is_gpt = true;
    job.gpt = {2, 2, 16, 8, 16};
    job.text = TextFiles{dir_ + "/text.txt", "", true};
    job.trainer.total_steps = 3;
    job.trainer.micro_batch = 2;
    job.trainer.lr = 1e-2;
    job.trainer.checkpoint.dir = dir_ + "/" + name;
    job.trainer.model_description = GptDescription(job.gpt);
    return job;
  }

  // The job's model's weights by name.
  static std::map<std::string, std::vector<float>> WeightsOf(TrainJob& job) {
    std::map<std::string, std::vector<float>> out;
    for (const Parameter& p : job.model().parameters()) {
      out[p.name] = std::vector<float>(p.value, p.value + p.size());
    }
    return out;
  }

  // Trains `name` and returns its final weights by name.
  std::map<std::string, std::vector<float>> Train(const std::string& name) {
    auto job = *TrainJob::Create(Job(name), &sink_);
    EXPECT_EQ(*job->Run(nullptr), Trainer::Outcome::kFinished);
    return WeightsOf(*job);
  }

  TestDir tmp_;
  const std::string dir_ = tmp_.path();
  NullSink sink_;
};

TEST_F(GptToolsTest, ExportReadsBackBitwiseWithHuggingFaceLayout) {
  const auto weights = Train("run");
  const std::string out = dir_ + "/hf";
  ASSERT_TRUE(ExportGptCheckpoint(dir_ + "/run", out).ok());
  for (const char* f : {kHfConfigFile, kHfWeightsFile, kHfTokenizerFile}) {
    EXPECT_TRUE(std::filesystem::exists(out + "/" + f)) << f;
  }
  // transformers' names and Conv1D layout, checked on the raw file.
  const std::string bytes = *ReadWholeFile(out + "/" + kHfWeightsFile, 1 << 24);
  EXPECT_TRUE(absl::StrContains(bytes.substr(0, 200), "\"format\":\"pt\""));
  const auto raw = *ParseSafetensors(bytes, "hf");
  const HostTensor* c_attn = nullptr;
  for (const HostTensor& t : raw) {
    if (t.name == "transformer.h.1.attn.c_attn.weight") c_attn = &t;
  }
  ASSERT_NE(c_attn, nullptr);
  EXPECT_EQ(c_attn->shape, (Shape{16, 48}));  // [in, out]
  const std::vector<float>& ours = weights.at("h.1.attn.c_attn.weight");
  EXPECT_EQ(c_attn->data[1 * 48 + 5], ours[5 * 16 + 1]);  // [o=5, i=1]

  absl::StatusOr<HfGpt2> back = ReadHfGpt2(out);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->config.n_layer, 2);
  EXPECT_EQ(back->config.vocab_size, 16);
  ASSERT_EQ(back->params.size(), weights.size());
  for (const HostTensor& t : back->params) {
    EXPECT_EQ(t.data, weights.at(t.name)) << t.name;
  }
  EXPECT_TRUE(Tokenizer::FromJson(back->tokenizer).ok());
  // The folder is written new, never over another model.
  EXPECT_EQ(ExportGptCheckpoint(dir_ + "/run", out).code(),
            absl::StatusCode::kAlreadyExists);
}

TEST_F(GptToolsTest, InitFromStartsTrainingFromTheExportedWeights) {
  const auto weights = Train("run");
  ASSERT_TRUE(ExportGptCheckpoint(dir_ + "/run", dir_ + "/hf").ok());
  EngineJob job = Job("finetune");
  job.gpt_init_from = dir_ + "/hf";
  auto finetune = TrainJob::Create(job, &sink_);
  ASSERT_TRUE(finetune.ok()) << finetune.status();
  EXPECT_EQ(WeightsOf(**finetune), weights);
  ASSERT_EQ(*(*finetune)->Run(nullptr), Trainer::Outcome::kFinished);

  job.gpt.n_layer = 3;
  EXPECT_EQ(std::string(TrainJob::Create(job, &sink_).status().message()),
            "model.gpt.n_layer: 3 differs from the init_from model's 2");
}

// A folder that will not parse (truncated weights, broken JSON, a dtype
// this engine cannot read) would fail again on every try: INVALID_ARGUMENT
// naming the field, as a corrupt data file is (yard-train exit 2, a job not
// restarted).
TEST_F(GptToolsTest, InitFromAFolderThatWillNotParseIsABadSpec) {
  Train("run");
  ASSERT_TRUE(ExportGptCheckpoint(dir_ + "/run", dir_ + "/hf").ok());
  EngineJob job = Job("finetune");
  job.gpt_init_from = dir_ + "/hf";
  const std::string weights = dir_ + "/hf/" + kHfWeightsFile;
  const std::string config = dir_ + "/hf/" + kHfConfigFile;
  std::filesystem::resize_file(weights, 2000);
  absl::Status s = TrainJob::Create(job, &sink_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StartsWith(s.message(), "model.gpt.init_from: " + weights))
      << s;
  std::ofstream(config, std::ios::trunc) << "{";
  s = TrainJob::Create(job, &sink_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StartsWith(s.message(), "model.gpt.init_from: " + config))
      << s;
}

// A CHAR job takes its characters' ids from the model it starts from;
// without them (no tokenizer file, a checkpoint of token shards) it is
// refused rather than trained on a vocabulary rebuilt from its own text.
// A BYTE job needs none: its ids are the bytes.
TEST_F(GptToolsTest, CharJobsNeedTheStartingModelsCharacters) {
  Train("run");
  ASSERT_TRUE(ExportGptCheckpoint(dir_ + "/run", dir_ + "/hf").ok());
  std::filesystem::remove(dir_ + "/hf/" + kHfTokenizerFile);
  EngineJob job = Job("finetune");
  job.gpt_init_from = dir_ + "/hf";
  absl::Status s = TrainJob::Create(job, &sink_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "model.gpt.init_from: " + dir_ +
                             "/hf has no trainyard_tokenizer.json, and "
                             "data.text.tokenizer CHAR needs the model's "
                             "characters from it (yard-train export writes "
                             "it)");

  absl::StatusOr<Checkpoint> shards =
      ReadCheckpoint(dir_ + "/run/step-00000003");
  ASSERT_TRUE(shards.ok()) << shards.status();
  shards->meta.tokenizer = Json();
  job.gpt_init_from.clear();
  job.warm_start = *WriteCheckpoint(dir_ + "/shards", *shards);
  s = TrainJob::Create(job, &sink_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(s.message(), "warm_start: ")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "has no tokenizer")) << s;

  EngineJob bytes = Job("bytes");
  bytes.gpt.vocab_size = 256;
  bytes.text->char_tokenizer = false;
  bytes.trainer.model_description = GptDescription(bytes.gpt);
  ASSERT_EQ(*(*TrainJob::Create(bytes, &sink_))->Run(nullptr),
            Trainer::Outcome::kFinished);
  ASSERT_TRUE(ExportGptCheckpoint(dir_ + "/bytes", dir_ + "/hf-bytes").ok());
  std::filesystem::remove(dir_ + "/hf-bytes/" + kHfTokenizerFile);
  bytes.trainer.checkpoint.dir = dir_ + "/bytes-finetune";
  bytes.gpt_init_from = dir_ + "/hf-bytes";
  absl::StatusOr<std::unique_ptr<TrainJob>> finetune =
      TrainJob::Create(bytes, &sink_);
  ASSERT_TRUE(finetune.ok()) << finetune.status();
  EXPECT_FALSE((*finetune)->tokenizer()->is_char());
}

TEST_F(GptToolsTest, WarmStartTakesACheckpointsWeightsAndVocabulary) {
  const auto weights = Train("run");
  // Other text whose characters are among the first run's: the warm start
  // keeps the checkpoint's vocabulary, so token ids mean what they meant.
  std::string text;
  for (int i = 0; i < 40; ++i) text += "be it or not, to be\n";
  std::ofstream(dir_ + "/other.txt") << text;
  EngineJob job = Job("next");
  job.text->train = dir_ + "/other.txt";
  job.warm_start = dir_ + "/run/step-00000003";
  auto next = TrainJob::Create(job, &sink_);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(WeightsOf(**next), weights);
  ASSERT_TRUE((*next)->tokenizer().has_value());
  const auto first = *TrainJob::Create(Job("again"), &sink_);
  EXPECT_EQ((*next)->tokenizer()->ToJson().Serialize(),
            first->tokenizer()->ToJson().Serialize());
  ASSERT_EQ(*(*next)->Run(nullptr), Trainer::Outcome::kFinished);

  // Refusals name warm_start: other sizes, a character the checkpoint's
  // vocabulary lacks, an MLP's checkpoint.
  job.trainer.checkpoint.dir = dir_ + "/refused";
  job.gpt.n_layer = 3;
  EXPECT_EQ(std::string(TrainJob::Create(job, &sink_).status().message()),
            "model.gpt.n_layer: 3 differs from the warm_start model's 2");
  job.gpt.n_layer = 2;
  std::ofstream(dir_ + "/other.txt") << text << "zebra\n";
  absl::Status s = TrainJob::Create(job, &sink_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(s.message(), "data.text.train: ")) << s;
  std::ofstream(dir_ + "/other.txt") << text;
  job.text->char_tokenizer = false;
  EXPECT_EQ(std::string(TrainJob::Create(job, &sink_).status().message()),
            "data.text.tokenizer: differs from the warm_start model's "
            "tokenizer");
  job.text->char_tokenizer = true;
  Checkpoint mlp;
  mlp.meta.step = 5;
  mlp.meta.rng_state = Rng(1).SerializeState();
  mlp.tensors.push_back({"fc0.weight", {2, 2}, {1, 2, 3, 4}});
  const std::string mlp_path = *WriteCheckpoint(dir_ + "/mlp", mlp);
  job.warm_start = mlp_path;
  EXPECT_EQ(
      std::string(TrainJob::Create(job, &sink_).status().message()),
      "warm_start: " + mlp_path + " holds no GPT, and this job trains a GPT");
}

TEST_F(GptToolsTest, SamplingIsReproducibleForASeed) {
  Train("run");
  absl::StatusOr<LoadedGpt> gpt = LoadGptCheckpoint(dir_ + "/run", 1);
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  ASSERT_TRUE(gpt->tokenizer.has_value());
  const std::vector<int32_t> prompt = *gpt->tokenizer->Encode("to be");
  SampleOptions o{20, 0.8, 5, 3};
  auto a = *SampleTokens(*gpt->model, prompt, o);
  auto b = *SampleTokens(*gpt->model, prompt, o);
  EXPECT_EQ(a.size(), 20u);
  EXPECT_EQ(a, b);
  o.seed = 4;
  EXPECT_NE(a, *SampleTokens(*gpt->model, prompt, o));
  EXPECT_FALSE(SampleTokens(*gpt->model, {}, o).ok());
  EXPECT_FALSE(SampleTokens(*gpt->model, {99}, o).ok());
  // A checkpoint dir of an MLP or nothing at all is refused.
  EXPECT_EQ(LoadGptCheckpoint(dir_ + "/nothing", 1).status().code(),
            absl::StatusCode::kNotFound);
}

// A model whose weights hold a NaN (training that diverged) has no
// next-token distribution: sampling says so instead of printing the same
// token over and over.
TEST_F(GptToolsTest, SamplingFromBrokenWeightsIsAnError) {
  Train("run");
  absl::StatusOr<LoadedGpt> gpt = LoadGptCheckpoint(dir_ + "/run", 1);
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  for (const Parameter& p : gpt->model->parameters()) {
    if (p.name == "wte") p.value[3] = std::numeric_limits<float>::quiet_NaN();
  }
  const std::vector<int32_t> prompt = *gpt->tokenizer->Encode("to be");
  for (double temperature : {0.0, 0.8}) {
    absl::StatusOr<std::vector<int32_t>> out =
        SampleTokens(*gpt->model, prompt, {5, temperature, 0, 1});
    EXPECT_EQ(out.status().code(), absl::StatusCode::kDataLoss) << temperature;
    EXPECT_TRUE(
        absl::StrContains(out.status().message(), "logit for token 0 is nan"))
        << out.status();
  }
}

// The model's vocab_size (16) is above its characters' (13): the ids past
// them decode to no text, and sampling with vocab_limit never draws them.
TEST_F(GptToolsTest, SamplingStaysInsideTheTokenizersVocabulary) {
  Train("run");
  absl::StatusOr<LoadedGpt> gpt = LoadGptCheckpoint(dir_ + "/run", 1);
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  const int64_t chars = gpt->tokenizer->vocab_size();
  ASSERT_LT(chars, gpt->model->config().vocab_size);
  const std::vector<int32_t> prompt = *gpt->tokenizer->Encode("to be");
  SampleOptions o{300, 100.0, 0, 7};  // nearly uniform
  auto past = [&](const std::vector<int32_t>& tokens) {
    return std::count_if(tokens.begin(), tokens.end(),
                         [&](int32_t t) { return t >= chars; });
  };
  EXPECT_GT(past(*SampleTokens(*gpt->model, prompt, o)), 0);
  o.vocab_limit = chars;
  EXPECT_EQ(past(*SampleTokens(*gpt->model, prompt, o)), 0);
  o.vocab_limit = gpt->model->config().vocab_size + 1;
  EXPECT_EQ(SampleTokens(*gpt->model, prompt, o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SampleFromLogitsTest, TemperatureAndTopK) {
  const std::vector<float> logits = {0.f, 3.f, 1.f, 3.f};
  Rng rng(1);
  EXPECT_EQ(SampleFromLogits(logits, 0, 0, rng), 1);  // ties: lower index
  for (int i = 0; i < 200; ++i) {
    const int32_t k2 = SampleFromLogits(logits, 1.0, 2, rng);
    ASSERT_TRUE(k2 == 1 || k2 == 3);
  }
  int counts[4] = {};
  for (int i = 0; i < 4000; ++i)
    ++counts[SampleFromLogits(logits, 1.0, 0, rng)];
  // p = e^{0,3,1,3} / sum: about 0.024, 0.47, 0.064, 0.47.
  EXPECT_NEAR(counts[1] / 4000.0, 0.47, 0.04);
  EXPECT_NEAR(counts[0] / 4000.0, 0.024, 0.015);
}

TEST_F(GptToolsTest, BadFoldersAreRefusedNamingTheFile) {
  Train("run");
  const std::string out = dir_ + "/hf";
  ASSERT_TRUE(ExportGptCheckpoint(dir_ + "/run", out).ok());
  const std::string config = out + "/" + kHfConfigFile;
  const std::string weights = out + "/" + kHfWeightsFile;
  std::string text = *ReadWholeFile(config, 1 << 20);
  std::ofstream(config, std::ios::trunc) << "{\"model_type\": \"llama\"}";
  absl::Status s = ReadHfGpt2(out).status();
  EXPECT_EQ(s.message(), config + ": model_type is not \"gpt2\"");
  std::ofstream(config, std::ios::trunc) << text;
  std::filesystem::resize_file(weights, 1000);
  s = ReadHfGpt2(out).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StartsWith(s.message(), weights)) << s;
  std::filesystem::remove(weights);
  EXPECT_EQ(ReadHfGpt2(out).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace trainyard::engine
