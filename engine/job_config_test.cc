// JobSpec -> engine configs, event conversion, and TrainJob assembly.
#include "engine/job_config.h"

#include <google/protobuf/util/json_util.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "common/test_dir.h"
#include "engine/event_proto.h"
#include "engine/train_job.h"
#include "gtest/gtest.h"
#include "spec/spec.h"

namespace trainyard::engine {
namespace {

using ::trainyard::v1::JobSpec;

const std::string kRoot = YARD_SOURCE_DIR;

JobSpec Example() {
  absl::StatusOr<JobSpec> spec =
      spec::ReadJobSpecFile(kRoot + "/examples/mnist-mlp.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec::WithDefaults(*spec);
}

JobConfigOptions Options() {
  JobConfigOptions o;
  o.data_root = kRoot;
  return o;
}

TEST(JobConfigTest, TheExampleSpecIsValidAndConverts) {
  const JobSpec spec = Example();
  spec::ValidationOptions v;
  v.data_root = kRoot;
  ASSERT_TRUE(spec::ValidateJobSpec(spec, v).ok())
      << spec::ValidateJobSpec(spec, v);
  absl::StatusOr<EngineJob> job = EngineJobFromSpec(spec, Options());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->mlp.input_dim, 784);
  EXPECT_EQ(job->mlp.hidden, (std::vector<int64_t>{512, 256}));
  EXPECT_EQ(job->mlp.num_classes, 10);
  EXPECT_EQ(job->mnist.holdout, 2000);
  EXPECT_TRUE(absl::EndsWith(job->mnist.images, "t10k-images-idx3-ubyte.gz"));
  EXPECT_TRUE(std::filesystem::exists(job->mnist.images));
  EXPECT_EQ(job->trainer.total_steps, spec.steps());
  EXPECT_EQ(job->trainer.micro_batch, 128);
  EXPECT_EQ(job->trainer.grad_accum, 1);
  EXPECT_DOUBLE_EQ(job->trainer.lr, 0.002);
  EXPECT_EQ(job->trainer.checkpoint.keep_last, 3);
  EXPECT_EQ(job->trainer.checkpoint.dir, "checkpoints/mnist-mlp");
  EXPECT_EQ(job->trainer.seed, 1u);
  EXPECT_EQ(job->threads, 2);
  EXPECT_EQ(job->trainer.fingerprint.size(), 16u);
}

TEST(JobConfigTest, FlagsOverrideTheSpec) {
  JobConfigOptions o = Options();
  o.threads = 5;
  o.checkpoint_dir = "/tmp/elsewhere";
  absl::StatusOr<EngineJob> job = EngineJobFromSpec(Example(), o);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->threads, 5);
  EXPECT_EQ(job->trainer.checkpoint.dir, "/tmp/elsewhere");
}

TEST(JobConfigTest, ModelAndDataMustGoTogether) {
  JobSpec spec = Example();
  spec.mutable_model()->mutable_gpt()->set_n_layer(2);
  EXPECT_EQ(EngineJobFromSpec(spec, Options()).status().message(),
            "data: a GPT model trains on text or token data (data.text or "
            "data.tokens)");
  spec = Example();
  spec.mutable_data()->mutable_text()->set_train("a.txt");
  EXPECT_EQ(EngineJobFromSpec(spec, Options()).status().message(),
            "data: an MLP model trains on MNIST data (data.mnist)");
}

TEST(JobConfigTest, GptOnTextConverts) {
  absl::StatusOr<JobSpec> spec =
      spec::ReadJobSpecFile(kRoot + "/examples/shakespeare-char.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec::ValidationOptions v;
  v.data_root = kRoot;
  EXPECT_TRUE(spec::ValidateJobSpec(spec::WithDefaults(*spec), v).ok());
  absl::StatusOr<EngineJob> job =
      EngineJobFromSpec(spec::WithDefaults(*spec), Options());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(job->is_gpt);
  ASSERT_TRUE(job->text.has_value());
  EXPECT_TRUE(job->text->char_tokenizer);
  EXPECT_TRUE(absl::EndsWith(job->text->train, "tinyshakespeare/input.txt"));
  EXPECT_TRUE(job->text->eval.empty());
  EXPECT_EQ(job->gpt.vocab_size, 65);
  EXPECT_EQ(
      GptConfigFromDescription(job->trainer.model_description)->vocab_size, 65);
}

TEST(JobConfigTest, EstimatesASpecsMemory) {
  const JobSpec spec = Example();  // 535,818 parameters, micro-batch 128
  const MemoryEstimate e = EstimateSpecMemory(spec, DeviceKind::kCpu);
  EXPECT_EQ(e.weights, 4 * 535'818);
  EXPECT_EQ(e.optimizer, 8 * 535'818);
  EXPECT_GT(e.activations, 0);
  EXPECT_EQ(e.overhead, kCpuOverheadBytes);
  absl::StatusOr<JobSpec> gpt =
      spec::ReadJobSpecFile(kRoot + "/examples/shakespeare-char.yaml");
  ASSERT_TRUE(gpt.ok());
  const MemoryEstimate g =
      EstimateSpecMemory(spec::WithDefaults(*gpt), DeviceKind::kCuda);
  EXPECT_EQ(g.weights, 4 * spec::CountParameters(*gpt));
  EXPECT_EQ(g.overhead, kCudaOverheadBytes);
}

#ifndef YARD_CUDA
TEST(JobConfigTest, RefusesGpusWithoutCuda) {
  JobSpec spec = Example();
  spec.mutable_resources()->set_gpus(1);
  absl::StatusOr<EngineJob> job = EngineJobFromSpec(spec, Options());
  ASSERT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(job.status().message(), "resources.gpus: "))
      << job.status();
  EXPECT_TRUE(absl::StrContains(job.status().message(), "not supported"));
}
#endif

TEST(JobConfigTest, Bf16PrecisionPicksBf16Activations) {
  JobSpec spec = Example();
  absl::StatusOr<EngineJob> fp32 = EngineJobFromSpec(spec, Options());
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  EXPECT_EQ(fp32->activation_dtype, DType::kF32);
  spec.set_precision(trainyard::v1::BF16);
  absl::StatusOr<EngineJob> bf16 = EngineJobFromSpec(spec, Options());
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(bf16->activation_dtype, DType::kBF16);
  // The fingerprint covers precision: a bf16 run never resumes an fp32 one.
  EXPECT_NE(bf16->trainer.fingerprint, fp32->trainer.fingerprint);

  // bf16 adds a 2-byte working copy per weight and halves the activations
  // stored in the activation dtype (MLP: all but targets, probabilities
  // and losses).
  const MemoryEstimate f = EstimateSpecMemory(Example(), DeviceKind::kCpu);
  const MemoryEstimate h = EstimateSpecMemory(spec, DeviceKind::kCpu);
  EXPECT_EQ(h.weights, 6 * 535'818);
  EXPECT_EQ(h.gradients, f.gradients);
  EXPECT_EQ(h.optimizer, f.optimizer);
  EXPECT_LT(h.activations, f.activations);
  EXPECT_GT(2 * h.activations, f.activations);
}

TEST(JobConfigTest, PathsMustStayInsideTheDataRoot) {
  JobSpec spec = Example();
  spec.mutable_data()->mutable_mnist()->set_images("../outside.gz");
  absl::StatusOr<EngineJob> job = EngineJobFromSpec(spec, Options());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(job.status().message(), "data.mnist.images"));
}

TEST(JobConfigTest, InitFromIsAModelFolderInsideTheDataRoot) {
  namespace fs = std::filesystem;
  TestDir tmp;
  const fs::path base = tmp.path();
  fs::create_directories(base / "root" / "hf");
  for (const char* f : {"root/text.txt", "root/hf/config.json",
                        "root/hf/model.safetensors", "secret"}) {
    std::ofstream(base / f) << "x";
  }
  absl::StatusOr<JobSpec> spec = spec::ParseJobSpec(
      "model: {gpt: {n_layer: 1, n_head: 1, d_model: 8, seq_len: 8, "
      "vocab_size: 256, init_from: hf}}\n"
      "data: {text: {train: text.txt}}\nbatch: {micro_batch: 2}\nsteps: 1\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  JobConfigOptions options;
  options.data_root = (base / "root").string();
  absl::StatusOr<EngineJob> job =
      EngineJobFromSpec(spec::WithDefaults(*spec), options);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->gpt_init_from, fs::canonical(base / "root" / "hf").string());
  fs::remove(base / "root" / "hf" / "config.json");
  fs::create_symlink(base / "secret", base / "root" / "hf" / "config.json");
  job = EngineJobFromSpec(spec::WithDefaults(*spec), options);
  EXPECT_EQ(job.status().message(),
            "model.gpt.init_from: path escapes the data root");
}

TEST(JobConfigTest, FingerprintCoversWhatShapesTheWeightsOnly) {
  const JobSpec base = Example();
  const std::string fp = SpecFingerprint(base);
  EXPECT_EQ(fp, SpecFingerprint(base));
  auto changed = [&](const std::function<void(JobSpec*)>& edit) {
    JobSpec s = base;
    edit(&s);
    return SpecFingerprint(s) != fp;
  };
  EXPECT_TRUE(changed([](JobSpec* s) { s->set_seed(2); }));
  EXPECT_TRUE(changed([](JobSpec* s) { s->mutable_optimizer()->set_lr(0.1); }));
  EXPECT_TRUE(changed([](JobSpec* s) { s->set_steps(5); }));
  EXPECT_TRUE(changed(
      [](JobSpec* s) { s->mutable_model()->mutable_mlp()->add_hidden(8); }));
  EXPECT_TRUE(
      changed([](JobSpec* s) { s->mutable_batch()->set_grad_accum(2); }));
  EXPECT_FALSE(changed([](JobSpec* s) { s->set_name("other"); }));
  EXPECT_FALSE(
      changed([](JobSpec* s) { s->mutable_resources()->set_cpu_threads(7); }));
  EXPECT_FALSE(
      changed([](JobSpec* s) { s->mutable_checkpoint()->set_every_steps(1); }));
  EXPECT_FALSE(changed([](JobSpec* s) { s->set_log_every_steps(3); }));
  EXPECT_FALSE(
      changed([](JobSpec* s) { s->mutable_eval()->set_every_steps(3); }));
}

TEST(JobConfigTest, DefaultCheckpointDirIsASafeName) {
  JobSpec s;
  EXPECT_EQ(DefaultCheckpointDir(s), "checkpoints/run");
  s.set_name("../../etc");
  EXPECT_EQ(DefaultCheckpointDir(s), "checkpoints/.._.._etc");
  s.set_name("..");
  EXPECT_EQ(DefaultCheckpointDir(s), "checkpoints/run");
  s.set_name("my run/1");
  EXPECT_EQ(DefaultCheckpointDir(s), "checkpoints/my_run_1");
}

TEST(EventProtoTest, ConvertsEveryEvent) {
  TrainFinishedEvent f;
  f.step = 1000;
  f.eval_accuracy = 0.97;
  f.checkpoint_path = "ck/step-00001000";
  const std::string json = ToJsonLine(ToProto(f));
  EXPECT_EQ(json.find('\n'), std::string::npos);
  trainyard::v1::TrainerEvent back;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &back).ok());
  EXPECT_EQ(back.finished().step(), 1000);
  EXPECT_DOUBLE_EQ(back.finished().eval_accuracy(), 0.97);
  EXPECT_EQ(back.finished().checkpoint_path(), "ck/step-00001000");

  EXPECT_TRUE(ToProto(TrainStartedEvent{3, 10, 5, "x", "cpu"}).has_started());
  EXPECT_TRUE(ToProto(TrainProgressEvent{}).has_progress());
  EXPECT_TRUE(ToProto(EvalResultEvent{}).has_eval());
  EXPECT_TRUE(ToProto(CheckpointSavedEvent{}).has_checkpoint());
  EXPECT_TRUE(ToProto(TrainInterruptedEvent{7, "p"}).has_interrupted());
  EXPECT_TRUE(absl::StrContains(ToTextLine(f), "train loss"));
  // Eval figures only from a run that evaluated (a loss above 0); a 0%
  // accuracy of one that did is shown.
  EXPECT_FALSE(absl::StrContains(ToTextLine(f), "eval")) << ToTextLine(f);
  f.eval_loss = 0.1;
  EXPECT_TRUE(absl::StrContains(ToTextLine(f), "accuracy 97.00%"));
  f.eval_accuracy = 0;
  EXPECT_TRUE(absl::StrContains(ToTextLine(f), "eval accuracy 0.00%"));
  // checkpoint.keep_best: the text names the best checkpoint, as JSON does.
  EXPECT_FALSE(absl::StrContains(ToTextLine(f), "best")) << ToTextLine(f);
  f.best_checkpoint_path = "ck/step-00000400";
  f.best_step = 400;
  f.best_eval_loss = 0.1271;
  EXPECT_TRUE(
      absl::EndsWith(ToTextLine(f),
                     "; best checkpoint ck/step-00000400 (step 400, eval "
                     "loss 0.1271)"))
      << ToTextLine(f);
}

// TrainJob assembly: the spec must fit the data.
class TrainJobTest : public ::testing::Test {
 protected:
  EngineJob Job() {
    EngineJob job = *EngineJobFromSpec(Example(), Options());
    job.mlp.hidden = {16};
    job.trainer.total_steps = 60;
    job.trainer.warmup_steps = 0;
    job.trainer.micro_batch = 32;
    job.trainer.eval_every_steps = 0;
    job.trainer.checkpoint.every_steps = 0;
    job.trainer.checkpoint.dir = tmp_.File("checkpoints");
    return job;
  }
  struct NullSink : TrainerEventSink {
    void Emit(const TrainerEvent& e) override { events.push_back(e); }
    std::vector<TrainerEvent> events;
  } sink_;
  TestDir tmp_;
};

TEST_F(TrainJobTest, RunsASmallJob) {
  absl::StatusOr<std::unique_ptr<TrainJob>> job =
      TrainJob::Create(Job(), &sink_);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(*(*job)->Run(nullptr), Trainer::Outcome::kFinished);
  const auto* finished = std::get_if<TrainFinishedEvent>(&sink_.events.back());
  ASSERT_NE(finished, nullptr);
  EXPECT_GT(finished->eval_accuracy, 0.7);
}

TEST_F(TrainJobTest, SpecThatDoesNotFitTheDataIsInvalidArgument) {
  EngineJob job = Job();
  job.mlp.input_dim = 100;
  absl::StatusOr<std::unique_ptr<TrainJob>> t = TrainJob::Create(job, &sink_);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(t.status().message(), "model.mlp.input_dim: "));
  job = Job();
  job.mnist.holdout = 10000;
  t = TrainJob::Create(job, &sink_);
  EXPECT_TRUE(absl::StartsWith(t.status().message(), "data.mnist.holdout: "))
      << t.status();
}

