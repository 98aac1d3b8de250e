// The matrix products of a GPT training step's linear layers, one by one,
// as the CUDA backend runs them in bf16 (lt_gemm.h: LinearForwardArgs,
// LinearInputGradArgs, LinearWeightGradArgs, with the bias and GELU
// epilogues the backend fuses), on random inputs: milliseconds and TFLOP/s
// of the algorithm the backend runs (cuBLASLt's heuristic's first) and of
// each other candidate the heuristic offers (LtGemm::Candidates, Choose).
// Whether timing the candidates when a product is planned would pay, and
// how far the products are from the GPU's peak: the step's total is each
// product's time times how often a step runs it. Its PyTorch peer is
// gemm_torch_bench.py (the same products through torch.nn.functional).
//
//   gemm_bench [--tokens 180224] [--d-model 768] [--vocab 50304]
//       [--layers 12] [--candidates 16] [--reps 10] [--warmup 2] [--csv FILE]
//       [--choices FILE]
//
// Then the bias gradients of the layers that have a bias, as the backend
// sums them with the weight gradient (CudaBackend::LinearBackward without
// an input gradient), each way it has (BiasGradient): the product plus
// the column-sum kernels, its default, against the product with cuBLASLt's
// BGRADB epilogue (YARD_BIAS_GRADIENT=epilogue), with how many candidates
// cuBLASLt's heuristic offers for the latter (none: the backend falls back
// to the column sums).
//
// --choices writes each product's fastest candidate as a choice line
// (LtGemm::ChoiceLine) for YARD_GEMM_CHOICES: a training job on the same
// GPU model then runs those algorithms (the step's figure with and without
// them is the test of whether they pay).
// Defaults: GPT-2 124M at micro-batch 176 of 1,024 tokens, the largest
// that fits in an H100's 80 GB (docs/BENCHMARKS.md). Each run is timed
// alone with CUDA events, and the median of --reps is kept. The products
// are allocated one at a time (the classifier's logits at the defaults:
// 18 GB). Exits 1 with one line on stderr on a bad flag or a CUDA or
// cuBLAS error.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/engine/cuda_bench_util.h"
#include "engine/core/memory_estimate.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/lt_gemm.h"

