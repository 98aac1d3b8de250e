// The tensor-core attention kernels (attention_tc_kernels.h) against the
// fp32-math reference kernels (attention_kernels.h) on fresh random bf16
// inputs, over head sizes 32, 64 and 128 and sequence lengths that do and
// do not fill whole 64-row tiles; that each repeats bit for bit; that the
// dispatching launchers pick them for bf16; and that no kernel writes
// outside its outputs (guard zones) or leaves one unwritten (outputs are
// poisoned with NaN first). The launch-argument checks run anywhere; the
// rest skips without a GPU.
//
// Tolerances, per element, computed on the host in double from the same
// bf16 inputs. u = 2^-8 is bf16's unit roundoff. The two implementations
// differ in:
//  - bf16 rounding of P before P V (forward) and P^T dout (dV), and of dS
//    before dS K (dQ) and dS^T Q (dK): relative error <= u per term, so
//    <= u * sum |term| per output;
//  - fp32 summation order: a sum of n terms is within 2 gamma_n sum |term|
//    of exact (cuda_test_support.h); we allow twice that per
//    implementation (SumSlack) in case tensor cores truncate rather than
//    round, for scores (n = hs) and for the sums over keys or queries
//    (n = T);
//  - hence each probability p differs relatively by r_p <= the score's
//    error plus kFp32Slack (expf's 2 ulp, the roundings of the exponent
//    and of the forward's rescaling: tens of fp32 ulps, far below u).
// Each output's bound sums these over its terms, times 1.25 for the
// second-order products dropped; both then round to bf16, which adds
// 2u |want| (one bf16 ulp). The backward kernels get the same inputs (the
// reference forward's out and lse), so their bounds need no forward error.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/bf16.h"
#include "engine/cpu/test_inputs.h"
#include "engine/cuda/attention_kernels.h"
#include "engine/cuda/attention_tc_kernels.h"
#include "engine/cuda/cuda_test_support.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

using cuda_test::ExpectWithin;
using cuda_test::Gamma;

constexpr double kU = 0x1p-8;        // bf16 unit roundoff
constexpr double kFp32Slack = 1e-5;  // relative, per probability
constexpr int64_t kGuard = 64;       // guard elements each side
constexpr unsigned char kGuardByte = 0xA5;
constexpr unsigned char kNaNByte = 0xFF;  // 0xFFFF.. is NaN in bf16 and fp32

double SumSlack(int64_t n) { return 4 * Gamma(n); }

void ExpectCuda(cudaError_t e, const char* what) {
  EXPECT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e);
}

// n values of T on the device between two guard zones of kGuard elements
// filled with kGuardByte (so the data stays 128-byte aligned), or with the
// leading zone `offset` elements longer (to misalign the data).
template <typename T>
class GuardedArray {
 public:
  explicit GuardedArray(int64_t n, int64_t offset = 0)
      : n_(n), lead_(kGuard + offset) {
    const size_t bytes = (n + lead_ + kGuard) * sizeof(T);
    void* base = nullptr;
    ExpectCuda(cudaMalloc(&base, bytes), "cudaMalloc");
    base_ = static_cast<T*>(base);
    ExpectCuda(cudaMemset(base_, kGuardByte, bytes), "cudaMemset");
  }
  ~GuardedArray() { cudaFree(base_); }
  GuardedArray(const GuardedArray&) = delete;
  GuardedArray& operator=(const GuardedArray&) = delete;

  T* get() const { return base_ + lead_; }
  void Upload(const std::vector<T>& host) {
    ASSERT_EQ(static_cast<int64_t>(host.size()), n_);
    ExpectCuda(
        cudaMemcpy(get(), host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice),
        "upload");
  }
  void Poison() {
    ExpectCuda(cudaMemset(get(), kNaNByte, n_ * sizeof(T)), "poison");
  }
  std::vector<T> Download() const {
    std::vector<T> host(n_);
    ExpectCuda(
        cudaMemcpy(host.data(), get(), n_ * sizeof(T), cudaMemcpyDeviceToHost),
        "download");
    return host;
  }
  bool GuardsIntact() const {
    std::vector<unsigned char> all((n_ + lead_ + kGuard) * sizeof(T));
    ExpectCuda(
        cudaMemcpy(all.data(), base_, all.size(), cudaMemcpyDeviceToHost),
        "download guards");
    const size_t lead = lead_ * sizeof(T), zone = kGuard * sizeof(T);
    for (size_t b = 0; b < all.size(); ++b) {
      const bool in_guard = b < lead || b >= all.size() - zone;
      if (in_guard && all[b] != kGuardByte) return false;
    }
    return true;
  }

 private:
  int64_t n_;
  int64_t lead_;  // elements before the data
  T* base_ = nullptr;
};

using Bf16Array = GuardedArray<uint16_t>;
using FloatArray = GuardedArray<float>;

std::vector<float> Widen(const std::vector<uint16_t>& x) {
  std::vector<float> out(x.size());
  Bf16ToFloats(x.data(), static_cast<int64_t>(x.size()), out.data());
  return out;
}

std::vector<uint16_t> RandomBf16(int64_t n, uint64_t seed) {
  const std::vector<float> x = Random(n, seed);
  std::vector<uint16_t> out(x.size());
  FloatsToBf16(x.data(), n, out.data());
  return out;
}

