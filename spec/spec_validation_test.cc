// Tests for ValidateJobSpec and ResolveDataPath against a temporary data root.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/test_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/spec.h"

namespace trainyard::spec {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using ::trainyard::v1::JobSpec;

constexpr char kGood[] = R"(
name: mnist-mlp
model: {mlp: {hidden: [256, 128]}}
data:
  mnist:
    images: mnist/images.gz
    labels: mnist/labels.gz
    holdout: 2000
optimizer: {lr: 1e-3, weight_decay: 0.01, warmup_steps: 50}
batch: {micro_batch: 64}
steps: 1500
eval: {every_steps: 500}
checkpoint: {every_steps: 500}
)";

class ValidationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::mkdir(root_.c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((root_ + "/mnist").c_str(), 0755), 0);
    Touch(root_ + "/mnist/images.gz");
    Touch(root_ + "/mnist/labels.gz");
    Touch(base_ + "/secret.gz");
    options_.data_root = root_;
  }
  static void Touch(const std::string& path) { std::ofstream(path) << "x"; }

  JobSpec Good() {
    absl::StatusOr<JobSpec> spec = ParseJobSpec(kGood);
    EXPECT_TRUE(spec.ok()) << spec.status();
    return *spec;
  }
  // The INVALID_ARGUMENT message for `spec`.
  std::string ErrorOf(const JobSpec& spec) {
    absl::Status s = ValidateJobSpec(spec, options_);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    return std::string(s.message());
  }

  TestDir tmp_;
  const std::string base_ = tmp_.path();
  const std::string root_ = base_ + "/root";
  ValidationOptions options_;
};

TEST_F(ValidationTest, GoodSpecPasses) {
  EXPECT_TRUE(ValidateJobSpec(Good(), options_).ok());
  EXPECT_TRUE(ValidateJobSpec(WithDefaults(Good()), options_).ok());
}

TEST_F(ValidationTest, EarlyStoppingNeedsPeriodicEvaluationsOfAnEvalSet) {
  JobSpec spec = Good();  // evaluates every 500 steps on a holdout
  spec.mutable_eval()->set_patience(3);
  spec.mutable_eval()->set_min_delta(0.001);
  EXPECT_TRUE(ValidateJobSpec(spec, options_).ok());
  spec.mutable_eval()->set_every_steps(0);
  EXPECT_EQ(ErrorOf(spec),
            "eval.patience: needs periodic evaluations (eval.every_steps > 0)");
  spec = Good();
  spec.mutable_eval()->set_patience(3);
  spec.mutable_data()->mutable_mnist()->set_holdout(0);
  EXPECT_THAT(ErrorOf(spec), StartsWith("eval.patience: needs an evaluation "
                                        "set (data.mnist.holdout"));
  spec = Good();
  spec.mutable_eval()->set_patience(1001);
  EXPECT_EQ(ErrorOf(spec), "eval.patience: must be in [0, 1000], got 1001");
  spec = Good();
  spec.mutable_eval()->set_patience(2);
  spec.mutable_eval()->set_min_delta(-0.1);
  EXPECT_EQ(ErrorOf(spec), "eval.min_delta: must be a finite number >= 0");
  spec = Good();
  spec.mutable_eval()->set_min_delta(0.1);  // without patience: a mistake
  EXPECT_EQ(ErrorOf(spec), "eval.min_delta: needs eval.patience");
  spec = Good();
  spec.mutable_checkpoint()->set_keep_best(true);
  EXPECT_TRUE(ValidateJobSpec(spec, options_).ok());
  spec.mutable_eval()->set_every_steps(0);
  EXPECT_EQ(ErrorOf(spec),
            "checkpoint.keep_best: needs periodic evaluations "
            "(eval.every_steps > 0)");
}

