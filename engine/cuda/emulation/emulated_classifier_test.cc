// The fused classifier (classifier_kernels.cu) on the CUDA emulation,
// called through its launchers, against host loops in fp32 and bf16, over
// row shapes that exercise its packed access (vec16.cuh): aligned rows
// (classes a multiple of the pack; 8200 classes give a thread several
// packs), rows each misaligned differently (65 classes, the Shakespeare
// vocabulary), an offset base with odd rows longer than one sweep of the
// block, rows shorter than a pack, and odd rows past what the
// forward-backward keeps in shared memory (60,001 classes: 120 KB in bf16,
// so read twice). Rows hold ties across pack, thread,
// head and tail boundaries (the first index must win), NaN and -inf
// entries; the backward runs apart, in place, and with dlogits aligned
// unlike the logits (no packs for the gradient pass: the same bits).
// Results repeat bitwise while the emulation changes its thread order.
//
// Bounds, in the model of emulated_kernels_test.cc (an expf is 1 ulp = 2u,
// a product or sum u, u = 2^-24, summed linearly through gamma_n): a term
// exp(x - max) of the row sum gets its expf, then the adds of the entries
// its thread folds in after it (at most E), the rescales of its thread's
// sum to a new max (an expf and a product, at most R), and 5 butterfly and
// 15 warp merges (an expf, a product and a sum each). Packed, a thread of
// the 512 folds ceil(packs / 512) packs of P entries, one rescale each, and
// at most one head and one tail entry, each possibly a rescale; element by
// element (rows whose arrays are not aligned alike), ceil(classes / 512)
// entries, each possibly a rescale.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "engine/cuda/classifier_kernels.h"
#include "engine/cuda/emulation/guarded_buffers.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

using emulation_test::Activations;
using emulation_test::ExpectWithin;
using emulation_test::Gamma;
using emulation_test::Guarded;
using emulation_test::Inputs;
using emulation_test::kBf16U;
using emulation_test::kU;
using emulation_test::SameBits;

constexpr int64_t kRows = 37, kThreads = 512;
constexpr float kScale = 1.f / kRows;
constexpr float kTie = 7.f;  // above every input: exact in bf16

struct RowShape {
  int64_t classes;
  int64_t offset;  // elements of the logits' base past a 16-byte boundary
};

class EmulatedClassifierTest
    : public ::testing::TestWithParam<std::tuple<bool, RowShape>> {
 protected:
  bool bf16() const { return std::get<0>(GetParam()); }
  int64_t classes() const { return std::get<1>(GetParam()).classes; }
  int64_t offset() const { return std::get<1>(GetParam()).offset; }
  int64_t pack() const { return bf16() ? 8 : 4; }

  // The relative error of the kernel's row sum (the header's derivation).
  double SumRelError() const {
    const int64_t C = classes(), P = pack();
    const int64_t sweeps = (C + P * kThreads - 1) / (P * kThreads);
    const int64_t scalar = (C + kThreads - 1) / kThreads;
    const int64_t e = std::max(scalar, sweeps * P + 2);
    const int64_t r = std::max(scalar, sweeps + 2);
    return Gamma(2 + e + 3 * r + 20 * 4);
  }

  // Logits in [-4, 4) with the special rows below; targets from
  // Targets(), whose rows the ties are placed around.
  std::vector<float> Logits(const std::vector<int32_t>& t) const {
    const int64_t C = classes();
    std::vector<float> x = Inputs(kRows * C, 11, bf16(), -4, 4);
    auto at = [&](int64_t r, int64_t c) -> float& { return x[r * C + c]; };
    const float nan = std::numeric_limits<float>::quiet_NaN();
    at(3, 17 % C) = nan;
    at(14, C - 1) = nan;                // in the tail of a misaligned row
    at(15, 0) = nan;                    // in its head
    at(5, (t[5] + 1) % C) = -INFINITY;  // not at the target: a finite loss
    for (const int64_t r : {0, 2, 4}) at(r, t[r]) = kTie;  // hits
    at(6, 0) = at(6, t[6]) = kTie;      // the first index, 0, wins: a miss
    at(9, t[9]) = at(9, C - 1) = kTie;  // the target is first: a hit
    // A run of ties across pack and thread boundaries; the target is its
    // second entry.
    for (int64_t c = C / 3; c < std::min(C, C / 3 + 20); ++c) at(10, c) = kTie;
    at(11, 0) = at(11, C - 1) = kTie;  // head against tail
    std::fill(x.begin() + 12 * C, x.begin() + 13 * C, 0.f);  // all tied
    // Two entries of one thread, a sweep apart (where the row is long
    // enough): its own first-index rule.
    const int64_t b = C / 7, sweep = pack() * kThreads;
    at(16, b) = kTie;
    if (b + sweep < C) at(16, b + sweep) = kTie;
    return x;
  }

  // The backward of every row, dlogits from `from`, at scale 1 / kRows:
  // the softmax from `lse` (the forward's), or recomputed when it is null.
  cudaError_t Backward(void* dlogits, const void* from, const float* lse,
                       const int32_t* targets) const {
    return cuda::LaunchSoftmaxCrossEntropyBackward(
        dlogits, from, lse, targets, kScale, kRows, classes(), bf16(), nullptr);
  }

  std::vector<int32_t> Targets() const {
    const int64_t C = classes();
    std::vector<int32_t> t(kRows);
    for (int64_t r = 0; r < kRows; ++r) t[r] = (r * 389 + 7) % C;
    t[6] = static_cast<int32_t>(std::max<int64_t>(1, t[6]));
    t[10] = static_cast<int32_t>(std::min(C - 1, C / 3 + 1));
    t[11] = static_cast<int32_t>(C - 1);
    t[12] = 0;
    const int64_t b = C / 7, sweep = pack() * kThreads;
    t[16] = static_cast<int32_t>(b + sweep < C ? b + sweep : b);
    return t;
  }
};