// The index of the first byte where a and b differ, or -1.
template <typename T>
int64_t FirstDifference(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return 0;
  const auto* pa = reinterpret_cast<const unsigned char*>(a.data());
  const auto* pb = reinterpret_cast<const unsigned char*>(b.data());
  for (size_t i = 0; i < a.size() * sizeof(T); ++i) {
    if (pa[i] != pb[i]) return static_cast<int64_t>(i);
  }
  return -1;
}

struct Shape {
  int64_t batch, seq, heads, head_size;
  int64_t channels() const { return heads * head_size; }
  int64_t qkv_size() const { return batch * seq * 3 * channels(); }
  int64_t act_size() const { return batch * seq * channels(); }
  int64_t stat_size() const { return batch * heads * seq; }
};

void PrintTo(const Shape& s, std::ostream* os) {
  *os << "B=" << s.batch << " T=" << s.seq << " NH=" << s.heads
      << " hs=" << s.head_size;
}

// One (sequence, head) pair's rows, as fp32 views of the bf16 tensors.
struct HostHead {
  const Shape& s;
  const std::vector<float>& qkv;
  const std::vector<float>& dout;
  const std::vector<float>& out;
  int64_t b, h;
  float Qkv(int64_t t, int part, int64_t d) const {
    const int64_t C = s.channels();
    return qkv[(b * s.seq + t) * 3 * C + part * C + h * s.head_size + d];
  }
  float Act(const std::vector<float>& x, int64_t t, int64_t d) const {
    return x[(b * s.seq + t) * s.channels() + h * s.head_size + d];
  }
  int64_t ActIndex(int64_t t, int64_t d) const {
    return (b * s.seq + t) * s.channels() + h * s.head_size + d;
  }
  int64_t QkvIndex(int64_t t, int part, int64_t d) const {
    const int64_t C = s.channels();
    return (b * s.seq + t) * 3 * C + part * C + h * s.head_size + d;
  }
};

struct Scores {
  std::vector<double> s;    // scaled scores q_i . k_j / sqrt(hs), j <= i
  std::vector<double> err;  // bound on their fp32 error (SumSlack)
};

Scores RowScores(const HostHead& x, int64_t i) {
  const int64_t hs = x.s.head_size;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  Scores r{std::vector<double>(i + 1), std::vector<double>(i + 1)};
  for (int64_t j = 0; j <= i; ++j) {
    double dot = 0, mag = 0;
    for (int64_t d = 0; d < hs; ++d) {
      const double t = static_cast<double>(x.Qkv(i, 0, d)) * x.Qkv(j, 1, d);
      dot += t;
      mag += std::abs(t);
    }
    r.s[j] = dot * scale;
    r.err[j] = SumSlack(hs) * mag * scale;
  }
  return r;
}

double RelativeProbabilityError(double score_err) {
  return 1.01 * score_err + kFp32Slack;
}

// Bounds for out and lse of one head (see the file comment).
void ForwardBounds(const HostHead& x, const std::vector<float>& want_lse,
                   std::vector<double>* out_tol, std::vector<double>* lse_tol) {
  const int64_t T = x.s.seq, hs = x.s.head_size;
  for (int64_t i = 0; i < T; ++i) {
    const Scores sc = RowScores(x, i);
    double max = sc.s[0];
    for (double v : sc.s) max = std::max(max, v);
    double l = 0, max_rp = 0;
    for (int64_t j = 0; j <= i; ++j) l += std::exp(sc.s[j] - max);
    std::vector<double> err(hs, 0.0);
    for (int64_t j = 0; j <= i; ++j) {
      const double p = std::exp(sc.s[j] - max) / l;
      const double rp = RelativeProbabilityError(sc.err[j]);
      max_rp = std::max(max_rp, rp);
      for (int64_t d = 0; d < hs; ++d) {
        const double term = p * std::abs(x.Qkv(j, 2, d));
        err[d] += term * (kU + 2 * rp + 2 * SumSlack(T));
      }
    }
    for (int64_t d = 0; d < hs; ++d) {
      const double want = x.Act(x.out, i, d);
      (*out_tol)[x.ActIndex(i, d)] =
          1.25 * err[d] + 2 * kU * std::abs(want) + 1e-6;
    }
    const int64_t at = (x.b * x.s.heads + x.h) * T + i;
    (*lse_tol)[at] = 1.25 * (max_rp + SumSlack(T)) +
                     4 * 0x1p-24 * std::abs(want_lse[at]) + 1e-6;
  }
}

// Per-(query, key) backward terms, as both kernels compute them from the
// given lse: p, dS = p (dP - D), and the bound on dS's fp32 difference.
struct PairGradient {
  double p, ds, ds_err;
};

PairGradient PairTerms(const HostHead& x, const Scores& sc, int64_t i,
                       int64_t j, double lse_i, double delta_i,
                       double delta_err) {
  double dp = 0, dp_mag = 0;
  for (int64_t d = 0; d < x.s.head_size; ++d) {
    const double t = static_cast<double>(x.Act(x.dout, i, d)) * x.Qkv(j, 2, d);
    dp += t;
    dp_mag += std::abs(t);
  }
  const double p = std::exp(sc.s[j] - lse_i);
  const double rp = RelativeProbabilityError(sc.err[j]);
  const double diff_err = SumSlack(x.s.head_size) * dp_mag + delta_err;
  return {p, p * (dp - delta_i),
          p * (rp * std::abs(dp - delta_i) + (1 + rp) * diff_err)};
}