TEST_F(ValidationTest, MissingRequiredSections) {
  JobSpec spec = Good();
  spec.clear_model();
  EXPECT_EQ(ErrorOf(spec), "model: required (mlp or gpt)");
  spec = Good();
  spec.clear_data();
  EXPECT_EQ(ErrorOf(spec), "data: required (mnist, text or tokens)");
  spec = Good();
  spec.clear_steps();
  EXPECT_EQ(ErrorOf(spec), "steps: must be in [1, 10000000], got 0");
}

TEST_F(ValidationTest, EveryProblemIsReported) {
  JobSpec spec = Good();
  spec.mutable_batch()->set_micro_batch(0);
  spec.set_steps(-5);
  EXPECT_EQ(ErrorOf(spec),
            "steps: must be in [1, 10000000], got -5; "
            "batch.micro_batch: must be in [1, 65536], got 0");
}

TEST_F(ValidationTest, AbsurdSizes) {
  JobSpec spec = Good();
  spec.mutable_model()->mutable_mlp()->set_hidden(1, 0);
  EXPECT_EQ(ErrorOf(spec), "model.mlp.hidden[1]: must be in [1, 65536], got 0");
  spec = Good();
  spec.mutable_model()->mutable_mlp()->set_hidden(0, 1 << 30);
  EXPECT_THAT(ErrorOf(spec), StartsWith("model.mlp.hidden[0]: must be in"));
  spec = Good();
  spec.mutable_model()->mutable_mlp()->clear_hidden();
  EXPECT_THAT(ErrorOf(spec), StartsWith("model.mlp.hidden: at least one"));
  spec = Good();
  spec.set_steps(int64_t{1} << 40);
  EXPECT_THAT(ErrorOf(spec), StartsWith("steps: must be in [1, 10000000]"));
  spec = Good();
  spec.mutable_batch()->set_grad_accum(0);
  EXPECT_THAT(ErrorOf(spec), StartsWith("batch.grad_accum: must be in"));
  spec = Good();
  spec.mutable_resources()->set_gpus(-1);
  EXPECT_THAT(ErrorOf(spec),
              StartsWith("resources.gpus: must be in [0, 1024]"));
  spec = Good();
  spec.mutable_resources()->set_cpu_threads(0);
  EXPECT_THAT(ErrorOf(spec), StartsWith("resources.cpu_threads: must be in"));
  spec = Good();
  spec.mutable_resources()->set_cpu_ranks(0);
  EXPECT_THAT(ErrorOf(spec), StartsWith("resources.cpu_ranks: must be in"));
  spec.mutable_resources()->set_cpu_ranks(65);
  EXPECT_THAT(ErrorOf(spec), StartsWith("resources.cpu_ranks: must be in"));
  spec.mutable_resources()->set_cpu_ranks(2);
  spec.mutable_resources()->set_gpus(1);
  EXPECT_THAT(ErrorOf(spec),
              StartsWith("resources.cpu_ranks: applies to CPU jobs only"));
  spec.mutable_resources()->set_gpus(0);
  EXPECT_TRUE(ValidateJobSpec(spec, options_).ok());
  spec = Good();
  spec.mutable_resources()->set_max_nodes(-1);
  EXPECT_THAT(ErrorOf(spec),
              StartsWith("resources.max_nodes: must be in [0, 1024], got -1"));
  spec.mutable_resources()->set_max_nodes(2);
  EXPECT_TRUE(ValidateJobSpec(spec, options_).ok());
  spec = Good();
  spec.mutable_resources()->set_gpus(1);
  spec.mutable_resources()->set_gpu_compute_milli(1001);
  EXPECT_THAT(ErrorOf(spec),
              StartsWith("resources.gpu_compute_milli: must be in [1, 1000]"));
  spec.mutable_resources()->set_gpus(0);
  spec.mutable_resources()->set_gpu_compute_milli(500);
  EXPECT_THAT(ErrorOf(spec),
              StartsWith("resources.gpu_compute_milli: needs a GPU"));
  spec = Good();
  spec.set_priority(5000);
  EXPECT_EQ(ErrorOf(spec), "priority: must be in [-1000, 1000], got 5000");
  spec.set_priority(0);
  spec.set_max_restarts(101);
  EXPECT_EQ(ErrorOf(spec), "max_restarts: must be in [0, 100], got 101");
  spec.set_max_restarts(-1);
  EXPECT_EQ(ErrorOf(spec), "max_restarts: must be in [0, 100], got -1");
  spec.set_max_restarts(0);
  spec.set_time_limit_s(-5);
  EXPECT_EQ(ErrorOf(spec), "time_limit_s: must be in [0, 2592000], got -5");
  spec.set_time_limit_s(2592001);
  EXPECT_EQ(ErrorOf(spec),
            "time_limit_s: must be in [0, 2592000], got 2592001");
  spec.set_time_limit_s(3600);
  EXPECT_TRUE(ValidateJobSpec(spec, options_).ok());
}

