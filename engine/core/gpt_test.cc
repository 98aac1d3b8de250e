// GptModel on the CPU backend: the whole forward and backward against an
// independent double-precision implementation composed from
// engine/cpu/reference_ops.h (loss compared directly, every gradient entry
// against central finite differences), thread-count independence, GPT-2
// initialization and bad batches.
#include "engine/core/gpt.h"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/core/rng.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/reference_ops.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

using reference::Vec;
using Params = std::map<std::string, Vec>;

constexpr GptConfig kTiny{/*n_layer=*/2, /*n_head=*/2, /*d_model=*/8,
                          /*seq_len=*/5, /*vocab_size=*/11};
constexpr int64_t kBatch = 2;

std::unique_ptr<CpuBackend> MakeBackend(int threads) {
  CpuBackendOptions o;
  o.threads = threads;
  return *CpuBackend::Create(o);
}

Vec Plus(const Vec& a, const Vec& b) {
  Vec y(a.size());
  for (size_t i = 0; i < a.size(); ++i) y[i] = a[i] + b[i];
  return y;
}

// The sum of the token losses, computed from scratch in double.
double ReferenceLoss(const Params& p, const GptConfig& c, const Batch& batch) {
  const int64_t B = batch.size, T = batch.seq_len, C = c.d_model;
  const int64_t BT = B * T;
  Vec x = reference::Embedding(batch.tokens, p.at("wte"), p.at("wpe"), B, T, C);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    auto w = [&](const char* name) -> const Vec& {
      return p.at(absl::StrCat("h.", l, ".", name));
    };
    Vec h = reference::LayerNorm(x, w("ln_1.weight"), w("ln_1.bias"), BT, C);
    h = reference::Linear(h, w("attn.c_attn.weight"), w("attn.c_attn.bias"), BT,
                          C, 3 * C);
    h = reference::Attention(h, B, T, C, c.n_head);
    h = reference::Linear(h, w("attn.c_proj.weight"), w("attn.c_proj.bias"), BT,
                          C, C);
    x = Plus(x, h);
    h = reference::LayerNorm(x, w("ln_2.weight"), w("ln_2.bias"), BT, C);
    h = reference::Linear(h, w("mlp.c_fc.weight"), w("mlp.c_fc.bias"), BT, C,
                          4 * C);
    h = reference::Gelu(h);
    h = reference::Linear(h, w("mlp.c_proj.weight"), w("mlp.c_proj.bias"), BT,
                          4 * C, C);
    x = Plus(x, h);
  }
  x = reference::LayerNorm(x, p.at("ln_f.weight"), p.at("ln_f.bias"), BT, C);
  const Vec logits = reference::Linear(x, p.at("wte"), {}, BT, C, c.vocab_size);
  return reference::CrossEntropySum(logits, batch.targets, BT, c.vocab_size);
}

Batch TinyBatch(const GptConfig& c, int64_t size, uint64_t seed) {
  Rng rng(seed);
  Batch b;
  b.size = size;
  b.seq_len = c.seq_len;
  for (int64_t i = 0; i < size * c.seq_len; ++i) {
    b.tokens.push_back(static_cast<int32_t>(rng.Below(c.vocab_size)));
    b.targets.push_back(static_cast<int32_t>(rng.Below(c.vocab_size)));
  }
  return b;
}

// GPT-2 init plus uniform noise, so LayerNorm gains, biases and attention
// scores are far from their trivial starting values.
void Perturb(GptModel& model, uint64_t seed) {
  Rng rng(seed);
  ASSERT_TRUE(model.InitializeParameters(rng).ok());
  for (const Parameter& p : model.parameters()) {
    for (int64_t i = 0; i < p.size(); ++i) p.value[i] += rng.Uniform(-.4f, .4f);
  }
}

