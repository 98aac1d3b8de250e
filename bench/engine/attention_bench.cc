// The causal attention kernels alone, as the CUDA backend runs them
// (LaunchAttentionForward / LaunchAttentionBackward: the tensor-core
// kernels for bf16 and head sizes 32, 64 and 128): milliseconds and
// TFLOP/s of the forward and the backward at one shape, on random bf16
// inputs. A fast check of a kernel change, seconds where the whole GPT
// benchmark takes minutes; its PyTorch peer at the same shapes is
// attention_torch_bench.py (scaled_dot_product_attention).
//
//   attention_bench [--batch 16] [--seq 1024] [--heads 12] [--head-size 64]
//       [--reps 20] [--warmup 3] [--csv FILE]
//
// Defaults: one GPT-2 124M layer at micro-batch 16. Each rep is timed with
// CUDA events around the one launch; the median is printed. FLOPs count the
// causal half of each T x T product (T(T+1)/2 pairs): the forward's two
// products, and the backward as 2.5x the forward (its usual accounting:
// dV, dP, dS K and dS^T Q) -- our backward computes 7 products, so the
// "executed" figure is also printed. Then the tensor-core forward and
// backward in each block tiling they have for the head size
// (attention_tc_kernels.h: AttentionTcTiling, the query side's; all give
// the same bits but for the warpgroup tiling, "wgmma", whose tensor cores
// may sum in another order), the first being the backend's default: the figures
// that choose it; then the ordered backward (AttentionTcBackward::kOrderedDq:
// one kernel a key tile, 5 products) against the two kernels, with the
// first tiling's key side ("ordered-dq") and, where it runs, the warpgroup
// tiling's ("ordered-dq wgmma"). Exits 1 with one line on stderr on a bad flag
// or a CUDA error.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/engine/cuda_bench_util.h"
#include "engine/cuda/attention_kernels.h"
#include "engine/cuda/attention_tc_kernels.h"