TEST_F(ValidationTest, DependsOnListsWellFormedIdsOnce) {
  JobSpec spec = Good();
  spec.add_depends_on("j-000001");
  spec.add_depends_on("j-000002");
  EXPECT_TRUE(ValidateJobSpec(spec, options_).ok());
  spec.add_depends_on("j-000001");
  EXPECT_EQ(ErrorOf(spec), "depends_on[2]: j-000001 is listed twice");
  spec.set_depends_on(2, "");
  EXPECT_EQ(ErrorOf(spec), "depends_on[2]: \"\" is not a job id");
  spec.set_depends_on(2, "j 3\n");
  EXPECT_EQ(ErrorOf(spec), "depends_on[2]: \"j 3\\n\" is not a job id");
  spec.set_depends_on(2, std::string(129, 'j'));
  EXPECT_THAT(ErrorOf(spec), HasSubstr("is not a job id"));
  spec.clear_depends_on();
  for (int i = 0; i < 17; ++i) spec.add_depends_on(absl::StrCat("j-", i));
  EXPECT_EQ(ErrorOf(spec), "depends_on: at most 16 jobs, got 17");
}

TEST_F(ValidationTest, WarmStartNamesOneJobAndOneCheckpoint) {
  JobSpec spec = Good();
  spec.mutable_warm_start()->set_job("j-000001");
  EXPECT_TRUE(ValidateJobSpec(spec, options_).ok());
  spec.mutable_warm_start()->set_step(200);
  EXPECT_TRUE(ValidateJobSpec(spec, options_).ok());
  spec.mutable_warm_start()->set_best(true);
  EXPECT_EQ(ErrorOf(spec),
            "warm_start.best: not with warm_start.step: give one or the other");
  spec.mutable_warm_start()->set_step(-1);
  spec.mutable_warm_start()->set_best(false);
  EXPECT_EQ(ErrorOf(spec), "warm_start.step: must be in [0, 10000000], got -1");
  spec.mutable_warm_start()->set_step(0);
  spec.mutable_warm_start()->set_job("");
  EXPECT_EQ(ErrorOf(spec), "warm_start.job: required");
  spec.mutable_warm_start()->set_job("../j-1");
  EXPECT_EQ(ErrorOf(spec), "warm_start.job: \"../j-1\" is not a job id");
}

TEST_F(ValidationTest, ConcurrencyNeedsAGroupAndALimitTogether) {
  JobSpec spec = Good();
  spec.mutable_concurrency()->set_group("lr sweep");
  spec.mutable_concurrency()->set_max_running(2);
  EXPECT_TRUE(ValidateJobSpec(spec, options_).ok());
  spec.mutable_concurrency()->set_max_running(0);
  EXPECT_EQ(ErrorOf(spec),
            "concurrency.max_running: must be in [1, 10000], got 0");
  spec.mutable_concurrency()->set_max_running(10001);
  EXPECT_EQ(ErrorOf(spec),
            "concurrency.max_running: must be in [1, 10000], got 10001");
  spec.mutable_concurrency()->set_max_running(3);
  spec.mutable_concurrency()->set_group("");
  EXPECT_EQ(ErrorOf(spec),
            "concurrency.group: required with concurrency.max_running");
  spec.mutable_concurrency()->set_group(std::string(129, 'g'));
  EXPECT_EQ(ErrorOf(spec),
            "concurrency.group: at most 128 bytes of UTF-8, got 129");
  spec.mutable_concurrency()->set_group("a\tb");
  EXPECT_EQ(ErrorOf(spec),
            "concurrency.group: must not contain control characters");
}