// Bounds for dq, dk, dv of one head (see the file comment).
void BackwardBounds(const HostHead& x, const std::vector<float>& lse,
                    const std::vector<float>& want, std::vector<double>* tol) {
  const int64_t T = x.s.seq, hs = x.s.head_size;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  // err[part][t * hs + d]: the bound on dq, dk, dv before bf16 rounding.
  std::vector<std::vector<double>> err(3, std::vector<double>(T * hs, 0.0));
  for (int64_t i = 0; i < T; ++i) {
    double delta = 0, delta_mag = 0;
    for (int64_t d = 0; d < hs; ++d) {
      const double t =
          static_cast<double>(x.Act(x.dout, i, d)) * x.Act(x.out, i, d);
      delta += t;
      delta_mag += std::abs(t);
    }
    const Scores sc = RowScores(x, i);
    const double lse_i = lse[(x.b * x.s.heads + x.h) * T + i];
    for (int64_t j = 0; j <= i; ++j) {
      const PairGradient g =
          PairTerms(x, sc, i, j, lse_i, delta, SumSlack(hs) * delta_mag);
      const double ds_term = g.ds_err + kU * (std::abs(g.ds) + g.ds_err) +
                             SumSlack(T) * std::abs(g.ds);
      const double rp = RelativeProbabilityError(sc.err[j]);
      const double p_term = g.p * (rp + kU * (1 + rp) + SumSlack(T));
      for (int64_t d = 0; d < hs; ++d) {
        err[0][i * hs + d] += scale * ds_term * std::abs(x.Qkv(j, 1, d));
        err[1][j * hs + d] += scale * ds_term * std::abs(x.Qkv(i, 0, d));
        err[2][j * hs + d] += p_term * std::abs(x.Act(x.dout, i, d));
      }
    }
  }
  for (int part = 0; part < 3; ++part) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t d = 0; d < hs; ++d) {
        const int64_t at = x.QkvIndex(t, part, d);
        (*tol)[at] =
            1.25 * err[part][t * hs + d] + 2 * kU * std::abs(want[at]) + 1e-6;
      }
    }
  }
}

// The launch-argument checks need no device: they fail before any launch.
TEST(AttentionTcLaunchTest, TakesHeadSizes32To128InPowersOfTwo) {
  EXPECT_TRUE(cuda::AttentionTcSupportsHeadSize(32));
  EXPECT_TRUE(cuda::AttentionTcSupportsHeadSize(64));
  EXPECT_TRUE(cuda::AttentionTcSupportsHeadSize(128));
  EXPECT_FALSE(cuda::AttentionTcSupportsHeadSize(16));
  EXPECT_FALSE(cuda::AttentionTcSupportsHeadSize(48));
  EXPECT_FALSE(cuda::AttentionTcSupportsHeadSize(256));
}

TEST(AttentionTcLaunchTest, RejectsShapesItDoesNotTake) {
  // {channels, heads}: head size 48, 256, 1; heads not splitting channels;
  // no heads.
  const int64_t bad[][2] = {{96, 2}, {512, 2}, {4, 4}, {100, 3}, {64, 0}};
  for (const auto& [C, NH] : bad) {
    EXPECT_EQ(cuda::LaunchAttentionForwardTc(nullptr, nullptr, nullptr, 2, 16,
                                             C, NH, nullptr),
              cudaErrorInvalidValue)
        << "C=" << C << " NH=" << NH;
    EXPECT_EQ(cuda::LaunchAttentionBackwardTc(nullptr, nullptr, nullptr,
                                              nullptr, nullptr, nullptr, 2, 16,
                                              C, NH, nullptr),
              cudaErrorInvalidValue)
        << "C=" << C << " NH=" << NH;
    EXPECT_EQ(cuda::LaunchAttentionBackwardTcOrdered(nullptr, nullptr, nullptr,
                                                     nullptr, nullptr, nullptr,
                                                     2, 16, C, NH, nullptr),
              cudaErrorInvalidValue)
        << "C=" << C << " NH=" << NH;
  }
}

// The ordered backward's scratch: delta, the turns (no more than the rows)
// and the fp32 sums, 16-byte aligned regions; a scratch that is not
// aligned is refused.
TEST(AttentionTcLaunchTest, OrderedBackwardScratchHoldsTheDqSums) {
  using cuda::AttentionTcBackward;
  EXPECT_EQ(cuda::AttentionTcBackwardScratchFloats(
                AttentionTcBackward::kTwoKernels, 2, 100, 128, 2),
            2 * 2 * 100);
  EXPECT_EQ(cuda::AttentionTcBackwardScratchFloats(
                AttentionTcBackward::kOrderedDq, 2, 100, 128, 2),
            2 * 400 + 2 * 100 * 128);
  EXPECT_EQ(cuda::AttentionTcBackwardScratchFloats(
                AttentionTcBackward::kOrderedDq, 1, 3, 64, 1),
            2 * 4 + 3 * 64);
  alignas(16) static float scratch[8];
  alignas(16) static uint16_t buffer[8];
  EXPECT_EQ(cuda::LaunchAttentionBackwardTcOrdered(buffer, scratch + 1, buffer,
                                                   buffer, buffer, scratch, 1,
                                                   1, 64, 1, nullptr),
            cudaErrorInvalidValue);
}