namespace {

using trainyard::bench::CudaOk;

struct Options {
  int64_t batch = 16, seq = 1024, heads = 12, head_size = 64;
  int64_t reps = 20, warmup = 3;
  std::string csv;
};

bool ParseFlags(int argc, char** argv, Options* o, std::string* error) {
  return trainyard::bench::ParseFlags(argc, argv,
                                      {{"--batch", &o->batch},
                                       {"--seq", &o->seq},
                                       {"--heads", &o->heads},
                                       {"--head-size", &o->head_size},
                                       {"--reps", &o->reps},
                                       {"--warmup", &o->warmup, true}},
                                      {{"--csv", &o->csv}}, error);
}

int Run(const Options& o, std::string* error) {
  namespace cuda = trainyard::engine::cuda;
  const int64_t channels = o.heads * o.head_size;
  const int64_t rows = o.batch * o.seq;
  void *qkv = nullptr, *out = nullptr, *dout = nullptr, *dqkv = nullptr;
  float *lse = nullptr, *delta = nullptr, *ordered_scratch = nullptr;
  trainyard::bench::EventTimer timer;
  trainyard::bench::DeviceBuffers owned;
  const auto alloc = [&](auto** p, int64_t bytes) {
    return owned.Allocate(p, bytes, error);
  };
  if (!alloc(&qkv, rows * 3 * channels * 2) ||
      !alloc(&out, rows * channels * 2) || !alloc(&dout, rows * channels * 2) ||
      !alloc(&dqkv, rows * 3 * channels * 2) ||
      !alloc(&lse, o.batch * o.heads * o.seq * 4) ||
      !alloc(&delta, o.batch * o.heads * o.seq * 4) ||
      !alloc(&ordered_scratch, 4 * cuda::AttentionTcBackwardScratchFloats(
                                       cuda::AttentionTcBackward::kOrderedDq,
                                       o.batch, o.seq, channels, o.heads))) {
    return 1;
  }
  const std::vector<uint16_t> host_qkv =
      trainyard::bench::RandomBf16(rows * 3 * channels, 1);
  const std::vector<uint16_t> host_dout =
      trainyard::bench::RandomBf16(rows * channels, 2);
  if (!CudaOk(cudaMemcpy(qkv, host_qkv.data(), host_qkv.size() * 2,
                         cudaMemcpyHostToDevice),
              "copy qkv", error) ||
      !CudaOk(cudaMemcpy(dout, host_dout.data(), host_dout.size() * 2,
                         cudaMemcpyHostToDevice),
              "copy dout", error) ||
      !timer.Create(error)) {
    return 1;
  }
  // The medians of o.reps timed runs (after o.warmup) of the forward and
  // the backward, each launch timed alone with CUDA events; `what` names
  // them in errors.
  const auto time_pair = [&](const std::string& what, const auto& forward,
                             const auto& backward, double* forward_ms,
                             double* backward_ms) {
    std::vector<float> fwd, bwd;
    const auto timed = [&](const auto& launch, const std::string& name,
                           float* ms) {
      return timer.Time([&] { return CudaOk(launch(), name.c_str(), error); },
                        name + " (run)", ms, error);
    };
    for (int64_t rep = 0; rep < o.warmup + o.reps; ++rep) {
      float f = 0.f, b = 0.f;
      if (!timed(forward, "attention forward" + what, &f) ||
          !timed(backward, "attention backward" + what, &b)) {
        return false;
      }
      if (rep >= o.warmup) {
        fwd.push_back(f);
        bwd.push_back(b);
      }
    }
    *forward_ms = trainyard::bench::Median(fwd);
    *backward_ms = trainyard::bench::Median(bwd);
    return true;
  };
  double f_ms = 0, b_ms = 0;
  if (!time_pair(
          "",
          [&] {
            return cuda::LaunchAttentionForward(out, lse, qkv, o.batch, o.seq,
                                                channels, o.heads, true,
                                                nullptr);
          },
          [&] {
            return cuda::LaunchAttentionBackward(dqkv, delta, dout, out, qkv,
                                                 lse, o.batch, o.seq, channels,
                                                 o.heads, true, nullptr);
          },
          &f_ms, &b_ms)) {
    return 1;
  }
  // Each tiling the head size takes, the tensor-core kernels called alone.
  struct TilingTime {
    cuda::AttentionTcTiling tiling;
    double forward_ms, backward_ms;
  };
  std::vector<TilingTime> tilings;
  for (const cuda::AttentionTcTiling& t : cuda::kAttentionTcTilings) {
    if (!cuda::AttentionTcTakesTiling(t, o.head_size)) continue;
    TilingTime time{t, 0, 0};
    if (!time_pair(
            absl::StrCat(" (tiling ", cuda::AttentionTcTilingName(t), ")"),
            [&] {
              return cuda::LaunchAttentionForwardTc(
                  t, out, lse, qkv, o.batch, o.seq, channels, o.heads, nullptr);
            },
            [&] {
              return cuda::LaunchAttentionBackwardTc(
                  t, dqkv, delta, dout, out, qkv, lse, o.batch, o.seq, channels,
                  o.heads, nullptr);
            },
            &time.forward_ms, &time.backward_ms)) {
      return 1;
    }
    tilings.push_back(time);
  }
  // The ordered backward after the same tiling's forward: its key side in
  // the first tiling, and in the warpgroup one where that runs.
  struct OrderedTime {
    const TilingTime* two_kernels;  // the same tiling's
    double forward_ms, backward_ms;
  };
  std::vector<OrderedTime> ordered;
  for (const TilingTime& t : tilings) {
    if (&t != &tilings[0] && !t.tiling.warpgroup) continue;
    OrderedTime time{&t, 0, 0};
    if (!time_pair(
            absl::StrCat(" (ordered dq, tiling ",
                         cuda::AttentionTcTilingName(t.tiling), ")"),
            [&] {
              return cuda::LaunchAttentionForwardTc(t.tiling, out, lse, qkv,
                                                    o.batch, o.seq, channels,
                                                    o.heads, nullptr);
            },
            [&] {
              return cuda::LaunchAttentionBackwardTcOrdered(
                  t.tiling, dqkv, ordered_scratch, dout, out, qkv, lse, o.batch,
                  o.seq, channels, o.heads, nullptr);
            },
            &time.forward_ms, &time.backward_ms)) {
      return 1;
    }
    ordered.push_back(time);
  }
  // One causal product: 2 FLOPs for each of T(T+1)/2 pairs and hs channels.
  const double product = 2.0 * static_cast<double>(o.batch * o.heads) *
                         static_cast<double>(o.seq) * (o.seq + 1) / 2.0 *
                         static_cast<double>(o.head_size);
  const double f_tflops = 2 * product / (f_ms * 1e-3) / 1e12;
  const double b_tflops = 5 * product / (b_ms * 1e-3) / 1e12;
  const double b_executed = 7 * product / (b_ms * 1e-3) / 1e12;
  std::printf(
      "attention bf16 B=%lld T=%lld H=%lld hs=%lld (%lld reps): forward %.3f "
      "ms (%.1f TFLOP/s), backward %.3f ms (%.1f TFLOP/s as 2.5x the "
      "forward; %.1f executed)\n",
      static_cast<long long>(o.batch), static_cast<long long>(o.seq),
      static_cast<long long>(o.heads), static_cast<long long>(o.head_size),
      static_cast<long long>(o.reps), f_ms, f_tflops, b_ms, b_tflops,
      b_executed);
  for (const TilingTime& t : tilings) {
    std::printf(
        "attention tiling %s%s: forward %.3f ms (%.1f TFLOP/s, %.2fx the "
        "first's time), backward %.3f ms (%.1f TFLOP/s, %.2fx)\n",
        cuda::AttentionTcTilingName(t.tiling).c_str(),
        &t == &tilings[0] ? " (first)" : "", t.forward_ms,
        2 * product / (t.forward_ms * 1e-3) / 1e12,
        t.forward_ms / tilings[0].forward_ms, t.backward_ms,
        5 * product / (t.backward_ms * 1e-3) / 1e12,
        t.backward_ms / tilings[0].backward_ms);
  }
  // "ordered-dq" (the first tiling's key side), "ordered-dq wgmma".
  const auto ordered_name = [&](const OrderedTime& t, const char* space) {
    return t.two_kernels == &tilings[0]
               ? std::string("ordered-dq")
               : absl::StrCat(
                     "ordered-dq", space,
                     cuda::AttentionTcTilingName(t.two_kernels->tiling));
  };
  for (const OrderedTime& t : ordered) {
    std::printf(
        "attention backward %s: %.3f ms (%.1f TFLOP/s; it executes the 5 "
        "products counted), %.2fx the two kernels' time (tiling %s)\n",
        ordered_name(t, " ").c_str(), t.backward_ms,
        5 * product / (t.backward_ms * 1e-3) / 1e12,
        t.backward_ms / t.two_kernels->backward_ms,
        cuda::AttentionTcTilingName(t.two_kernels->tiling).c_str());
  }
  if (!o.csv.empty()) {
    // One row: an implementation's forward and backward times, with TFLOP/s
    // counted as the lines above count them.
    const auto row = [&](const std::string& impl, double forward_ms,
                         double backward_ms) {
      return absl::StrCat(impl, ",", o.batch, ",", o.seq, ",", o.heads, ",",
                          o.head_size, ",", o.reps, ",", forward_ms, ",",
                          2 * product / (forward_ms * 1e-3) / 1e12, ",",
                          backward_ms, ",",
                          5 * product / (backward_ms * 1e-3) / 1e12);
    };
    std::vector<std::string> rows_out = {row("trainyard-cuda", f_ms, b_ms)};
    for (const TilingTime& t : tilings) {
      rows_out.push_back(
          row(absl::StrCat("trainyard-cuda-tiling-",
                           cuda::AttentionTcTilingName(t.tiling)),
              t.forward_ms, t.backward_ms));
    }
    for (const OrderedTime& t : ordered) {
      rows_out.push_back(
          row(absl::StrCat("trainyard-cuda-", ordered_name(t, "-")),
              t.forward_ms, t.backward_ms));
    }
    if (!trainyard::bench::AppendCsv(
            o.csv,
            "impl,batch,seq,heads,head_size,reps,forward_ms,forward_tflops,"
            "backward_ms,backward_tflops",
            rows_out, error)) {
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string error;
  const bool parsed = ParseFlags(argc, argv, &o, &error);
  return trainyard::bench::Main(
      "attention_bench",
      "[--batch N] [--seq N] [--heads N] [--head-size 32|64|128] [--reps N] "
      "[--warmup N] [--csv FILE]",
      parsed, &error, [&](std::string* e) { return Run(o, e); });
}