struct SoftmaxRow {
  double max, sum;  // sum of exp(x - max) over the entries
  int64_t argmax;   // the first index of the max
  bool nan;
};

SoftmaxRow HostSoftmax(const float* x, int64_t classes) {
  SoftmaxRow s{-INFINITY, 0, 0, false};
  for (int64_t c = 0; c < classes; ++c) {
    s.nan |= std::isnan(x[c]);
    if (x[c] > s.max) {
      s.max = x[c];
      s.argmax = c;
    }
  }
  for (int64_t c = 0; c < classes; ++c) s.sum += std::exp(x[c] - s.max);
  return s;
}

TEST_P(EmulatedClassifierTest, ForwardLossesAndFirstIndexHits) {
  const int64_t C = classes();
  std::vector<int32_t> tgt = Targets();
  const std::vector<float> x = Logits(tgt);
  tgt[7] = -1;  // outside [0, classes): NaN loss
  tgt[8] = static_cast<int32_t>(C);
  Activations logits(x, bf16(), offset());
  Guarded<int32_t> targets(tgt);
  Guarded<float> losses(std::vector<float>(kRows, -7.f));
  Guarded<int32_t> hits(std::vector<int32_t>(kRows, -7));
  ASSERT_EQ(cuda::LaunchSoftmaxCrossEntropyForward(
                losses.get(), hits.get(), nullptr, logits.get(), targets.get(),
                kRows, C, bf16(), nullptr),
            cudaSuccess);
  EXPECT_TRUE(losses.GuardsIntact() && hits.GuardsIntact());
  const std::vector<float> got = losses.values();
  const std::vector<int32_t> got_hits = hits.values();
  const double rel = SumRelError();
  for (int64_t r = 0; r < kRows; ++r) {
    const SoftmaxRow s = HostSoftmax(&x[r * C], C);
    if (s.nan || r == 7 || r == 8) {
      EXPECT_TRUE(std::isnan(got[r])) << "row " << r << ": " << got[r];
      continue;  // the argmax of a NaN row is unspecified
    }
    EXPECT_EQ(got_hits[r], s.argmax == tgt[r] ? 1 : 0) << "row " << r;
    const double shifted = x[r * C + tgt[r]] - s.max;
    const double want = std::log(s.sum) - shifted;
    const double tol = 1.01 * rel + 2 * kU *
                                        (std::abs(std::log(s.sum)) +
                                         std::abs(shifted) + std::abs(want));
    EXPECT_NEAR(got[r], want, tol) << "row " << r;
  }
  // The ties resolve as the rows were built (the host loop agrees).
  EXPECT_EQ(got_hits[6], 0);
  EXPECT_EQ(got_hits[9], 1);
  EXPECT_EQ(got_hits[10], C > 1 ? 0 : 1);
  EXPECT_EQ(got_hits[11], C > 1 ? 0 : 1);
  EXPECT_EQ(got_hits[12], 1);
  EXPECT_EQ(got_hits[16], C / 7 + pack() * kThreads < C ? 0 : 1);
  // Again, in another thread order: the same bits.
  Guarded<float> again(std::vector<float>(kRows, -7.f));
  ASSERT_EQ(cuda::LaunchSoftmaxCrossEntropyForward(
                again.get(), /*hits=*/nullptr, nullptr, logits.get(),
                targets.get(), kRows, C, bf16(), nullptr),
            cudaSuccess);
  EXPECT_TRUE(SameBits(got, again.values()));
}