TEST(AttentionTcLaunchTest, TakesItsTilingsAndNoOthers) {
  // The first tiling is the default one and takes every head size; 32-row
  // warps take up to 64 channels.
  EXPECT_EQ(cuda::kAttentionTcTilings[0].warp_rows, 16);
  EXPECT_EQ(cuda::kAttentionTcTilings[0].warps, 4);
  EXPECT_FALSE(cuda::kAttentionTcTilings[0].warpgroup);
  EXPECT_FALSE(cuda::kAttentionTcTilings[0].swizzled);
  for (int64_t hs : {32, 64, 128}) {
    for (const cuda::AttentionTcTiling& t : cuda::kAttentionTcTilings) {
      EXPECT_EQ(cuda::AttentionTcTakesTiling(t, hs),
                (t.warp_rows == 16 || hs <= 64) &&
                    (!t.warpgroup || cuda::AttentionTcWarpgroupBuilt()) &&
                    (!t.warpgroup || !t.swizzled || hs <= 64))
          << t.warp_rows << "x" << t.warps << " hs=" << hs;
    }
  }
#if defined(TRAINYARD_CUDA_EMULATION)
  EXPECT_TRUE(cuda::AttentionTcWarpgroupBuilt());
#endif
  EXPECT_FALSE(cuda::AttentionTcTakesTiling({32, 4}, 48));
  EXPECT_FALSE(cuda::AttentionTcTakesTiling({16, 4, true}, 48));
  EXPECT_FALSE(cuda::AttentionTcTakesTiling({16, 4, false, true}, 48));
  // Not tilings the kernels have, at any head size; the launchers refuse
  // them and a 32-row warp at 128 channels before touching any buffer.
  const cuda::AttentionTcTiling bad[] = {
      {16, 2},
      {8, 4},
      {32, 8},
      {64, 1},
      {0, 0},
      {-16, 4},
      {32, 4, true},
      {32, 2, true},
      {16, 2, true},
      {64, 1, true},
      {32, 8, true},
      {8, 8, true},
      // Only the 16-row tilings have the swizzled layout.
      {32, 4, false, true},
      {32, 2, false, true},
      {32, 4, true, true}};
  for (const cuda::AttentionTcTiling& t : bad) {
    for (int64_t hs : {32, 64, 128}) {
      EXPECT_FALSE(cuda::AttentionTcTakesTiling(t, hs))
          << t.warp_rows << "x" << t.warps << " hs=" << hs;
    }
    EXPECT_EQ(cuda::LaunchAttentionForwardTc(t, nullptr, nullptr, nullptr, 2,
                                             16, 128, 2, nullptr),
              cudaErrorInvalidValue)
        << t.warp_rows << "x" << t.warps;
    EXPECT_EQ(cuda::LaunchAttentionBackwardTc(t, nullptr, nullptr, nullptr,
                                              nullptr, nullptr, nullptr, 2, 16,
                                              128, 2, nullptr),
              cudaErrorInvalidValue)
        << t.warp_rows << "x" << t.warps;
  }
  EXPECT_EQ(cuda::LaunchAttentionForwardTc({32, 4}, nullptr, nullptr, nullptr,
                                           2, 16, 256, 2, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::LaunchAttentionBackwardTc({32, 4}, nullptr, nullptr, nullptr,
                                            nullptr, nullptr, nullptr, 2, 16,
                                            256, 2, nullptr),
            cudaErrorInvalidValue);
}

TEST(AttentionTcLaunchTest, EmptyBatchOrSequenceLaunchesNothing) {
  EXPECT_EQ(cuda::LaunchAttentionForwardTc(nullptr, nullptr, nullptr, 0, 16,
                                           128, 2, nullptr),
            cudaSuccess);
  EXPECT_EQ(
      cuda::LaunchAttentionBackwardTc(nullptr, nullptr, nullptr, nullptr,
                                      nullptr, nullptr, 2, 0, 128, 2, nullptr),
      cudaSuccess);
  EXPECT_EQ(cuda::LaunchAttentionBackwardTcOrdered(nullptr, nullptr, nullptr,
                                                   nullptr, nullptr, nullptr, 0,
                                                   16, 128, 2, nullptr),
            cudaSuccess);
}

// Device buffers for one shape: inputs from seeds (`offset` elements past
// an aligned address), outputs poisoned.
struct Problem {
  explicit Problem(const Shape& s, int64_t offset = 0)
      : shape(s),
        qkv_host(RandomBf16(s.qkv_size(), 100 + s.seq)),
        dout_host(RandomBf16(s.act_size(), 200 + s.seq)),
        qkv(s.qkv_size(), offset),
        dout(s.act_size(), offset) {
    qkv.Upload(qkv_host);
    dout.Upload(dout_host);
  }
  Shape shape;
  std::vector<uint16_t> qkv_host, dout_host;
  Bf16Array qkv, dout;
};

// out and lse from one forward launcher into poisoned buffers.
struct ForwardResult {
  std::vector<uint16_t> out;
  std::vector<float> lse;
};

// kOrdered: the tensor-core backward with AttentionTcBackward::kOrderedDq
// (the forward is kTensorCore's); kDispatchOrdered: the dispatching
// launcher asked for it.
enum class Kernels {
  kReference,
  kTensorCore,
  kDispatch,
  kOrdered,
  kDispatchOrdered
};

// `tiling` is the tensor-core forward's (kTensorCore only).
ForwardResult RunForward(Problem& pb, Kernels which,
                         cuda::AttentionTcTiling tiling = {}) {
  const Shape& s = pb.shape;
  Bf16Array out(s.act_size());
  FloatArray lse(s.stat_size());
  out.Poison();
  lse.Poison();
  const int64_t C = s.channels();
  cudaError_t e;
  if (which == Kernels::kReference) {
    e = cuda::LaunchAttentionForwardReference(out.get(), lse.get(),
                                              pb.qkv.get(), s.batch, s.seq, C,
                                              s.heads, true, nullptr);
  } else if (which == Kernels::kTensorCore) {
    e = cuda::LaunchAttentionForwardTc(tiling, out.get(), lse.get(),
                                       pb.qkv.get(), s.batch, s.seq, C, s.heads,
                                       nullptr);
  } else {
    e = cuda::LaunchAttentionForward(out.get(), lse.get(), pb.qkv.get(),
                                     s.batch, s.seq, C, s.heads, true, nullptr);
  }
  ExpectCuda(e, "forward launch");
  ExpectCuda(cudaDeviceSynchronize(), "forward");
  EXPECT_TRUE(out.GuardsIntact()) << "forward wrote outside out";
  EXPECT_TRUE(lse.GuardsIntact()) << "forward wrote outside lse";
  return {out.Download(), lse.Download()};
}

// dqkv from one backward launcher, given the forward's out and lse;
// `tiling` is the tensor-core backward's (kTensorCore and kOrdered).
std::vector<uint16_t> RunBackward(Problem& pb, const ForwardResult& fwd,
                                  Kernels which,
                                  cuda::AttentionTcTiling tiling = {}) {
  const Shape& s = pb.shape;
  const int64_t C = s.channels();
  const bool ordered =
      which == Kernels::kOrdered || which == Kernels::kDispatchOrdered;
  const cuda::AttentionTcBackward backward =
      ordered ? cuda::AttentionTcBackward::kOrderedDq
              : cuda::AttentionTcBackward::kTwoKernels;
  Bf16Array out(s.act_size()), dqkv(s.qkv_size());
  FloatArray lse(s.stat_size()), delta(cuda::AttentionTcBackwardScratchFloats(
                                     backward, s.batch, s.seq, C, s.heads));
  out.Upload(fwd.out);
  lse.Upload(fwd.lse);
  dqkv.Poison();
  delta.Poison();  // turn counters too: the launcher must zero them
  cudaError_t e;
  if (which == Kernels::kOrdered) {
    e = cuda::LaunchAttentionBackwardTcOrdered(
        tiling, dqkv.get(), delta.get(), pb.dout.get(), out.get(), pb.qkv.get(),
        lse.get(), s.batch, s.seq, C, s.heads, nullptr);
  } else if (which == Kernels::kDispatchOrdered) {
    e = cuda::LaunchAttentionBackward(
        dqkv.get(), delta.get(), pb.dout.get(), out.get(), pb.qkv.get(),
        lse.get(), s.batch, s.seq, C, s.heads, true, nullptr, {}, backward);
  } else if (which == Kernels::kReference) {
    e = cuda::LaunchAttentionBackwardReference(
        dqkv.get(), delta.get(), pb.dout.get(), out.get(), pb.qkv.get(),
        lse.get(), s.batch, s.seq, C, s.heads, true, nullptr);
  } else if (which == Kernels::kTensorCore) {
    e = cuda::LaunchAttentionBackwardTc(
        tiling, dqkv.get(), delta.get(), pb.dout.get(), out.get(), pb.qkv.get(),
        lse.get(), s.batch, s.seq, C, s.heads, nullptr);
  } else {
    e = cuda::LaunchAttentionBackward(
        dqkv.get(), delta.get(), pb.dout.get(), out.get(), pb.qkv.get(),
        lse.get(), s.batch, s.seq, C, s.heads, true, nullptr);
  }
  ExpectCuda(e, "backward launch");
  ExpectCuda(cudaDeviceSynchronize(), "backward");
  EXPECT_TRUE(dqkv.GuardsIntact()) << "backward wrote outside dqkv";
  EXPECT_TRUE(delta.GuardsIntact()) << "backward wrote outside delta";
  return dqkv.Download();
}

class CudaAttentionTcTest : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override {
    if (!cuda_test::DevicePresent()) GTEST_SKIP() << cuda_test::kNoDevice;
  }
};

