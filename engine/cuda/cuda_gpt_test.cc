// GptModel on the CUDA backend against the CPU reference backend: one full
// training step (loss, every gradient, the AdamW update), 50-step loss
// curves through the real Trainer, and exact resume on the GPU (a run
// stopped and resumed ends bitwise equal to a straight one). Skipped
// without a GPU.
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/test_dir.h"
#include "engine/core/adamw.h"
#include "engine/core/file_io.h"
#include "engine/core/gpt.h"
#include "engine/core/rng.h"
#include "engine/core/trainer.h"
#include "engine/core/trainer_test_support.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_test_support.h"
#include "engine/data/shuffled_loader.h"
#include "engine/data/token_data.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

namespace fs = std::filesystem;

// Head size 16, two layers: every op of the model, small enough for the
// CPU to keep up.
constexpr GptConfig kConfig{/*n_layer=*/2, /*n_head=*/4, /*d_model=*/64,
                            /*seq_len=*/32, /*vocab_size=*/96};
constexpr int64_t kArena = int64_t{256} << 20;

std::unique_ptr<CudaBackend> MakeGpu() {
  CudaBackendOptions options;
  options.arena_bytes = kArena;
  auto backend = CudaBackend::Create(options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? *std::move(backend) : nullptr;
}

// A stream a model can learn: mostly next = (5 cur + 3) mod V, with one
// token in five drawn at random.
std::shared_ptr<const std::vector<int32_t>> LearnableTokens(int64_t n) {
  Rng rng(42);
  auto tokens = std::make_shared<std::vector<int32_t>>();
  int32_t cur = 0;
  for (int64_t i = 0; i < n; ++i) {
    cur = rng.Below(5) == 0
              ? static_cast<int32_t>(rng.Below(kConfig.vocab_size))
              : static_cast<int32_t>((5 * cur + 3) % kConfig.vocab_size);
    tokens->push_back(cur);
  }
  return tokens;
}

class CudaGptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_test::DevicePresent()) GTEST_SKIP() << cuda_test::kNoDevice;
  }
};