TEST_F(ValidationTest, HalvingNeedsAGroupRungsBelowTheEndAndEvaluations) {
  JobSpec spec = Good();  // evaluates every 500 steps on a holdout
  spec.mutable_halving()->set_group("lr sweep");
  spec.mutable_halving()->set_min_steps(500);
  EXPECT_TRUE(ValidateJobSpec(spec, options_).ok());
  EXPECT_EQ(WithDefaults(spec).halving().factor(), 3);
  spec.mutable_halving()->set_factor(1);
  EXPECT_EQ(ErrorOf(spec), "halving.factor: must be in [2, 16], got 1");
  spec.mutable_halving()->set_factor(17);
  EXPECT_EQ(ErrorOf(spec), "halving.factor: must be in [2, 16], got 17");
  spec.mutable_halving()->set_factor(2);
  spec.mutable_halving()->set_min_steps(0);
  EXPECT_EQ(ErrorOf(spec), "halving.min_steps: must be at least 1, got 0");
  spec.mutable_halving()->set_min_steps(spec.steps());
  EXPECT_EQ(ErrorOf(spec),
            absl::StrCat("halving.min_steps: must be below steps (",
                         spec.steps(), "), got ", spec.steps(),
                         ": the first rung is never reached"));
  spec.mutable_halving()->set_min_steps(100);
  spec.mutable_halving()->set_group("");
  EXPECT_EQ(ErrorOf(spec), "halving.group: required");
  spec.mutable_halving()->set_group(std::string(129, 'g'));
  EXPECT_EQ(ErrorOf(spec),
            "halving.group: at most 128 bytes of UTF-8, got 129");
  spec.mutable_halving()->set_group("sweep");
  spec.mutable_eval()->set_every_steps(0);
  EXPECT_EQ(ErrorOf(spec),
            "halving: needs periodic evaluations (eval.every_steps > 0)");
  spec.mutable_eval()->set_every_steps(50);
  spec.mutable_data()->mutable_mnist()->set_holdout(0);
  EXPECT_THAT(ErrorOf(spec),
              StartsWith("halving: needs an evaluation set (data.mnist"));
}

TEST_F(ValidationTest, ParameterLimit) {
  JobSpec spec = Good();
  auto* mlp = spec.mutable_model()->mutable_mlp();
  mlp->clear_hidden();
  mlp->add_hidden(65536);
  mlp->add_hidden(20000);  // about 1.36e9 parameters
  EXPECT_TRUE(ValidateJobSpec(spec, options_).ok());
  mlp->add_hidden(50000);  // about 2.36e9
  EXPECT_EQ(ErrorOf(spec), "model: 2.4e9 parameters exceeds the limit of 2e9");
}

TEST_F(ValidationTest, OptimizerNumbers) {
  JobSpec spec = Good();
  spec.mutable_optimizer()->set_lr(0);
  EXPECT_EQ(ErrorOf(spec), "optimizer.lr: must be a finite number > 0");
  spec.mutable_optimizer()->set_lr(std::numeric_limits<double>::infinity());
  EXPECT_EQ(ErrorOf(spec), "optimizer.lr: must be a finite number > 0");
  spec = Good();
  spec.mutable_optimizer()->set_beta2(1.0);
  EXPECT_EQ(ErrorOf(spec), "optimizer.beta2: must be in [0, 1)");
  spec = Good();
  spec.mutable_optimizer()->set_weight_decay(-1);
  EXPECT_EQ(ErrorOf(spec),
            "optimizer.weight_decay: must be a finite number >= 0");
  spec = Good();
  spec.mutable_optimizer()->set_min_lr_ratio(std::nan(""));
  EXPECT_EQ(ErrorOf(spec), "optimizer.min_lr_ratio: must be in [0, 1]");
}