// The tensor-core kernels' out, lse and dqkv (the forward, the two-kernel
// backward and the ordered backward in `tiling`) within the
// derived bounds of the reference kernels' on the problem's inputs.
void ExpectTcMatchesReference(Problem& pb,
                              cuda::AttentionTcTiling tiling = {}) {
  const Shape& s = pb.shape;
  const ForwardResult ref = RunForward(pb, Kernels::kReference);
  const ForwardResult tc = RunForward(pb, Kernels::kTensorCore, tiling);
  const std::vector<float> qkv = Widen(pb.qkv_host), dout = Widen(pb.dout_host);
  const std::vector<float> ref_out = Widen(ref.out);
  std::vector<double> out_tol(s.act_size()), lse_tol(s.stat_size());
  std::vector<double> dqkv_tol(s.qkv_size());
  const std::vector<uint16_t> ref_dqkv =
      RunBackward(pb, ref, Kernels::kReference);
  const std::vector<uint16_t> tc_dqkv =
      RunBackward(pb, ref, Kernels::kTensorCore, tiling);
  const std::vector<uint16_t> ordered_dqkv =
      RunBackward(pb, ref, Kernels::kOrdered, tiling);
  const std::vector<float> want_dqkv = Widen(ref_dqkv);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const HostHead x{s, qkv, dout, ref_out, b, h};
      ForwardBounds(x, ref.lse, &out_tol, &lse_tol);
      BackwardBounds(x, ref.lse, want_dqkv, &dqkv_tol);
    }
  }
  ExpectWithin(Widen(tc.out), ref_out, out_tol, "out");
  ExpectWithin(tc.lse, ref.lse, lse_tol, "lse");
  ExpectWithin(Widen(tc_dqkv), want_dqkv, dqkv_tol, "dqkv");
  ExpectWithin(Widen(ordered_dqkv), want_dqkv, dqkv_tol, "dqkv (ordered dq)");
}