// The backward's host result within its bounds; NaN rows all NaN.
void ExpectGradient(const std::vector<float>& got, const std::vector<float>& x,
                    const std::vector<int32_t>& t, int64_t C, float scale,
                    double rel_sum, bool bf16) {
  const double rel_p = rel_sum + 3 * 2 * kU;
  std::vector<float> finite = got;
  std::vector<double> want(x.size()), tol(x.size());
  for (int64_t r = 0; r < kRows; ++r) {
    const SoftmaxRow s = HostSoftmax(&x[r * C], C);
    for (int64_t c = 0; c < C; ++c) {
      const int64_t i = r * C + c;
      if (s.nan) {
        EXPECT_TRUE(std::isnan(got[i])) << "NaN row " << r << ", class " << c;
        finite[i] = 0;
        continue;
      }
      const double p = std::exp(x[i] - s.max) / s.sum;
      want[i] = (p - (c == t[r] ? 1 : 0)) * scale;
      tol[i] = scale * (p * rel_p + kU * std::abs(p - (c == t[r]))) +
               kU * std::abs(want[i]) +
               (bf16 ? kBf16U : kU) * std::abs(want[i]);
    }
  }
  ExpectWithin(finite, want, tol, "dlogits");
}

TEST_P(EmulatedClassifierTest, BackwardApartInPlaceAndMisalignedAlike) {
  const int64_t C = classes();
  const std::vector<int32_t> t = Targets();
  const std::vector<float> x = Logits(t);
  Activations logits(x, bf16(), offset());
  Guarded<int32_t> targets(t);
  const auto backward = [&](void* dlogits, void* from) {
    return Backward(dlogits, from, /*lse=*/nullptr, targets.get());
  };
  Activations dlogits(std::vector<float>(x.size(), 5.f), bf16(), offset());
  ASSERT_EQ(backward(dlogits.get(), logits.get()), cudaSuccess);
  EXPECT_TRUE(dlogits.GuardsIntact());
  const std::vector<float> got = dlogits.values();
  ExpectGradient(got, x, t, C, kScale, SumRelError(), bf16());
  EXPECT_TRUE(SameBits(logits.values(), Activations(x, bf16()).values()))
      << "the logits changed";
  // In place: the logits' buffer receives the same bits.
  Activations in_place(x, bf16(), offset());
  ASSERT_EQ(backward(in_place.get(), in_place.get()), cudaSuccess);
  EXPECT_TRUE(in_place.GuardsIntact());
  EXPECT_TRUE(SameBits(in_place.values(), got));
  // dlogits one element further from alignment than the logits: the
  // gradient pass goes element by element, with the same bits.
  Activations shifted(std::vector<float>(x.size(), 5.f), bf16(), offset() + 1);
  ASSERT_EQ(backward(shifted.get(), logits.get()), cudaSuccess);
  EXPECT_TRUE(shifted.GuardsIntact());
  EXPECT_TRUE(SameBits(shifted.values(), got));
}