namespace {

namespace cuda = trainyard::engine::cuda;
using trainyard::bench::CudaOk;

struct Options {
  int64_t tokens = 176 * 1024, d_model = 768, vocab = 50304, layers = 12;
  int64_t candidates = 16, reps = 10, warmup = 2;
  std::string csv, choices;
};

// One product of the step: a linear layer of `in` -> `out` features, the
// pass that runs it, and how often a step does.
struct Product {
  enum class Pass { kForward, kInputGrad, kWeightGrad };
  std::string name;
  int64_t in, out;
  Pass pass;
  bool bias = false;                                      // forward only
  cuda::LtGemmArgs::Gelu gelu = cuda::LtGemmArgs::Gelu::kNone;
  int64_t per_step = 1;
};

// GPT-2's: per layer the attention's qkv and projection, the MLP's fc
// (GELU fused into the forward) and its projection (gelu' fused into its
// input gradient), each forward, input and weight gradient; then the
// classifier tied to the token embedding (no bias).
std::vector<Product> StepProducts(const Options& o) {
  using G = cuda::LtGemmArgs::Gelu;
  using P = Product::Pass;
  const int64_t c = o.d_model, l = o.layers;
  return {
      {"qkv forward", c, 3 * c, P::kForward, true, G::kNone, l},
      {"attn proj forward", c, c, P::kForward, true, G::kNone, l},
      {"fc forward + GELU", c, 4 * c, P::kForward, true, G::kApply, l},
      {"fc proj forward", 4 * c, c, P::kForward, true, G::kNone, l},
      {"classifier forward", c, o.vocab, P::kForward, false, G::kNone, 1},
      {"classifier input grad", c, o.vocab, P::kInputGrad, false, G::kNone, 1},
      {"classifier weight grad", c, o.vocab, P::kWeightGrad, false, G::kNone,
       1},
      {"fc proj input grad + gelu'", 4 * c, c, P::kInputGrad, false,
       G::kGradient, l},
      {"fc proj weight grad", 4 * c, c, P::kWeightGrad, false, G::kNone, l},
      {"fc input grad", c, 4 * c, P::kInputGrad, false, G::kNone, l},
      {"fc weight grad", c, 4 * c, P::kWeightGrad, false, G::kNone, l},
      {"attn proj input grad", c, c, P::kInputGrad, false, G::kNone, l},
      {"attn proj weight grad", c, c, P::kWeightGrad, false, G::kNone, l},
      {"qkv input grad", c, 3 * c, P::kInputGrad, false, G::kNone, l},
      {"qkv weight grad", c, 3 * c, P::kWeightGrad, false, G::kNone, l},
  };
}

// Fills n elements at `p` (bf16, or fp32 when `fp32`) with fixed-seed
// random values in [-1, 1): one host chunk copied in, then doubled on the
// device until the buffer is full.
bool Fill(void* p, int64_t n, bool fp32, uint64_t seed, std::string* error) {
  const int64_t size = fp32 ? 4 : 2;
  const int64_t chunk = std::min<int64_t>(n, int64_t{1} << 22);
  std::vector<uint16_t> half;
  std::vector<float> full;
  const void* host = nullptr;
  if (fp32) {
    trainyard::bench::Lcg random(seed);
    full.resize(static_cast<size_t>(chunk));
    for (float& v : full) v = random.Next();
    host = full.data();
  } else {
    half = trainyard::bench::RandomBf16(chunk, seed);
    host = half.data();
  }
  char* dst = static_cast<char*>(p);
  if (!CudaOk(cudaMemcpy(dst, host, static_cast<size_t>(chunk * size),
                         cudaMemcpyHostToDevice),
              "fill", error)) {
    return false;
  }
  for (int64_t done = chunk; done < n;) {
    const int64_t count = std::min(done, n - done);
    if (!CudaOk(cudaMemcpy(dst + done * size, dst,
                           static_cast<size_t>(count * size),
                           cudaMemcpyDeviceToDevice),
                "fill", error)) {
      return false;
    }
    done += count;
  }
  return true;
}

// A product's timing: the median of each candidate that ran (-1: it
// failed), and its choice line with the fastest.
struct Timing {
  std::vector<double> ms;
  int best = 0;
  std::string choice;
  cuda::LtGemm::ChoiceKey key;
};

// The product's arguments on freshly allocated, random operands (freed
// with `buffers`).
bool MakeArgs(const Options& o, const Product& p,
              trainyard::bench::DeviceBuffers* buffers, cuda::LtGemmArgs* g,
              std::string* error) {
  const int64_t t = o.tokens;
  void *x = nullptr, *w = nullptr, *y = nullptr, *bias = nullptr,
       *aux = nullptr;
  float* dw = nullptr;
  // Forward: y [t, out] = x [t, in] . w [out, in]^T. Input gradient: y is
  // dout [t, out], x is dinp [t, in]. Weight gradient: dw [out, in] fp32.
  if (!buffers->Allocate(&x, t * p.in * 2, error) ||
      !buffers->Allocate(&y, t * p.out * 2, error) ||
      !Fill(x, t * p.in, false, 1, error) ||
      !Fill(y, t * p.out, false, 2, error)) {
    return false;
  }
  if (p.pass == Product::Pass::kWeightGrad) {
    if (!buffers->Allocate(&dw, p.out * p.in * 4, error) ||
        !Fill(dw, p.out * p.in, true, 3, error)) {
      return false;
    }
    *g = cuda::LinearWeightGradArgs(dw, y, x, t, p.in, p.out, CUDA_R_16BF);
    return true;
  }
  if (!buffers->Allocate(&w, p.out * p.in * 2, error) ||
      !Fill(w, p.out * p.in, false, 4, error)) {
    return false;
  }
  if (p.gelu != cuda::LtGemmArgs::Gelu::kNone) {
    // Like the product's output: y's shape forward, x's backward.
    const int64_t n = t * (p.pass == Product::Pass::kForward ? p.out : p.in);
    if (!buffers->Allocate(&aux, n * 2, error) ||
        !Fill(aux, n, false, 5, error)) {
      return false;
    }
  }
  if (p.pass == Product::Pass::kForward) {
    *g = cuda::LinearForwardArgs(y, x, w, t, p.in, p.out, CUDA_R_16BF);
    if (p.bias) {
      if (!buffers->Allocate(&bias, p.out * 2, error) ||
          !Fill(bias, p.out, false, 6, error)) {
        return false;
      }
      g->bias = bias;
    }
  } else {
    *g = cuda::LinearInputGradArgs(x, y, w, t, p.in, p.out, CUDA_R_16BF);
  }
  g->gelu = p.gelu;
  g->gelu_aux = aux;
  return true;
}

// Times each candidate the heuristic offers for `p` (at most
// o.candidates), the first being what the backend runs.
bool TimeProduct(const Options& o, const Product& p, cuda::LtGemm* gemm,
                 trainyard::bench::EventTimer* timer, Timing* timing,
                 std::string* error) {
  trainyard::bench::DeviceBuffers buffers;
  cuda::LtGemmArgs g;
  if (!MakeArgs(o, p, &buffers, &g, error)) return false;
  const absl::StatusOr<int> count =
      gemm->Candidates(g, static_cast<int>(o.candidates));
  if (!count.ok()) {
    *error = absl::StrCat(p.name, ": ", count.status().ToString());
    return false;
  }
  for (int i = 0; i < *count; ++i) {
    std::vector<float> times;
    absl::Status status = gemm->Choose(g, i);
    for (int64_t rep = 0; status.ok() && rep < o.warmup + o.reps; ++rep) {
      float ms = 0.f;
      const bool timed = timer->Time(
          [&] {
            status = gemm->Run(g);
            return status.ok();
          },
          p.name, &ms, error);
      if (!status.ok()) break;
      if (!timed) return false;
      if (rep >= o.warmup) times.push_back(ms);
    }
    if (!status.ok()) {
      // A candidate the heuristic offered but cannot run here: reported,
      // not fatal, unless it is the backend's own.
      std::printf("  %s: candidate %d failed: %s\n", p.name.c_str(), i,
                  status.ToString().c_str());
      if (i == 0) {
        *error = absl::StrCat(p.name, ": ", status.ToString());
        return false;
      }
      timing->ms.push_back(-1);
      continue;
    }
    timing->ms.push_back(trainyard::bench::Median(times));
    if (timing->ms[i] < timing->ms[timing->best]) timing->best = i;
  }
  timing->choice = cuda::LtGemm::ChoiceLine(g, timing->best, *count);
  timing->key = cuda::LtGemm::ChoiceKeyOf(g);
  return CudaOk(cudaGetLastError(), p.name.c_str(), error);
}

// A linear layer with a bias: `in` -> `out` features, `per_step` a step.
struct BiasLayer {
  const char* name;
  int64_t in, out, per_step;
};

// The median ms of the weight and bias gradients of `layer` through a
// backend made with `way` (inputs freed after).
bool TimeWeightAndBiasGrads(const Options& o, const BiasLayer& layer,
                            trainyard::engine::BiasGradient way,
                            trainyard::bench::EventTimer* timer, double* ms,
                            std::string* error) {
  namespace engine = trainyard::engine;
  const int64_t t = o.tokens;
  const int64_t bytes = 2 * t * (layer.in + layer.out) +
                        4 * layer.out * (layer.in + 1) + (int64_t{64} << 20);
  engine::CudaBackendOptions options;
  options.arena_bytes = engine::kCudaWorkspaceBytes + bytes;
  options.activation_dtype = engine::DType::kBF16;
  options.bias_gradient = way;
  absl::StatusOr<std::unique_ptr<engine::CudaBackend>> made =
      engine::CudaBackend::Create(options);
  if (!made.ok()) {
    *error = absl::StrCat(layer.name, ": ", made.status().ToString());
    return false;
  }
  engine::CudaBackend& backend = **made;
  std::unique_ptr<engine::DeviceBuffer> buffers[4];
  const int64_t sizes[4] = {2 * t * layer.in, 2 * t * layer.out,
                            4 * layer.out * layer.in, 4 * layer.out};
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<std::unique_ptr<engine::DeviceBuffer>> b =
        backend.Allocate(sizes[i]);
    if (!b.ok()) {
      *error = absl::StrCat(layer.name, ": ", b.status().ToString());
      return false;
    }
    buffers[i] = *std::move(b);
  }
  void *inp = buffers[0]->data(), *dout = buffers[1]->data();
  float* dweight = static_cast<float*>(buffers[2]->data());
  float* dbias = static_cast<float*>(buffers[3]->data());
  if (!Fill(inp, t * layer.in, false, 1, error) ||
      !Fill(dout, t * layer.out, false, 2, error) ||
      !Fill(dweight, layer.out * layer.in, true, 3, error) ||
      !Fill(dbias, layer.out, true, 4, error)) {
    return false;
  }
  std::vector<float> times;
  for (int64_t rep = 0; rep < o.warmup + o.reps; ++rep) {
    float one = 0.f;
    if (!timer->Time(
            [&] {
              backend.LinearBackward(nullptr, dweight, dbias, dout, inp,
                                     nullptr, t, layer.in, layer.out);
              return true;
            },
            layer.name, &one, error, backend.stream())) {
      return false;
    }
    if (rep >= o.warmup) times.push_back(one);
  }
  if (absl::Status s = backend.Synchronize(); !s.ok()) {
    *error = absl::StrCat(layer.name, ": ", s.ToString());
    return false;
  }
  *ms = trainyard::bench::Median(times);
  return true;
}