TEST_P(CudaAttentionTcTest, MatchesReferenceKernels) {
  Problem pb(GetParam());
  ExpectTcMatchesReference(pb);
}

// Keys whose scores climb by more than the forward's kMaxLag (8 nats) from
// one key tile to the next: every row moves its reference max on every
// tile, so the output accumulator is staged and rescaled each time (random
// inputs never get there).
void MakeTheMaxClimbEveryTile(Problem& pb) {
  const Shape& s = pb.shape;
  const int64_t C = s.channels();
  std::vector<uint16_t> qkv = pb.qkv_host;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t t = 0; t < s.seq; ++t) {
      uint16_t* row = qkv.data() + (b * s.seq + t) * 3 * C;
      // q = 1; k = 1.5 x its tile: scores 1.5 sqrt(hs) x the key's tile,
      // >= 8.4 nats a tile for hs >= 32; both exact in bf16.
      const float k = 1.5f * static_cast<float>(t / 64);
      for (int64_t c = 0; c < C; ++c) {
        row[c] = FloatToBf16(1.f);
        row[C + c] = FloatToBf16(k);
      }
    }
  }
  pb.qkv_host = qkv;
  pb.qkv.Upload(qkv);
}

TEST_P(CudaAttentionTcTest, MatchesReferenceWhenTheMaxClimbsEveryTile) {
  Problem pb(GetParam());
  MakeTheMaxClimbEveryTile(pb);
  ExpectTcMatchesReference(pb);
}

// Every tiling the head size takes gives the default tiling's bits (which
// the tests above hold to the reference), forward and both backwards, on random
// inputs and on the climbing max; the others are refused. On the GPU the
// warpgroup tiling's products may sum in another order than mma.sync's,
// so there it is held to the reference's bounds instead.
TEST_P(CudaAttentionTcTest, EveryTilingGivesTheSameBits) {
  const Shape s = GetParam();
  for (const bool climbing : {false, true}) {
    Problem pb(s);
    if (climbing) MakeTheMaxClimbEveryTile(pb);
    const ForwardResult want = RunForward(pb, Kernels::kTensorCore);
    const std::vector<uint16_t> want_d =
        RunBackward(pb, want, Kernels::kTensorCore);
    const std::vector<uint16_t> want_ordered =
        RunBackward(pb, want, Kernels::kOrdered);
    for (const cuda::AttentionTcTiling& t : cuda::kAttentionTcTilings) {
      SCOPED_TRACE(::testing::Message() << cuda::AttentionTcTilingName(t)
                                        << (climbing ? " climbing" : ""));
      if (!cuda::AttentionTcTakesTiling(t, s.head_size)) {
        Bf16Array out(s.act_size());
        FloatArray lse(s.stat_size());
        EXPECT_EQ(cuda::LaunchAttentionForwardTc(
                      t, out.get(), lse.get(), pb.qkv.get(), s.batch, s.seq,
                      s.channels(), s.heads, nullptr),
                  cudaErrorInvalidValue);
        Bf16Array dqkv(s.qkv_size());
        FloatArray delta(s.stat_size());
        EXPECT_EQ(cuda::LaunchAttentionBackwardTc(
                      t, dqkv.get(), delta.get(), pb.dout.get(), out.get(),
                      pb.qkv.get(), lse.get(), s.batch, s.seq, s.channels(),
                      s.heads, nullptr),
                  cudaErrorInvalidValue);
        FloatArray scratch(cuda::AttentionTcBackwardScratchFloats(
            cuda::AttentionTcBackward::kOrderedDq, s.batch, s.seq, s.channels(),
            s.heads));
        EXPECT_EQ(cuda::LaunchAttentionBackwardTcOrdered(
                      t, dqkv.get(), scratch.get(), pb.dout.get(), out.get(),
                      pb.qkv.get(), lse.get(), s.batch, s.seq, s.channels(),
                      s.heads, nullptr),
                  cudaErrorInvalidValue);
        continue;
      }
#if !defined(TRAINYARD_CUDA_EMULATION)
      if (t.warpgroup) {
        ExpectTcMatchesReference(pb, t);
        continue;
      }
#endif
      const ForwardResult got = RunForward(pb, Kernels::kTensorCore, t);
      EXPECT_EQ(FirstDifference(got.out, want.out), -1) << "out";
      EXPECT_EQ(FirstDifference(got.lse, want.lse), -1) << "lse";
      EXPECT_EQ(FirstDifference(RunBackward(pb, want, Kernels::kTensorCore, t),
                                want_d),
                -1)
          << "dqkv";
      EXPECT_EQ(FirstDifference(RunBackward(pb, want, Kernels::kOrdered, t),
                                want_ordered),
                -1)
          << "dqkv (ordered dq)";
    }
  }
}

