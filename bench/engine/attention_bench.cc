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
// the same bits), the first being the backend's default: the figures that
// choose it. Exits 1 with one line on stderr on a bad flag or a CUDA
// error.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/core/bf16.h"
#include "engine/cuda/attention_kernels.h"
#include "engine/cuda/attention_tc_kernels.h"

namespace {

struct Options {
  int64_t batch = 16, seq = 1024, heads = 12, head_size = 64;
  int64_t reps = 20, warmup = 3;
  std::string csv;
};

bool ParseFlags(int argc, char** argv, Options* o, std::string* error) {
  if (argc % 2 != 1) {
    *error = "every flag takes one value";
    return false;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    int64_t n = 0;
    const bool positive = absl::SimpleAtoi(value, &n) && n > 0;
    int64_t* field = flag == "--batch"       ? &o->batch
                     : flag == "--seq"       ? &o->seq
                     : flag == "--heads"     ? &o->heads
                     : flag == "--head-size" ? &o->head_size
                     : flag == "--reps"      ? &o->reps
                     : flag == "--warmup"    ? &o->warmup
                                             : nullptr;
    if (flag == "--csv" && !value.empty()) {
      o->csv = value;
    } else if (field != nullptr &&
               (positive || (flag == "--warmup" && value == "0"))) {
      *field = positive ? n : 0;
    } else {
      *error = absl::StrCat("bad flag or value: ", flag, " ", value);
      return false;
    }
  }
  return true;
}

bool Check(cudaError_t e, const char* what, std::string* error) {
  if (e == cudaSuccess) return true;
  *error = absl::StrCat(what, ": ", cudaGetErrorString(e));
  return false;
}

// Random bf16 in [-1, 1) from a fixed-seed LCG: the same inputs every run.
std::vector<uint16_t> RandomBf16(int64_t n, uint64_t seed) {
  std::vector<uint16_t> v(static_cast<size_t>(n));
  uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (auto& e : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const float u = static_cast<float>(x >> 40) / static_cast<float>(1 << 24);
    e = trainyard::engine::FloatToBf16(2.f * u - 1.f);
  }
  return v;
}

double Median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2]
                           : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2.0;
}

int Run(const Options& o, std::string* error) {
  namespace cuda = trainyard::engine::cuda;
  const int64_t channels = o.heads * o.head_size;
  const int64_t rows = o.batch * o.seq;
  void *qkv = nullptr, *out = nullptr, *dout = nullptr, *dqkv = nullptr;
  float *lse = nullptr, *delta = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  // Freed at every exit below.
  struct Buffers {
    std::vector<void*> p;
    ~Buffers() {
      for (void* q : p) cudaFree(q);
    }
  } owned;
  const auto alloc = [&](void** p, int64_t bytes) {
    if (!Check(cudaMalloc(p, static_cast<size_t>(bytes)), "cudaMalloc",
               error)) {
      return false;
    }
    owned.p.push_back(*p);
    return true;
  };
  if (!alloc(&qkv, rows * 3 * channels * 2) ||
      !alloc(&out, rows * channels * 2) || !alloc(&dout, rows * channels * 2) ||
      !alloc(&dqkv, rows * 3 * channels * 2) ||
      !alloc(reinterpret_cast<void**>(&lse), o.batch * o.heads * o.seq * 4) ||
      !alloc(reinterpret_cast<void**>(&delta), o.batch * o.heads * o.seq * 4)) {
    return 1;
  }
  const std::vector<uint16_t> host_qkv = RandomBf16(rows * 3 * channels, 1);
  const std::vector<uint16_t> host_dout = RandomBf16(rows * channels, 2);
  if (!Check(cudaMemcpy(qkv, host_qkv.data(), host_qkv.size() * 2,
                        cudaMemcpyHostToDevice),
             "copy qkv", error) ||
      !Check(cudaMemcpy(dout, host_dout.data(), host_dout.size() * 2,
                        cudaMemcpyHostToDevice),
             "copy dout", error) ||
      !Check(cudaEventCreate(&start), "cudaEventCreate", error) ||
      !Check(cudaEventCreate(&stop), "cudaEventCreate", error)) {
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
      return Check(cudaEventRecord(start), "cudaEventRecord", error) &&
             Check(launch(), name.c_str(), error) &&
             Check(cudaEventRecord(stop), "cudaEventRecord", error) &&
             Check(cudaEventSynchronize(stop), (name + " (run)").c_str(),
                   error) &&
             Check(cudaEventElapsedTime(ms, start, stop), "elapsed", error);
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
    *forward_ms = Median(fwd);
    *backward_ms = Median(bwd);
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
            absl::StrCat(" (tiling ", t.warp_rows, "x", t.warps, ")"),
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
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
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
        "attention tiling %dx%d%s: forward %.3f ms (%.1f TFLOP/s, %.2fx the "
        "first's time), backward %.3f ms (%.1f TFLOP/s, %.2fx)\n",
        t.tiling.warp_rows, t.tiling.warps, &t == &tilings[0] ? " (first)" : "",
        t.forward_ms, 2 * product / (t.forward_ms * 1e-3) / 1e12,
        t.forward_ms / tilings[0].forward_ms, t.backward_ms,
        5 * product / (t.backward_ms * 1e-3) / 1e12,
        t.backward_ms / tilings[0].backward_ms);
  }
  if (!o.csv.empty()) {
    std::ifstream existing(o.csv);
    const bool header = !existing.good() || existing.peek() == EOF;
    std::ofstream csv(o.csv, std::ios::app);
    if (header) {
      csv << "impl,batch,seq,heads,head_size,reps,forward_ms,forward_tflops,"
             "backward_ms,backward_tflops\n";
    }
    csv << "trainyard-cuda," << o.batch << "," << o.seq << "," << o.heads << ","
        << o.head_size << "," << o.reps << "," << f_ms << "," << f_tflops << ","
        << b_ms << "," << b_tflops << "\n";
    for (const TilingTime& t : tilings) {
      csv << "trainyard-cuda-tiling-" << t.tiling.warp_rows << "x"
          << t.tiling.warps << "," << o.batch << "," << o.seq << "," << o.heads
          << "," << o.head_size << "," << o.reps << "," << t.forward_ms << ","
          << 2 * product / (t.forward_ms * 1e-3) / 1e12 << "," << t.backward_ms
          << "," << 5 * product / (t.backward_ms * 1e-3) / 1e12 << "\n";
    }
    if (!csv) {
      *error = absl::StrCat(o.csv, ": cannot write");
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string error;
  if (!ParseFlags(argc, argv, &o, &error)) {
    std::fprintf(stderr,
                 "attention_bench: %s\nusage: attention_bench [--batch N] "
                 "[--seq N] [--heads N] [--head-size 32|64|128] [--reps N] "
                 "[--warmup N] [--csv FILE]\n",
                 error.c_str());
    return 1;
  }
  const int rc = Run(o, &error);
  if (rc != 0) std::fprintf(stderr, "attention_bench: %s\n", error.c_str());
  return rc;
}