// The bias gradients' section (see the top of the file): per layer, and
// their sum over a step.
bool TimeBiasGradients(const Options& o, cuda::LtGemm* gemm,
                       trainyard::bench::EventTimer* timer,
                       std::vector<std::string>* csv_rows, std::string* error) {
  using trainyard::engine::BiasGradient;
  const int64_t c = o.d_model, l = o.layers;
  const BiasLayer layers[] = {{"qkv", c, 3 * c, l},
                              {"attn proj", c, c, l},
                              {"fc", c, 4 * c, l},
                              {"fc proj", 4 * c, c, l}};
  std::printf(
      "bias gradients with the weight gradient, as the backend sums them: "
      "column sums (default) vs cuBLASLt's BGRADB epilogue\n");
  double step_sums = 0, step_epilogue = 0;
  for (const BiasLayer& layer : layers) {
    // Whether cuBLASLt has the epilogue for this product at all.
    trainyard::bench::DeviceBuffers probe;
    void *x = nullptr, *y = nullptr, *dw = nullptr, *db = nullptr;
    if (!probe.Allocate(&x, 2 * o.tokens * layer.in, error) ||
        !probe.Allocate(&y, 2 * o.tokens * layer.out, error) ||
        !probe.Allocate(&dw, 4 * layer.in * layer.out, error) ||
        !probe.Allocate(&db, 4 * layer.out, error)) {
      return false;
    }
    cuda::LtGemmArgs g =
        cuda::LinearWeightGradArgs(static_cast<float*>(dw), y, x, o.tokens,
                                   layer.in, layer.out, CUDA_R_16BF);
    g.bias_grad = db;
    const absl::StatusOr<int> offered =
        gemm->Candidates(g, static_cast<int>(o.candidates));
    if (!offered.ok() &&
        offered.status().code() != absl::StatusCode::kUnimplemented) {
      *error = absl::StrCat(layer.name, ": ", offered.status().ToString());
      return false;
    }
    double sums = 0, epilogue = 0;
    if (!TimeWeightAndBiasGrads(o, layer, BiasGradient::kColumnSums, timer,
                                &sums, error) ||
        !TimeWeightAndBiasGrads(o, layer, BiasGradient::kEpilogue, timer,
                                &epilogue, error)) {
      return false;
    }
    std::printf(
        "%-10s x%-3lld column sums %8.3f ms; epilogue %8.3f ms (%.2fx; "
        "cuBLASLt offers %d candidates)\n",
        layer.name, static_cast<long long>(layer.per_step), sums, epilogue,
        epilogue / sums, offered.ok() ? *offered : 0);
    step_sums += sums * static_cast<double>(layer.per_step);
    step_epilogue += epilogue * static_cast<double>(layer.per_step);
    for (auto [way, ms] :
         {std::pair{"column-sums", sums}, std::pair{"epilogue", epilogue}}) {
      csv_rows->push_back(
          absl::StrCat("trainyard-cuda,\"", layer.name, " weight+bias grad (",
                       way, ")\",", layer.per_step, ",", o.tokens, ",",
                       layer.in, ",", layer.out, ",0,", ms, ",0"));
    }
  }
  std::printf(
      "bias gradients a step: column sums %.2f ms, epilogue %.2f ms "
      "(%.2fx)\n",
      step_sums, step_epilogue, step_epilogue / step_sums);
  return true;
}