TEST_P(CudaAttentionTcTest, RepeatsBitForBitAndIsWhatDispatchRuns) {
  Problem pb(GetParam());
  const ForwardResult first = RunForward(pb, Kernels::kTensorCore);
  const ForwardResult again = RunForward(pb, Kernels::kTensorCore);
  const ForwardResult dispatched = RunForward(pb, Kernels::kDispatch);
  EXPECT_EQ(FirstDifference(first.out, again.out), -1) << "out";
  EXPECT_EQ(FirstDifference(first.lse, again.lse), -1) << "lse";
  EXPECT_EQ(FirstDifference(first.out, dispatched.out), -1) << "dispatch out";
  EXPECT_EQ(FirstDifference(first.lse, dispatched.lse), -1) << "dispatch lse";
  const std::vector<uint16_t> d1 = RunBackward(pb, first, Kernels::kTensorCore);
  const std::vector<uint16_t> d2 = RunBackward(pb, first, Kernels::kTensorCore);
  const std::vector<uint16_t> d3 = RunBackward(pb, first, Kernels::kDispatch);
  EXPECT_EQ(FirstDifference(d1, d2), -1) << "dqkv";
  EXPECT_EQ(FirstDifference(d1, d3), -1) << "dispatch dqkv";
  // The ordered backward: key tiles add to dQ in one order whichever
  // blocks run first (the emulation spreads them over OS threads).
  const std::vector<uint16_t> o1 = RunBackward(pb, first, Kernels::kOrdered);
  const std::vector<uint16_t> o2 = RunBackward(pb, first, Kernels::kOrdered);
  const std::vector<uint16_t> o3 =
      RunBackward(pb, first, Kernels::kDispatchOrdered);
  EXPECT_EQ(FirstDifference(o1, o2), -1) << "ordered dqkv";
  EXPECT_EQ(FirstDifference(o1, o3), -1) << "dispatch ordered dqkv";
  constexpr cuda::AttentionTcTiling kWarpgroup{16, 4, true};
  if (cuda::AttentionTcTakesTiling(kWarpgroup, pb.shape.head_size)) {
    EXPECT_EQ(
        FirstDifference(RunBackward(pb, first, Kernels::kOrdered, kWarpgroup),
                        RunBackward(pb, first, Kernels::kOrdered, kWarpgroup)),
        -1)
        << "warpgroup ordered dqkv";
  }
}

// hs = 64 (GPT-2) with 2 and 3 heads, the other two sizes with 2; T = 1,
// less than one tile, exactly one, ragged multi-tile lengths, and 192 (one
// and a half 128-row query tiles).
std::vector<Shape> Shapes() {
  std::vector<Shape> shapes;
  for (int64_t seq : {1, 15, 64, 100, 192, 257}) {
    shapes.push_back({2, seq, 2, 64});
    shapes.push_back({2, seq, 3, 64});
    shapes.push_back({2, seq, 2, 32});
    shapes.push_back({2, seq, 2, 128});
  }
  return shapes;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionTcTest,
                         ::testing::ValuesIn(Shapes()));

// A head size the tensor-core kernels do not take runs on the reference.
TEST(CudaAttentionDispatchTest, OtherHeadSizesRunTheReference) {
  if (!cuda_test::DevicePresent()) GTEST_SKIP() << cuda_test::kNoDevice;
  Problem pb(Shape{1, 70, 2, 48});
  const ForwardResult ref = RunForward(pb, Kernels::kReference);
  const ForwardResult dispatched = RunForward(pb, Kernels::kDispatch);
  EXPECT_EQ(FirstDifference(ref.out, dispatched.out), -1);
  EXPECT_EQ(FirstDifference(ref.lse, dispatched.lse), -1);
  EXPECT_EQ(FirstDifference(RunBackward(pb, ref, Kernels::kReference),
                            RunBackward(pb, ref, Kernels::kDispatch)),
            -1);
}

// The tensor-core kernels move rows in 16-byte packs: misaligned inputs
// are refused by their launchers and run on the reference kernels instead.
TEST(CudaAttentionDispatchTest, MisalignedBuffersRunTheReference) {
  if (!cuda_test::DevicePresent()) GTEST_SKIP() << cuda_test::kNoDevice;
  const Shape s{1, 70, 2, 64};
  Problem pb(s, /*offset=*/1);
  {
    Bf16Array out(s.act_size());
    FloatArray lse(s.stat_size());
    EXPECT_EQ(cuda::LaunchAttentionForwardTc(out.get(), lse.get(), pb.qkv.get(),
                                             s.batch, s.seq, s.channels(),
                                             s.heads, nullptr),
              cudaErrorInvalidValue);
  }
  const ForwardResult ref = RunForward(pb, Kernels::kReference);
  const ForwardResult dispatched = RunForward(pb, Kernels::kDispatch);
  EXPECT_EQ(FirstDifference(ref.out, dispatched.out), -1);
  EXPECT_EQ(FirstDifference(ref.lse, dispatched.lse), -1);
  EXPECT_EQ(FirstDifference(RunBackward(pb, ref, Kernels::kReference),
                            RunBackward(pb, ref, Kernels::kDispatch)),
            -1);
}

// The warpgroup tiling's product path (core-tile loads, descriptors,
// wgmma) on one product d = a b of 64 x 64 by 64 x n, b read transposed
// (K-major, as Q K^T) and as it lies (MN-major, as P V), against a plain
// product in double: each element within fp32 summation's bound of 64
// exact bf16 products. A wrong layout, descriptor or fragment order puts
// whole rows or columns off by O(1).
// Whether every got[i] is within tol[i] of want[i].
bool AllWithin(const std::vector<float>& got, const std::vector<float>& want,
               const std::vector<double>& tol) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(double{got[i]} - double{want[i]}) <= tol[i])) return false;
  }
  return got.size() == want.size();
}