TEST(GptModelTest, GradientsMatchFiniteDifferencesOfAnIndependentModel) {
  auto backend = MakeBackend(2);
  auto model = *GptModel::Create(kTiny, kBatch, backend.get());
  Perturb(*model, 1);
  const Batch batch = TinyBatch(kTiny, kBatch, 2);
  model->ZeroGradients();
  absl::StatusOr<ForwardStats> stats = model->Forward(batch);
  ASSERT_TRUE(stats.ok()) << stats.status();
  model->Backward(1.0f);
  EXPECT_EQ(stats->examples, kBatch * kTiny.seq_len);

  Params params;
  for (const Parameter& p : model->parameters()) {
    params[p.name] = Vec(p.value, p.value + p.size());
  }
  EXPECT_NEAR(stats->loss_sum, ReferenceLoss(params, kTiny, batch),
              1e-4 * stats->loss_sum);
  constexpr double h = 1e-4;
  int checked = 0;
  for (const Parameter& p : model->parameters()) {
    Vec& v = params[p.name];
    for (int64_t i = 0; i < p.size(); ++i) {
      const double keep = v[i];
      v[i] = keep + h;
      const double up = ReferenceLoss(params, kTiny, batch);
      v[i] = keep - h;
      const double down = ReferenceLoss(params, kTiny, batch);
      v[i] = keep;
      const double want = (up - down) / (2 * h);
      ASSERT_NEAR(p.grad[i], want, 2e-4 * (1 + std::abs(want)))
          << p.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_EQ(checked, GptParameterCount(kTiny));
  EXPECT_EQ(model->num_parameters(), GptParameterCount(kTiny));
}

TEST(GptModelTest, ForwardAndBackwardDoNotDependOnTheThreadCount) {
  const GptConfig c{2, 4, 32, 16, 40};
  auto grads = [&](int threads) {
    auto backend = MakeBackend(threads);
    auto model = *GptModel::Create(c, 3, backend.get());
    Perturb(*model, 3);
    model->ZeroGradients();
    EXPECT_TRUE(model->Forward(TinyBatch(c, 3, 4)).ok());
    model->Backward(0.01f);
    std::vector<float> all;
    for (const Parameter& p : model->parameters()) {
      all.insert(all.end(), p.grad, p.grad + p.size());
    }
    return all;
  };
  const std::vector<float> one = grads(1);
  EXPECT_EQ(one, grads(2));
  EXPECT_EQ(one, grads(4));
}

TEST(GptModelTest, InitializesLikeGpt2) {
  const GptConfig c{4, 2, 64, 32, 100};
  auto backend = MakeBackend(1);
  auto model = *GptModel::Create(c, 1, backend.get());
  Rng rng(7);
  ASSERT_TRUE(model->InitializeParameters(rng).ok());
  for (const Parameter& p : model->parameters()) {
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < p.size(); ++i) {
      sum += p.value[i];
      sq += double{p.value[i]} * p.value[i];
    }
    const double mean = sum / p.size(), rms = std::sqrt(sq / p.size());
    if (p.name.find("ln_") != std::string::npos &&
        p.name.ends_with(".weight")) {
      EXPECT_EQ(mean, 1.0) << p.name;
    } else if (p.shape.size() == 1) {
      EXPECT_EQ(rms, 0.0) << p.name;
    } else {
      const double want = p.name.ends_with("c_proj.weight")
                              ? 0.02 / std::sqrt(2.0 * c.n_layer)
                              : 0.02;
      EXPECT_NEAR(rms, want, 0.1 * want) << p.name;
    }
    // Decay only on the linear weights.
    EXPECT_EQ(p.is_bias, !(p.shape.size() == 2 && p.name[0] == 'h')) << p.name;
  }
}

TEST(GptModelTest, RejectsBadConfigsAndBatches) {
  auto backend = MakeBackend(1);
  EXPECT_EQ(
      GptModel::Create({1, 3, 8, 4, 10}, 1, backend.get()).status().code(),
      absl::StatusCode::kInvalidArgument);  // 8 % 3 != 0
  EXPECT_FALSE(GptModel::Create({0, 1, 8, 4, 10}, 1, backend.get()).ok());
  EXPECT_EQ(GptModel::Create({1000, 1, 8, 4, 10}, 1, backend.get())
                .status()
                .message(),
            "gpt: n_layer must be in [1, 256], got 1000");
  // Sizes within the limits whose activations cannot exist.
  EXPECT_EQ(GptModel::Create({256, 256, 256, 65536, 10}, 65536, backend.get())
                .status()
                .code(),
            absl::StatusCode::kResourceExhausted);
  auto model = *GptModel::Create(kTiny, 2, backend.get());
  Batch b = TinyBatch(kTiny, 2, 1);
  b.tokens[3] = 11;
  EXPECT_EQ(model->Forward(b).status().message(),
            "gpt: token 11 outside the vocabulary [0, 11)");
  b = TinyBatch(kTiny, 3, 1);
  EXPECT_EQ(model->Forward(b).status().code(),
            absl::StatusCode::kInvalidArgument);
  b = TinyBatch(kTiny, 1, 1);
  b.targets.pop_back();
  EXPECT_EQ(model->Forward(b).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Shorter windows than seq_len are fine (sampling uses them).
  b = TinyBatch(kTiny, 1, 1);
  b.seq_len = 2;
  b.tokens.resize(2);
  b.targets.resize(2);
  EXPECT_TRUE(model->Forward(b).ok());
  EXPECT_EQ(model->Logits(0, 1).size(), 11u);
}

}  // namespace
}  // namespace trainyard::engine