// Relative L2 distance of two tensors.
double RelativeError(const std::vector<float>& got,
                     const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (static_cast<double>(got[i]) - want[i]) *
            (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

// ForwardBackward (the classifier's loss and gradient in one op, the
// backward queued before the wait for the losses) gives Forward then
// Backward's loss and gradients bit for bit, in fp32 and bf16, on the
// GPU and on the CPU.
TEST_F(CudaGptTest, ForwardBackwardIsForwardThenBackward) {
  constexpr int64_t kBatch = 3, kParts = 4;
  TokenWindows windows(LearnableTokens(2000), kConfig.seq_len, 1,
                       kConfig.vocab_size);
  Batch batch;
  const std::vector<int64_t> picks = {5, 600, 1300};
  windows.Gather(picks, &batch);
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    CudaBackendOptions gpu_options;
    gpu_options.arena_bytes = kArena;
    gpu_options.activation_dtype = dtype;
    CpuBackendOptions cpu_options;
    cpu_options.activation_dtype = dtype;
    std::unique_ptr<Backend> backends[2];
    auto gpu = CudaBackend::Create(gpu_options);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    backends[0] = *std::move(gpu);
    backends[1] = *CpuBackend::Create(cpu_options);
    for (const auto& backend : backends) {
      SCOPED_TRACE(::testing::Message()
                   << backend->name()
                   << (dtype == DType::kBF16 ? " bf16" : ""));
      std::vector<ForwardStats> stats;
      std::vector<std::vector<float>> grads[2];
      for (const bool fused : {false, true}) {
        auto model = GptModel::Create(kConfig, kBatch, backend.get());
        ASSERT_TRUE(model.ok()) << model.status();
        Rng rng(9);
        ASSERT_TRUE((*model)->InitializeParameters(rng).ok());
        (*model)->ZeroGradients();
        absl::StatusOr<ForwardStats> s;
        if (fused) {
          s = (*model)->ForwardBackward(batch, kParts);
        } else {
          s = (*model)->Forward(batch);
          (*model)->Backward(
              Model::LossScale(kBatch * kConfig.seq_len, kParts));
        }
        ASSERT_TRUE(s.ok()) << s.status();
        ASSERT_TRUE(backend->Synchronize().ok());
        stats.push_back(*s);
        for (const Parameter& p : (*model)->parameters()) {
          std::vector<float> g(p.size());
          backend->CopyToHost(g.data(), p.grad, p.size() * 4);
          grads[fused].push_back(std::move(g));
        }
        ASSERT_TRUE(backend->Synchronize().ok());
      }
      EXPECT_EQ(stats[0].loss_sum, stats[1].loss_sum);
      EXPECT_EQ(stats[0].correct, stats[1].correct);
      EXPECT_EQ(stats[0].examples, stats[1].examples);
      ASSERT_EQ(grads[0].size(), grads[1].size());
      for (size_t i = 0; i < grads[0].size(); ++i) {
        EXPECT_TRUE(grads[0][i] == grads[1][i]) << "parameter " << i;
      }
    }
  }
}

// Each backend's rounding differs from the other's by a few ulp per op
// (fp32 GEMMs in another order, other expf): after the ~30 chained ops of
// a forward and backward, relative differences of 1e-6..1e-5 are
// expected. 1e-4 leaves margin; any wrong kernel is off by O(1).
TEST_F(CudaGptTest, OneTrainingStepMatchesCpu) {
  constexpr int64_t kBatch = 4;
  auto cpu = *CpuBackend::Create({});
  auto gpu = MakeGpu();
  ASSERT_NE(gpu, nullptr);
  auto cpu_model = *GptModel::Create(kConfig, kBatch, cpu.get());
  auto gpu_model = GptModel::Create(kConfig, kBatch, gpu.get());
  ASSERT_TRUE(gpu_model.ok()) << gpu_model.status();
  Rng rng_a(5), rng_b(5);
  ASSERT_TRUE(cpu_model->InitializeParameters(rng_a).ok());
  ASSERT_TRUE((*gpu_model)->InitializeParameters(rng_b).ok());

  TokenWindows windows(LearnableTokens(2000), kConfig.seq_len, 1,
                       kConfig.vocab_size);
  Batch batch;
  const std::vector<int64_t> picks = {3, 700, 1200, 1500};
  windows.Gather(picks, &batch);
  const float scale = 1.f / (kBatch * kConfig.seq_len);

  for (Model* m : {static_cast<Model*>(cpu_model.get()),
                   static_cast<Model*>(gpu_model->get())}) {
    m->ZeroGradients();
  }
  const auto cpu_stats = *cpu_model->Forward(batch);
  const auto gpu_stats = (*gpu_model)->Forward(batch);
  ASSERT_TRUE(gpu_stats.ok()) << gpu_stats.status();
  EXPECT_NEAR(gpu_stats->loss_sum, cpu_stats.loss_sum,
              1e-5 * cpu_stats.loss_sum);
  EXPECT_EQ(gpu_stats->tokens, cpu_stats.tokens);
  cpu_model->Backward(scale);
  (*gpu_model)->Backward(scale);
  ASSERT_TRUE(gpu->Synchronize().ok());

  const auto& cp = cpu_model->parameters();
  const auto& gp = (*gpu_model)->parameters();
  std::vector<std::vector<float>> cpu_grads;
  for (size_t i = 0; i < cp.size(); ++i) {
    std::vector<float> want(cp[i].grad, cp[i].grad + cp[i].size());
    const auto got = cuda_test::Download(*gpu, gp[i].grad, gp[i].size());
    EXPECT_LT(RelativeError(got, want), 1e-4) << cp[i].name;
    cpu_grads.push_back(std::move(want));
  }

  auto cpu_opt = *AdamW::Create({}, &cp, cpu.get());
  auto gpu_opt = *AdamW::Create({}, &gp, gpu.get());
  constexpr double kLr = 1e-3;
  const auto cpu_step = *cpu_opt->Step(kLr);
  const auto gpu_step = gpu_opt->Step(kLr);
  ASSERT_TRUE(gpu_step.ok()) << gpu_step.status();
  EXPECT_NEAR(gpu_step->grad_norm, cpu_step.grad_norm,
              1e-4 * cpu_step.grad_norm);
  // The first AdamW step moves each weight by about lr * sign(grad): the
  // same where the gradient is clearly nonzero, within 2 lr where the two
  // backends' gradients are both near zero and may differ in sign.
  for (size_t i = 0; i < cp.size(); ++i) {
    const auto got = cuda_test::Download(*gpu, gp[i].value, gp[i].size());
    float max_grad = 0;
    for (float g : cpu_grads[i]) max_grad = std::max(max_grad, std::abs(g));
    for (int64_t k = 0; k < cp[i].size(); ++k) {
      const bool clear = std::abs(cpu_grads[i][k]) > 1e-3f * max_grad;
      const double tol =
          clear ? 1e-6 * (1 + std::abs(cp[i].value[k])) : 2 * kLr + 1e-6;
      ASSERT_NEAR(got[k], cp[i].value[k], tol) << cp[i].name << "[" << k << "]";
    }
  }
}

// Everything one training process would own.
struct Rig {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<GptModel> model;
  std::unique_ptr<ShuffledLoader> loader;
  std::unique_ptr<Trainer> trainer;
};

class CudaTrainingTest : public CudaGptTest {
 protected:
  static void SetUpTestSuite() {
    windows_ = new TokenWindows(LearnableTokens(20'000), kConfig.seq_len, 1,
                                kConfig.vocab_size);
  }
  static void TearDownTestSuite() {
    delete windows_;
    windows_ = nullptr;
  }
  void SetUp() override { CudaGptTest::SetUp(); }

  static TrainerConfig Config(int64_t steps) {
    TrainerConfig c;
    c.total_steps = steps;
    c.micro_batch = 8;
    c.lr = 3e-3;
    c.warmup_steps = 5;
    c.optimizer.weight_decay = 0.01;
    c.log_every_steps = 1;
    c.seed = 11;
    c.fingerprint = "cuda-gpt-test";
    return c;
  }

  static Rig Make(TrainerConfig config, bool gpu, const std::string& dir,
                  RecordingSink* sink) {
    Rig r;
    config.checkpoint.dir = dir;
    if (gpu) {
      r.backend = MakeGpu();
    } else {
      r.backend = *CpuBackend::Create({});
    }
    if (r.backend == nullptr) return r;
    r.model = *GptModel::Create(kConfig, config.micro_batch, r.backend.get());
    ShuffledLoaderOptions lo;
    lo.batch_size = config.micro_batch;
    lo.seed = config.seed;
    lo.with_replacement = true;
    r.loader = *ShuffledLoader::Create(windows_, lo);
    auto t = Trainer::Create(config, r.model.get(), r.backend.get(),
                             r.loader.get(), nullptr, sink);
    EXPECT_TRUE(t.ok()) << t.status();
    if (t.ok()) r.trainer = *std::move(t);
    return r;
  }

  static TokenWindows* windows_;
  TestDir tmp_;
  const std::string dir_ = tmp_.path();
};

TokenWindows* CudaTrainingTest::windows_ = nullptr;

// Rounding differences grow slowly along a trajectory; over 50 steps at
// these sizes they stay far below 0.5% of the loss, while the loss itself
// falls by much more than that.
TEST_F(CudaTrainingTest, LossCurvesOver50StepsAgreeWithCpu) {
  RecordingSink cpu_sink, gpu_sink;
  Rig cpu = Make(Config(50), /*gpu=*/false, "", &cpu_sink);
  Rig gpu = Make(Config(50), /*gpu=*/true, "", &gpu_sink);
  ASSERT_NE(gpu.trainer, nullptr);
  ASSERT_EQ(*cpu.trainer->Run(nullptr), Trainer::Outcome::kFinished);
  const auto outcome = gpu.trainer->Run(nullptr);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  const auto cpu_steps = cpu_sink.Of<TrainProgressEvent>();
  const auto gpu_steps = gpu_sink.Of<TrainProgressEvent>();
  ASSERT_EQ(cpu_steps.size(), 50u);
  ASSERT_EQ(gpu_steps.size(), 50u);
  for (size_t i = 0; i < 50; ++i) {
    EXPECT_NEAR(gpu_steps[i].loss, cpu_steps[i].loss, 5e-3 * cpu_steps[i].loss)
        << "step " << i + 1;
  }
  EXPECT_LT(gpu_steps.back().loss, 0.8 * gpu_steps.front().loss);
}

// Stop (as SIGTERM does) after step 9, resume with a fresh backend, model
// and loader, finish: weights, moments and the final checkpoint file equal
// a straight GPU run's bit for bit.
TEST_F(CudaTrainingTest, StoppedAndResumedEqualsStraightOnTheGpu) {
  const TrainerConfig config = Config(20);
  std::vector<HostTensor> straight;
  {
    RecordingSink sink;
    Rig r = Make(config, true, dir_ + "/straight", &sink);
    ASSERT_NE(r.trainer, nullptr);
    ASSERT_EQ(*r.trainer->Run(nullptr), Trainer::Outcome::kFinished);
    straight = r.trainer->StateTensors();
  }
  {
    RecordingSink sink;
    sink.stop_after = 9;
    Rig r = Make(config, true, dir_ + "/resumed", &sink);
    ASSERT_NE(r.trainer, nullptr);
    ASSERT_EQ(*r.trainer->Run(&sink.stop), Trainer::Outcome::kInterrupted);
  }
  RecordingSink sink;
  Rig r = Make(config, true, dir_ + "/resumed", &sink);
  ASSERT_NE(r.trainer, nullptr);
  ASSERT_EQ(*r.trainer->Run(nullptr), Trainer::Outcome::kFinished);
  ASSERT_EQ(sink.Of<TrainStartedEvent>().size(), 1u);
  EXPECT_EQ(sink.Of<TrainStartedEvent>()[0].start_step, 9);
  ExpectBitwiseEqual(straight, r.trainer->StateTensors());
  EXPECT_EQ(*ReadWholeFile(dir_ + "/straight/step-00000020/model.safetensors",
                           1 << 24),
            *ReadWholeFile(dir_ + "/resumed/step-00000020/model.safetensors",
                           1 << 24));
}

}  // namespace
}  // namespace trainyard::engine