TEST_F(ValidationTest, NameAndEnums) {
  JobSpec spec = Good();
  spec.set_name(std::string(129, 'n'));
  EXPECT_EQ(ErrorOf(spec), "name: at most 128 bytes of UTF-8, got 129");
  spec.set_name("a\nb");
  EXPECT_EQ(ErrorOf(spec), "name: must not contain control characters");
  spec = Good();
  spec.set_precision(static_cast<trainyard::v1::Precision>(9));
  EXPECT_EQ(ErrorOf(spec), "precision: must be FP32 or BF16, got 9");
  spec.set_precision(trainyard::v1::BF16);
  EXPECT_EQ(ErrorOf(spec), "precision: BF16 needs a GPU (resources.gpus >= 1)");
}

TEST_F(ValidationTest, MnistShapes) {
  JobSpec spec = Good();
  spec.mutable_model()->mutable_mlp()->set_input_dim(100);
  EXPECT_EQ(ErrorOf(spec),
            "model.mlp.input_dim: must be 784 (or 0) for MNIST data, got 100");
  spec = Good();
  spec.mutable_data()->mutable_mnist()->set_holdout(-1);
  EXPECT_THAT(ErrorOf(spec), StartsWith("data.mnist.holdout: must be in"));
  spec = Good();
  spec.mutable_data()->mutable_mnist()->set_eval_images("mnist/images.gz");
  EXPECT_EQ(ErrorOf(spec),
            "data.mnist.eval_labels: required (a path relative to the data "
            "root); data.mnist.holdout: must be 0 when eval_images is set");
}

TEST_F(ValidationTest, MissingFile) {
  JobSpec spec = Good();
  spec.mutable_data()->mutable_mnist()->set_images("examples/x.gz");
  EXPECT_EQ(ErrorOf(spec), "data.mnist.images: file not found: examples/x.gz");
  options_.check_files_exist = false;
  EXPECT_TRUE(ValidateJobSpec(spec, options_).ok());
}

TEST_F(ValidationTest, PathEscapes) {
  JobSpec spec = Good();
  spec.mutable_data()->mutable_mnist()->set_images("../secret.gz");
  EXPECT_EQ(ErrorOf(spec), "data.mnist.images: path escapes the data root");
  spec.mutable_data()->mutable_mnist()->set_images("mnist/../../secret.gz");
  EXPECT_EQ(ErrorOf(spec), "data.mnist.images: path escapes the data root");
  ASSERT_EQ(::symlink((base_ + "/secret.gz").c_str(),
                      (root_ + "/mnist/link.gz").c_str()),
            0);
  spec.mutable_data()->mutable_mnist()->set_images("mnist/link.gz");
  EXPECT_EQ(ErrorOf(spec), "data.mnist.images: path escapes the data root");
  options_.check_files_exist = false;
  EXPECT_EQ(ErrorOf(spec), "data.mnist.images: path escapes the data root");
}

TEST_F(ValidationTest, AbsolutePathIsRefused) {
  JobSpec spec = Good();
  spec.mutable_data()->mutable_mnist()->set_labels(root_ + "/mnist/labels.gz");
  EXPECT_THAT(ErrorOf(spec),
              StartsWith("data.mnist.labels: must be relative to the data "
                         "root, got the absolute path /"));
}

TEST_F(ValidationTest, DirectoryIsNotAFile) {
  JobSpec spec = Good();
  spec.mutable_data()->mutable_mnist()->set_images("mnist");
  EXPECT_EQ(ErrorOf(spec), "data.mnist.images: not a regular file: mnist");
}

TEST_F(ValidationTest, LongPathIsRefused) {
  JobSpec spec = Good();
  spec.mutable_data()->mutable_mnist()->set_images(std::string(4097, 'a'));
  EXPECT_EQ(ErrorOf(spec), "data.mnist.images: at most 4096 bytes");
}

