// Training throughput of a small GPT on the CPU backend: tokens per second
// of forward + backward + AdamW (with gradient clipping), after warm-up
// steps, on random tokens. Prints one JSON line so the PyTorch peer
// (gpt_torch_bench.py) can be compared field for field.
//
//   gpt_cpu_bench [--threads 2] [--steps 20] [--warmup 3] [--n_layer 4]
//                 [--n_head 4] [--d_model 128] [--seq_len 64]
//                 [--vocab_size 65] [--batch 16]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "engine/core/adamw.h"
#include "engine/core/gpt.h"
#include "engine/core/rng.h"
#include "engine/cpu/cpu_backend.h"

namespace trainyard::engine {
namespace {

struct Options {
  int threads = 2;
  int64_t steps = 20, warmup = 3, batch = 16;
  GptConfig gpt{4, 4, 128, 64, 65};
};

bool Parse(int argc, char** argv, Options* o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    int64_t v = 0;
    if (!absl::SimpleAtoi(argv[i + 1], &v) || v < 1) return false;
    if (flag == "--threads")
      o->threads = static_cast<int>(v);
    else if (flag == "--steps")
      o->steps = v;
    else if (flag == "--warmup")
      o->warmup = v;
    else if (flag == "--batch")
      o->batch = v;
    else if (flag == "--n_layer")
      o->gpt.n_layer = v;
    else if (flag == "--n_head")
      o->gpt.n_head = v;
    else if (flag == "--d_model")
      o->gpt.d_model = v;
    else if (flag == "--seq_len")
      o->gpt.seq_len = v;
    else if (flag == "--vocab_size")
      o->gpt.vocab_size = v;
    else
      return false;
  }
  return argc % 2 == 1;
}

int Run(const Options& o) {
  CpuBackendOptions bo;
  bo.threads = o.threads;
  auto backend = CpuBackend::Create(bo);
  if (!backend.ok())
    return std::fprintf(stderr, "%s\n", backend.status().ToString().c_str()), 1;
  auto model = GptModel::Create(o.gpt, o.batch, backend->get());
  if (!model.ok())
    return std::fprintf(stderr, "%s\n", model.status().ToString().c_str()), 1;
  AdamWConfig ac;
  ac.weight_decay = 0.1;
  auto opt = AdamW::Create(ac, &(*model)->parameters(), backend->get());
  Rng rng(1);
  if (!(*model)->InitializeParameters(rng).ok() || !opt.ok()) return 1;
  Batch batch;
  batch.size = o.batch;
  batch.seq_len = o.gpt.seq_len;
  for (int64_t i = 0; i < o.batch * o.gpt.seq_len; ++i) {
    batch.tokens.push_back(static_cast<int32_t>(rng.Below(o.gpt.vocab_size)));
    batch.targets.push_back(static_cast<int32_t>(rng.Below(o.gpt.vocab_size)));
  }
  using Clock = std::chrono::steady_clock;
  Clock::time_point start;
  double loss = 0;
  for (int64_t step = 0; step < o.warmup + o.steps; ++step) {
    if (step == o.warmup) start = Clock::now();
    (*model)->ZeroGradients();
    auto stats = (*model)->Forward(batch);
    if (!stats.ok()) return 1;
    loss = stats->loss_sum / stats->examples;
    (*model)->Backward(1.0f / static_cast<float>(stats->examples));
    if (!(*opt)->Step(1e-3).ok()) return 1;
  }
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  const double tokens = static_cast<double>(o.steps * o.batch * o.gpt.seq_len);
  std::printf(
      "{\"impl\": \"trainyard-cpu\", \"threads\": %d, \"n_layer\": %ld, "
      "\"n_head\": %ld, \"d_model\": %ld, \"seq_len\": %ld, \"vocab_size\": "
      "%ld, \"batch\": %ld, \"steps\": %ld, \"parameters\": %ld, "
      "\"seconds\": %.3f, \"tokens_per_second\": %.1f, \"last_loss\": %.4f}\n",
      o.threads, o.gpt.n_layer, o.gpt.n_head, o.gpt.d_model, o.gpt.seq_len,
      o.gpt.vocab_size, o.batch, o.steps, (*model)->num_parameters(), seconds,
      tokens / seconds, loss);
  return 0;
}

}  // namespace
}  // namespace trainyard::engine

int main(int argc, char** argv) {
  trainyard::engine::Options o;
  if (!trainyard::engine::Parse(argc, argv, &o)) {
    std::fprintf(stderr,
                 "usage: gpt_cpu_bench [--threads N] [--steps N] [--warmup N] "
                 "[--n_layer N] [--n_head N] [--d_model N] [--seq_len N] "
                 "[--vocab_size N] [--batch N]\n");
    return 2;
  }
  return trainyard::engine::Run(o);
}