TEST_F(TrainJobTest, GpuJobsNeedOneRankPerGpu) {
  EngineJob job = Job();
  job.gpus = 2;  // but no ranks: this process alone
  absl::StatusOr<std::unique_ptr<TrainJob>> t = TrainJob::Create(job, &sink_);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(
      t.status().message(),
      "resources.gpus: 2 GPUs run as 2 ranks, one per GPU (yard-train "
      "--world-size 2), but this process is one of 1 ranks"))
      << t.status();
}

// A data file that will not parse would fail again: INVALID_ARGUMENT (never
// restarted) naming the field; one that cannot be read may pass later.
TEST_F(TrainJobTest, DataFilesThatWillNotParseAreInvalidNamingTheField) {
  const std::string bad = ::testing::TempDir() + "train_job_test_garbage.gz";
  std::ofstream(bad) << "this is not gzip or idx";
  EngineJob job = Job();
  job.mnist.images = bad;
  absl::StatusOr<std::unique_ptr<TrainJob>> t = TrainJob::Create(job, &sink_);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      absl::StartsWith(t.status().message(), "data.mnist.images: " + bad))
      << t.status();
  job = Job();
  job.mnist.labels = bad;
  t = TrainJob::Create(job, &sink_);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      absl::StartsWith(t.status().message(), "data.mnist.labels: " + bad))
      << t.status();
  job = Job();
  job.mnist.images = ::testing::TempDir() + "train_job_test_gone.gz";
  t = TrainJob::Create(job, &sink_);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound) << t.status();
  EXPECT_TRUE(absl::StartsWith(t.status().message(), "data.mnist.images: "))
      << t.status();
}

}  // namespace
}  // namespace trainyard::engine