TEST_F(ValidationTest, GptOnTextOrTokens) {
  JobSpec spec = *ParseJobSpec(
      "model: {gpt: {n_layer: 2, n_head: 2, d_model: 64, seq_len: 64, "
      "vocab_size: 256}}\ndata: {text: {train: mnist/images.gz}}\n"
      "batch: {micro_batch: 4}\nsteps: 10\n");
  EXPECT_TRUE(ValidateJobSpec(spec, options_).ok())
      << ValidateJobSpec(spec, options_);
  spec.mutable_model()->mutable_gpt()->set_vocab_size(65);
  EXPECT_EQ(ErrorOf(spec),
            "model.gpt.vocab_size: must be >= 256 for the byte tokenizer, "
            "got 65");
  spec.mutable_data()->mutable_text()->set_tokenizer(trainyard::v1::CHAR);
  EXPECT_TRUE(ValidateJobSpec(spec, options_).ok())
      << ValidateJobSpec(spec, options_);
  // Without data.text.eval the last 10% is held out: early stopping and
  // the best checkpoint have an evaluation set.
  spec.mutable_eval()->set_every_steps(5);
  spec.mutable_eval()->set_patience(2);
  spec.mutable_checkpoint()->set_keep_best(true);
  EXPECT_TRUE(ValidateJobSpec(spec, options_).ok())
      << ValidateJobSpec(spec, options_);
  spec.mutable_model()->mutable_gpt()->set_init_from("../hf");
  EXPECT_EQ(ErrorOf(spec), "model.gpt.init_from: path escapes the data root");
  spec.mutable_warm_start()->set_job("j-000001");
  EXPECT_THAT(ErrorOf(spec),
              HasSubstr("warm_start: not with model.gpt.init_from"));
  spec.clear_warm_start();
  spec.mutable_model()->mutable_gpt()->set_init_from("");
  spec.mutable_model()->mutable_gpt()->set_d_model(63);
  EXPECT_THAT(ErrorOf(spec),
              StartsWith("model.gpt.d_model: must be a multiple of n_head"));
  spec.mutable_model()->mutable_gpt()->set_d_model(64);
  spec.mutable_data()->mutable_tokens()->add_train("../x.bin");
  EXPECT_THAT(ErrorOf(spec),
              HasSubstr("data.tokens.train[0]: path escapes the data root"));
  spec.mutable_data()->mutable_tokens()->set_train(0, "mnist/images.gz");
  EXPECT_TRUE(ValidateJobSpec(spec, options_).ok())
      << ValidateJobSpec(spec, options_);
}

TEST_F(ValidationTest, InitFromIsAModelFolderInsideTheRoot) {
  JobSpec spec = *ParseJobSpec(
      "model: {gpt: {n_layer: 2, n_head: 2, d_model: 64, seq_len: 64, "
      "vocab_size: 256, init_from: hf}}\n"
      "data: {text: {train: mnist/images.gz}}\n"
      "batch: {micro_batch: 4}\nsteps: 10\n");
  EXPECT_EQ(ErrorOf(spec), "model.gpt.init_from: file not found: hf");
  ASSERT_EQ(::mkdir((root_ + "/hf").c_str(), 0755), 0);
  EXPECT_EQ(ErrorOf(spec),
            "model.gpt.init_from: file not found: hf/config.json");
  Touch(root_ + "/hf/config.json");
  Touch(root_ + "/hf/model.safetensors");
  EXPECT_TRUE(ValidateJobSpec(spec, options_).ok())
      << ValidateJobSpec(spec, options_);
  ASSERT_EQ(::symlink((base_ + "/secret.gz").c_str(),
                      (root_ + "/hf/trainyard_tokenizer.json").c_str()),
            0);
  EXPECT_EQ(ErrorOf(spec), "model.gpt.init_from: path escapes the data root");
}

