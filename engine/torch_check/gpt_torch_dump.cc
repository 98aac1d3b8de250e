// Writes what the PyTorch cross-check (gpt_torch_check.py) compares against:
// a tiny GPT with non-trivial weights as a Hugging Face GPT-2 folder, and
// the engine's results for one batch: logits, the mean loss and every
// parameter's gradient (under the engine's names and layout).
//
//   gpt_torch_dump OUT_DIR   ->  OUT_DIR/hf/{config.json,model.safetensors}
//                                OUT_DIR/expected.safetensors
#include <cstdio>
#include <string>
#include <vector>

#include "engine/core/gpt.h"
#include "engine/core/hf_gpt2.h"
#include "engine/core/rng.h"
#include "engine/core/safetensors.h"
#include "engine/cpu/cpu_backend.h"

namespace trainyard::engine {
namespace {

int Dump(const std::string& out) {
  const GptConfig c{2, 2, 16, 8, 23};
  constexpr int64_t kBatch = 3;
  auto backend = *CpuBackend::Create({});
  auto model = *GptModel::Create(c, kBatch, backend.get());
  Rng rng(11);
  if (!model->InitializeParameters(rng).ok()) return 1;
  // Far from the initialization, so every op works in its nonlinear range.
  for (const Parameter& p : model->parameters()) {
    for (int64_t i = 0; i < p.size(); ++i) p.value[i] += rng.Uniform(-.3f, .3f);
  }
  Batch batch;
  batch.size = kBatch;
  batch.seq_len = c.seq_len;
  for (int64_t i = 0; i < kBatch * c.seq_len; ++i) {
    batch.tokens.push_back(static_cast<int32_t>(rng.Below(c.vocab_size)));
    batch.targets.push_back(static_cast<int32_t>(rng.Below(c.vocab_size)));
  }
  model->ZeroGradients();
  auto stats = model->Forward(batch);
  if (!stats.ok()) return 1;
  // The logits first: Backward writes their gradient over them.
  HostTensor logits{"logits", {kBatch * c.seq_len, c.vocab_size}, {}};
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t t = 0; t < c.seq_len; ++t) {
      const std::vector<float> row = model->Logits(b, t);
      logits.data.insert(logits.data.end(), row.begin(), row.end());
    }
  }
  model->Backward(1.0f / static_cast<float>(stats->examples));

  std::vector<HostTensor> params, expected;
  for (const Parameter& p : model->parameters()) {
    params.push_back({p.name, p.shape, {p.value, p.value + p.size()}});
    expected.push_back(
        {"grad." + p.name, p.shape, {p.grad, p.grad + p.size()}});
  }
  expected.push_back(std::move(logits));
  expected.push_back(
      {"loss", {1}, {static_cast<float>(stats->loss_sum / stats->examples)}});
  HostTensor tokens{"tokens", {kBatch, c.seq_len}, {}};
  HostTensor targets{"targets", {kBatch, c.seq_len}, {}};
  for (size_t i = 0; i < batch.tokens.size(); ++i) {
    tokens.data.push_back(static_cast<float>(batch.tokens[i]));
    targets.data.push_back(static_cast<float>(batch.targets[i]));
  }
  expected.push_back(std::move(tokens));
  expected.push_back(std::move(targets));
  if (absl::Status s = WriteHfGpt2(out + "/hf", c, params, Json()); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  if (auto s = WriteSafetensors(out + "/expected.safetensors", expected);
      !s.ok()) {
    std::fprintf(stderr, "%s\n", s.status().ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace trainyard::engine

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gpt_torch_dump OUT_DIR\n");
    return 2;
  }
  return trainyard::engine::Dump(argv[1]);
}