// The forward's lse = max + log(sum) and the backward from it (one read
// of the logits): the lse within the sum's error, absolutely, and its own
// two roundings; p = exp(x - lse) off by that, the subtraction's and the
// expf's rounding, relatively; NaN rows NaN throughout; the same bits in
// place and again.
TEST_P(EmulatedClassifierTest, BackwardFromTheForwardsLogSumExp) {
  const int64_t C = classes();
  const std::vector<int32_t> t = Targets();
  const std::vector<float> x = Logits(t);
  Activations logits(x, bf16(), offset());
  Guarded<int32_t> targets(t);
  Guarded<float> losses(std::vector<float>(kRows, -7.f));
  Guarded<float> lse(std::vector<float>(kRows, -7.f));
  ASSERT_EQ(cuda::LaunchSoftmaxCrossEntropyForward(
                losses.get(), nullptr, lse.get(), logits.get(), targets.get(),
                kRows, C, bf16(), nullptr),
            cudaSuccess);
  EXPECT_TRUE(lse.GuardsIntact());
  const std::vector<float> got_lse = lse.values();
  double worst = 0;  // the largest |lse| and |x - lse| of a finite row
  for (int64_t r = 0; r < kRows; ++r) {
    const SoftmaxRow s = HostSoftmax(&x[r * C], C);
    if (s.nan) {
      EXPECT_TRUE(std::isnan(got_lse[r])) << "row " << r;
      continue;
    }
    const double want = s.max + std::log(s.sum);
    EXPECT_NEAR(
        got_lse[r], want,
        1.01 * SumRelError() + 4 * kU * (std::abs(s.max) + std::abs(want)))
        << "row " << r;
    worst = std::max({worst, std::abs(want), std::abs(want) + 4 + kTie});
  }
  const auto backward = [&](void* dlogits, void* from) {
    return Backward(dlogits, from, lse.get(), targets.get());
  };
  Activations dlogits(std::vector<float>(x.size(), 5.f), bf16(), offset());
  ASSERT_EQ(backward(dlogits.get(), logits.get()), cudaSuccess);
  EXPECT_TRUE(dlogits.GuardsIntact());
  const std::vector<float> got = dlogits.values();
  // The lse's error (absolute, so relative in p), then x - lse and expf.
  const double rel_lse = 1.01 * SumRelError() + 4 * kU * worst + 2 * kU;
  ExpectGradient(got, x, t, C, kScale, rel_lse, bf16());
  Activations in_place(x, bf16(), offset());
  ASSERT_EQ(backward(in_place.get(), in_place.get()), cudaSuccess);
  EXPECT_TRUE(SameBits(in_place.values(), got));
}

// The forward-backward in one kernel: the forward's losses, hits and lse,
// and over the logits the backward's gradient from that lse: the same bits
// as the two launches, NaN rows and ties included.
TEST_P(EmulatedClassifierTest, ForwardBackwardIsTheTwoLaunches) {
  const int64_t C = classes();
  const std::vector<int32_t> t = Targets();
  const std::vector<float> x = Logits(t);
  Guarded<int32_t> targets(t);
  struct Result {
    std::vector<float> losses, lse, grad;
    std::vector<int32_t> hits;
  };
  const auto run = [&](bool fused) {
    Activations logits(x, bf16(), offset());
    Guarded<float> losses(std::vector<float>(kRows, -7.f));
    Guarded<float> lse(std::vector<float>(kRows, -7.f));
    Guarded<int32_t> hits(std::vector<int32_t>(kRows, -7));
    if (fused) {
      EXPECT_EQ(cuda::LaunchSoftmaxCrossEntropyForwardBackward(
                    losses.get(), hits.get(), lse.get(), logits.get(),
                    targets.get(), kScale, kRows, C, bf16(), nullptr),
                cudaSuccess);
    } else {
      EXPECT_EQ(cuda::LaunchSoftmaxCrossEntropyForward(
                    losses.get(), hits.get(), lse.get(), logits.get(),
                    targets.get(), kRows, C, bf16(), nullptr),
                cudaSuccess);
      EXPECT_EQ(Backward(logits.get(), logits.get(), lse.get(), targets.get()),
                cudaSuccess);
    }
    EXPECT_TRUE(logits.GuardsIntact() && losses.GuardsIntact() &&
                lse.GuardsIntact() && hits.GuardsIntact());
    return Result{losses.values(), lse.values(), logits.values(),
                  hits.values()};
  };
  const Result want = run(false), got = run(true);
  EXPECT_TRUE(SameBits(got.losses, want.losses)) << "losses";
  EXPECT_TRUE(SameBits(got.lse, want.lse)) << "lse";
  EXPECT_TRUE(SameBits(got.grad, want.grad)) << "gradient";
  EXPECT_EQ(got.hits, want.hits);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, EmulatedClassifierTest,
    ::testing::Combine(::testing::Bool(),
                       ::testing::Values(RowShape{1000, 0}, RowShape{8200, 0},
                                         RowShape{65, 0}, RowShape{9001, 3},
                                         RowShape{5, 1}, RowShape{60001, 3})),
    [](const auto& info) {
      const RowShape s = std::get<1>(info.param);
      return std::string(std::get<0>(info.param) ? "Bf16" : "Fp32") + "_" +
             std::to_string(s.classes) + "_at" + std::to_string(s.offset);
    });

}  // namespace
}  // namespace trainyard::engine