TEST_F(ValidationTest, ModelAndDataMustGoTogether) {
  JobSpec spec = Good();  // an MLP on MNIST
  spec.mutable_data()->mutable_text()->set_train("mnist/images.gz");
  EXPECT_EQ(ErrorOf(spec),
            "model.mlp: trains on MNIST data, not text or tokens");
  spec = *ParseJobSpec(
      "model: {gpt: {n_layer: 1, n_head: 1, d_model: 8, seq_len: 8, "
      "vocab_size: 256}}\ndata: {mnist: {images: mnist/images.gz, labels: "
      "mnist/labels.gz}}\nbatch: {micro_batch: 4}\nsteps: 10\n");
  EXPECT_EQ(ErrorOf(spec),
            "model.gpt: trains on text or token data, not MNIST");
}

TEST_F(ValidationTest, ResolveDataPathReturnsTheRealPath) {
  absl::StatusOr<std::string> path =
      ResolveDataPath("f", root_, "mnist/./images.gz", true);
  ASSERT_TRUE(path.ok()) << path.status();
  char real[PATH_MAX];
  ASSERT_NE(::realpath(root_.c_str(), real), nullptr);
  EXPECT_EQ(*path, absl::StrCat(real, "/mnist/images.gz"));
  path = ResolveDataPath("f", root_, "new/dir/out.bin", false);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, absl::StrCat(real, "/new/dir/out.bin"));
  EXPECT_EQ(ResolveDataPath("f", root_, "", true).status().message(),
            "f: required (a path relative to the data root)");
  EXPECT_THAT(
      ResolveDataPath("f", base_ + "/nope", "a", true).status().message(),
      HasSubstr("is not accessible"));
}

TEST_F(ValidationTest, GpuModels) {
  JobSpec spec = Good();
  auto* r = spec.mutable_resources();
  r->set_gpus(2);
  r->add_gpu_models("H100");
  r->add_gpu_models("a100-sxm4-80gb");
  EXPECT_TRUE(ValidateJobSpec(spec, options_).ok());
  r->add_gpu_models("");
  EXPECT_EQ(ErrorOf(spec), "resources.gpu_models[2]: must not be empty");
  r->set_gpu_models(2, std::string(65, 'x'));
  EXPECT_EQ(ErrorOf(spec), "resources.gpu_models[2]: at most 64 bytes, got 65");
  r->set_gpu_models(2, std::string(64, 'x'));
  EXPECT_TRUE(ValidateJobSpec(spec, options_).ok());
  r->set_gpu_models(2, "H100\n");
  EXPECT_EQ(
      ErrorOf(spec),
      "resources.gpu_models[2]: printable ASCII only (as NVML names are)");
  r->set_gpu_models(2, "L40S");
  for (int i = 3; i < 17; ++i) r->add_gpu_models("L4");
  EXPECT_EQ(ErrorOf(spec), "resources.gpu_models: at most 16 models, got 17");
  r->mutable_gpu_models()->RemoveLast();
  EXPECT_TRUE(ValidateJobSpec(spec, options_).ok());
  r->clear_gpu_models();
  r->add_gpu_models("H100");
  r->set_gpus(0);
  EXPECT_EQ(ErrorOf(spec),
            "resources.gpu_models: needs a GPU (resources.gpus >= 1)");
}

TEST_F(ValidationTest, GpuModelsFromYamlAndJson) {
  std::string yaml =
      std::string(kGood) +
      "resources: {gpus: 1, gpu_models: [H100, \"A100 80GB\"]}\n";
  absl::StatusOr<JobSpec> spec = ParseJobSpec(yaml);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->resources().gpu_models(),
              ::testing::ElementsAre("H100", "A100 80GB"));
  spec = ParseJobSpec(
      R"({"name": "j", "steps": 1, "resources": {"gpuModels": ["L4"]}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->resources().gpu_models(), ::testing::ElementsAre("L4"));
}

}  // namespace
}  // namespace trainyard::spec