int Run(const Options& o, std::string* error) {
  if (o.candidates > cuda::LtGemm::kMostCandidates) {
    *error = absl::StrCat("--candidates: at most ",
                          cuda::LtGemm::kMostCandidates);
    return 1;
  }
  trainyard::bench::DeviceBuffers owned;
  void* workspace = nullptr;
  trainyard::bench::EventTimer timer;
  if (!owned.Allocate(&workspace, cuda::kLtGemmWorkspaceBytes, error) ||
      !timer.Create(error)) {
    return 1;
  }
  absl::StatusOr<std::unique_ptr<cuda::LtGemm>> gemm =
      cuda::LtGemm::Create(workspace, cuda::kLtGemmWorkspaceBytes, nullptr);
  if (!gemm.ok()) {
    *error = gemm.status().ToString();
    return 1;
  }
  std::printf(
      "GEMMs of a GPT step, bf16: %lld tokens, d_model %lld, vocab %lld, %lld "
      "layers; up to %lld candidates each, median of %lld reps\n",
      static_cast<long long>(o.tokens), static_cast<long long>(o.d_model),
      static_cast<long long>(o.vocab), static_cast<long long>(o.layers),
      static_cast<long long>(o.candidates), static_cast<long long>(o.reps));
  double step_first = 0, step_best = 0, step_flops = 0;
  std::vector<std::string> csv_rows;
  std::set<cuda::LtGemm::ChoiceKey> chosen;
  std::string choices = absl::StrCat(
      "# cuBLASLt algorithm choices (gemm_bench --choices): the fastest\n"
      "# candidate of each product, ",
      o.tokens, " tokens, d_model ", o.d_model, ", vocab ", o.vocab,
      ". For YARD_GEMM_CHOICES on the GPU model they were timed on.\n");
  for (const Product& p : StepProducts(o)) {
    Timing timing;
    if (!TimeProduct(o, p, gemm->get(), &timer, &timing, error)) {
      return 1;
    }
    const double flops = 2.0 * static_cast<double>(o.tokens) *
                         static_cast<double>(p.in) * static_cast<double>(p.out);
    const auto tflops = [&](double ms) { return flops / (ms * 1e-3) / 1e12; };
    const double first = timing.ms[0], best = timing.ms[timing.best];
    std::printf(
        "%-28s x%-3lld heuristic %8.3f ms %6.1f TFLOP/s; best of %zu: #%d "
        "%8.3f ms %6.1f TFLOP/s (%.2fx)\n",
        p.name.c_str(), static_cast<long long>(p.per_step), first,
        tflops(first), timing.ms.size(), timing.best, best, tflops(best),
        best / first);
    // A product of the same key as an earlier one (possible at some
    // shapes) runs with the earlier's choice: one line a key.
    if (chosen.insert(timing.key).second) {
      absl::StrAppend(&choices, "# ", p.name, "\n", timing.choice, "\n");
    }
    step_first += first * static_cast<double>(p.per_step);
    step_best += best * static_cast<double>(p.per_step);
    step_flops += flops * static_cast<double>(p.per_step);
    for (size_t i = 0; i < timing.ms.size(); ++i) {
      csv_rows.push_back(absl::StrCat(
          "trainyard-cuda,\"", p.name, "\",", p.per_step, ",", o.tokens, ",",
          p.in, ",", p.out, ",", i, ",", timing.ms[i], ",",
          timing.ms[i] > 0 ? tflops(timing.ms[i]) : 0.0));
    }
  }
  std::printf(
      "step total: heuristic %.2f ms (%.1f TFLOP/s), best candidates %.2f ms "
      "(%.1f TFLOP/s, %.2fx)\n",
      step_first, step_flops / (step_first * 1e-3) / 1e12, step_best,
      step_flops / (step_best * 1e-3) / 1e12, step_best / step_first);
  if (!TimeBiasGradients(o, gemm->get(), &timer, &csv_rows, error)) return 1;
  if (!o.choices.empty()) {
    if (absl::Status s = cuda::LtGemm::CheckChoices(choices); !s.ok()) {
      *error = absl::StrCat("the choices do not read back: ", s.ToString());
      return 1;
    }
    std::ofstream out(o.choices);
    out << choices;
    if (!out.good()) {
      *error = absl::StrCat(o.choices, ": cannot write");
      return 1;
    }
  }
  if (!o.csv.empty() &&
      !trainyard::bench::AppendCsv(
          o.csv, "impl,product,per_step,tokens,in,out,candidate,ms,tflops",
          csv_rows, error)) {
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string error;
  const bool parsed = trainyard::bench::ParseFlags(
      argc, argv,
      {{"--tokens", &o.tokens},
       {"--d-model", &o.d_model},
       {"--vocab", &o.vocab},
       {"--layers", &o.layers},
       {"--candidates", &o.candidates},
       {"--reps", &o.reps},
       {"--warmup", &o.warmup, true}},
      {{"--csv", &o.csv}, {"--choices", &o.choices}}, &error);
  return trainyard::bench::Main(
      "gemm_bench",
      "[--tokens N] [--d-model N] [--vocab N] [--layers N] [--candidates N] "
      "[--reps N] [--warmup N] [--csv FILE] [--choices FILE]",
      parsed, &error, [&](std::string* e) { return Run(o, e); });
}