// One product of the check (n, B's major, A from registers or shared
// memory) as the kernels read B, against a double loop. Where that reading
// is right, the other readings (WarpgroupReading) must give other
// products, so that where it is wrong on a GPU the one reading that gives
// the product names the mistake in warpgroup_mma.h.
void CheckWarpgroupProduct(int n, bool rows_are_n, bool a_in_shared,
                           bool swizzled = false) {
  using cuda::WarpgroupReading;
  SCOPED_TRACE(::testing::Message()
               << "n=" << n << (rows_are_n ? " K-major" : " MN-major")
               << (a_in_shared ? ", A in shared memory" : "")
               << (swizzled ? ", swizzled" : ""));
  constexpr int kK = 64;
  const std::pair<WarpgroupReading, const char*> kOtherReadings[] = {
      {WarpgroupReading::kStridesSwapped,
       "the descriptor's leading and stride byte offsets exchanged"},
      {WarpgroupReading::kMajorFlipped, "B's major flipped"},
      {WarpgroupReading::kBothFlipped, "both"}};
  const std::vector<uint16_t> a_host = RandomBf16(64 * kK, 7 + n);
  const std::vector<uint16_t> b_host = RandomBf16(int64_t{kK} * n, 9 + n);
  Bf16Array a(64 * kK), b(int64_t{kK} * n);
  FloatArray d(64 * n);
  a.Upload(a_host);
  b.Upload(b_host);
  const auto product = [&](WarpgroupReading reading) {
    d.Poison();
    ExpectCuda(cuda::LaunchWarpgroupProductCheck(d.get(), a.get(), b.get(), n,
                                                 rows_are_n, a_in_shared,
                                                 reading, nullptr, swizzled),
               "launch");
    ExpectCuda(cudaDeviceSynchronize(), "product");
    EXPECT_TRUE(d.GuardsIntact());
    return d.Download();
  };
  const std::vector<float> x = Widen(a_host), y = Widen(b_host);
  std::vector<float> want(64 * n);
  std::vector<double> tol(want.size());
  for (int i = 0; i < 64; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0, size = 0;
      for (int k = 0; k < kK; ++k) {
        const double term =
            double{x[i * kK + k]} *
            (rows_are_n ? y[int64_t{j} * kK + k] : y[int64_t{k} * n + j]);
        sum += term;
        size += std::fabs(term);
      }
      want[i * n + j] = static_cast<float>(sum);
      tol[i * n + j] = SumSlack(kK) * size + 1e-30;
    }
  }
  const std::vector<float> got = product(WarpgroupReading::kAsBuilt);
  if (AllWithin(got, want, tol)) {
    for (const auto& [reading, name] : kOtherReadings) {
      EXPECT_FALSE(AllWithin(product(reading), want, tol))
          << "B read with " << name << " gives the product too";
    }
    return;
  }
  std::string found =
      "no other reading of B gives it either: look at A's fragments "
      "and the accumulators' layout";
  for (const auto& [reading, name] : kOtherReadings) {
    if (AllWithin(product(reading), want, tol)) {
      found = std::string("B read with ") + name + " gives it";
    }
  }
  ADD_FAILURE() << "the warpgroup product is wrong; " << found
                << (a_in_shared ? " (or A's descriptor is wrong)" : "");
  ExpectWithin(got, want, tol, "d");
}

TEST(WarpgroupProductTest, MatchesAPlainProduct) {
  using cuda::WarpgroupReading;
  if (!cuda_test::DevicePresent()) GTEST_SKIP() << cuda_test::kNoDevice;
  if (!cuda::AttentionTcWarpgroupBuilt()) {
    EXPECT_EQ(cuda::LaunchWarpgroupProductCheck(
                  nullptr, nullptr, nullptr, 64, true, false,
                  WarpgroupReading::kAsBuilt, nullptr),
              cudaErrorInvalidValue);
    GTEST_SKIP() << "built without the sm_90a warpgroup kernels";
  }
  for (bool swizzled : {false, true}) {
    for (int n : {32, 64, 128}) {
      for (bool rows_are_n : {true, false}) {
        if (swizzled && !rows_are_n && n == 128) continue;  // refused below
        CheckWarpgroupProduct(n, rows_are_n, /*a_in_shared=*/false, swizzled);
        if (n == 64) {
          CheckWarpgroupProduct(n, rows_are_n, /*a_in_shared=*/true, swizzled);
        }
      }
    }
  }
  // Shapes the check does not take.
  FloatArray d(64 * 48);
  Bf16Array a(64 * 64, /*offset=*/1), b(64 * 64);
  const auto check = [&](const void* x, int n, bool a_in_shared) {
    return cuda::LaunchWarpgroupProductCheck(
        d.get(), x, b.get(), n, true, a_in_shared, WarpgroupReading::kAsBuilt,
        nullptr);
  };
  EXPECT_EQ(check(b.get(), 48, false), cudaErrorInvalidValue);
  EXPECT_EQ(check(a.get(), 64, false), cudaErrorInvalidValue);  // misaligned
  EXPECT_EQ(check(b.get(), 32, true), cudaErrorInvalidValue);
  // Swizzled MN-major rows are one swizzle pattern wide: n up to 64.
  FloatArray d128(64 * 128);
  Bf16Array b128(64 * 128);
  EXPECT_EQ(cuda::LaunchWarpgroupProductCheck(
                d128.get(), b.get(), b128.get(), 128, /*b_rows_are_n=*/false,
                false, WarpgroupReading::kAsBuilt, nullptr, /*swizzled=*/true),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace trainyard::engine
