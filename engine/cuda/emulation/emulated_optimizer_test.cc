// The optimizer step's kernels run on the CUDA emulation, called through
// their launchers: the sum of squares behind the global gradient norm and
// the fused AdamW update. Sizes go just over a full grid (so grid-stride
// loops take a second turn) and to odd sizes that leave blocks partly idle;
// every output sits between guard zones.
//
// SumSquares is checked against a double host sum within the bound of the
// two summation orders, exactly where every partial sum is exact, and
// bitwise across launches (the emulation runs a block's threads in a
// different order each launch, which a fixed reduction tree must not
// see). AdamW is checked against double within the bound derived below,
// bitwise against the CPU backend's fp32 loop (the kernel repeats it term
// for term, and both are built here without FMA contraction), and its bf16
// working copy bitwise against the round-to-nearest-even of the fp32
// master it wrote.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/bf16.h"
#include "engine/cpu/test_inputs.h"
#include "engine/cuda/adamw_kernels.h"
#include "engine/cuda/emulation/guarded_buffers.h"
#include "engine/cuda/reduce_kernels.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

using emulation_test::ExpectBitwise;
using emulation_test::ExpectWithin;
using emulation_test::Gamma;
using emulation_test::Guarded;
using emulation_test::kU;
using emulation_test::SameBits;

// ------------------------------------------------------------ SumSquares

constexpr int64_t kSumThreads = 256;  // reduce_kernels.cu's block size
constexpr int64_t kSumGrid = cuda::kSumSquaresMaxBlocks * kSumThreads;

// gamma_n for double's unit roundoff, 2^-53.
double GammaDouble(int64_t n) {
  const double u = 0x1p-53;
  return n * u / (1 - n * u);
}

// The kernel's sum of squares and the partials it leaves, for x.
struct SumSquaresRun {
  double result;
  std::vector<double> partial;
};

SumSquaresRun RunSumSquares(const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  Guarded<float> in(x);
  Guarded<double> result(std::vector<double>(1, -1.0));
  Guarded<double> partial(
      std::vector<double>(cuda::kSumSquaresMaxBlocks, -1.0));
  EXPECT_EQ(
      cuda::LaunchSumSquares(result.get(), partial.get(), in.get(), n, nullptr),
      cudaSuccess);
  EXPECT_TRUE(result.GuardsIntact() && partial.GuardsIntact());
  return {result.values()[0], partial.values()};
}

TEST(EmulatedOptimizerTest, SumSquaresWithinBoundAndRepeatsBitwise) {
  for (const int64_t n : {kSumGrid + 1001, int64_t{1001}, int64_t{1}}) {
    const std::vector<float> x = Random(n, 61, -2, 2);
    double sum = 0;
    for (const float v : x) sum += static_cast<double>(v) * v;
    // Every square is exact in double. The kernel adds each through its
    // thread's ceil(n / threads) turns, 5 butterfly and 7 warp-combining
    // adds in its block, and the adds over the blocks' partials; the host
    // through n adds. All terms are positive: the bound is relative.
    const int64_t blocks = std::min<int64_t>(
        (n + kSumThreads - 1) / kSumThreads, cuda::kSumSquaresMaxBlocks);
    const int64_t turns =
        (n + blocks * kSumThreads - 1) / (blocks * kSumThreads);
    const double tol =
        (GammaDouble(turns + 12 + blocks) + GammaDouble(n)) * sum;
    const SumSquaresRun first = RunSumSquares(x);
    EXPECT_NEAR(first.result, sum, tol) << "n = " << n;
    // Partials past the blocks launched stay untouched.
    for (int64_t b = blocks; b < cuda::kSumSquaresMaxBlocks; ++b) {
      ASSERT_EQ(first.partial[b], -1.0) << "partial " << b << ", n = " << n;
    }
    for (int run = 0; run < 3; ++run) {  // ascending, descending, shuffled
      const SumSquaresRun again = RunSumSquares(x);
      EXPECT_TRUE(SameBits(std::vector<double>{again.result},
                           std::vector<double>{first.result}))
          << "n = " << n << ", run " << run;
      EXPECT_TRUE(SameBits(again.partial, first.partial));
    }
  }
}

TEST(EmulatedOptimizerTest, SumSquaresOfSmallIntegersIsExact) {
  // Squares of -3..3 and their sums stay far below 2^53: every order of
  // adding them gives the exact sum.
  const int64_t n = kSumGrid + 777;
  std::vector<float> x(n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(static_cast<int>((i * 2654435761u) % 7) - 3);
    sum += static_cast<double>(x[i]) * x[i];
  }
  EXPECT_EQ(RunSumSquares(x).result, sum);
}

TEST(EmulatedOptimizerTest, SumSquaresOfNothingIsZero) {
  for (const int64_t n : {int64_t{0}, int64_t{-4}}) {
    Guarded<double> result(std::vector<double>(1, -1.0));
    Guarded<double> partial(std::vector<double>(4, -1.0));
    EXPECT_EQ(cuda::LaunchSumSquares(result.get(), partial.get(), nullptr, n,
                                     nullptr),
              cudaSuccess);
    EXPECT_TRUE(result.GuardsIntact() && partial.GuardsIntact());
    EXPECT_EQ(result.values()[0], 0.0);
    EXPECT_EQ(partial.values(), std::vector<double>(4, -1.0));
  }
}

// A batch: each tensor's sum bitwise its sum alone, whatever its size
// (none, one block, the full 1024 blocks with a second grid-stride turn),
// every partial within the batch's run, the results in order.
TEST(EmulatedOptimizerTest, SumSquaresBatchIsEachTensorAlone) {
  constexpr int kTensors = cuda::kSumSquaresBatchTensors;
  std::vector<std::vector<float>> xs;
  std::vector<std::unique_ptr<Guarded<float>>> ins;
  cuda::SumSquaresBatch batch;
  int64_t partials = 0;
  for (int t = 0; t < kTensors; ++t) {
    const int64_t n =
        t == 3 ? kSumGrid + 1001 : (t % 7 == 0 ? 0 : 1 + t * 389 % 5000);
    xs.push_back(Random(std::max<int64_t>(n, 1), 200 + t, -2, 2));
    xs.back().resize(n);
    ins.push_back(std::make_unique<Guarded<float>>(xs.back()));
    batch.x[t] = ins.back()->get();
    batch.n[t] = n;
    partials += cuda::SumSquaresBlocks(n);
  }
  batch.count = kTensors;
  Guarded<double> results(std::vector<double>(kTensors, -1.0));
  Guarded<double> partial(std::vector<double>(partials + 5, -1.0));
  ASSERT_EQ(cuda::LaunchSumSquaresBatch(results.get(), partial.get(), partials,
                                        batch, nullptr),
            cudaSuccess);
  EXPECT_TRUE(results.GuardsIntact() && partial.GuardsIntact());
  const std::vector<double> got = results.values();
  for (int t = 0; t < kTensors; ++t) {
    EXPECT_TRUE(SameBits(std::vector<double>{got[t]},
                         std::vector<double>{RunSumSquares(xs[t]).result}))
        << "tensor " << t << " of " << batch.n[t];
  }
  const std::vector<double> left = partial.values();
  for (int64_t b = partials; b < partials + 5; ++b) {
    EXPECT_EQ(left[b], -1.0) << "partial " << b << " past the batch's";
  }
}

TEST(EmulatedOptimizerTest, SumSquaresBatchRefusesBadCountsAndSmallRoom) {
  Guarded<float> in(Random(3000, 9));
  Guarded<double> results(std::vector<double>(2, -1.0));
  Guarded<double> partial(std::vector<double>(64, -1.0));
  cuda::SumSquaresBatch batch;
  batch.x[0] = batch.x[1] = in.get();
  batch.n[0] = batch.n[1] = 3000;  // 12 partials each
  for (const int count : {-1, cuda::kSumSquaresBatchTensors + 1}) {
    batch.count = count;
    EXPECT_EQ(cuda::LaunchSumSquaresBatch(results.get(), partial.get(), 64,
                                          batch, nullptr),
              cudaErrorInvalidValue);
  }
  batch.count = 2;
  EXPECT_EQ(cuda::LaunchSumSquaresBatch(results.get(), partial.get(), 23, batch,
                                        nullptr),
            cudaErrorInvalidValue)
      << "24 partials do not fit in 23";
  EXPECT_EQ(results.values(), std::vector<double>(2, -1.0));
  EXPECT_EQ(cuda::LaunchSumSquaresBatch(results.get(), partial.get(), 24, batch,
                                        nullptr),
            cudaSuccess);
  EXPECT_EQ(results.values()[0], results.values()[1]);
}

// ----------------------------------------------------------------- AdamW

constexpr int64_t kFullGrid = 8192 * 256;  // ElementwiseBlocks' cap

// Step 7 of AdamW with GPT-like settings; the bias corrections in fp32, as
// the optimizer hands them over.
cuda::AdamWStep Step() {
  cuda::AdamWStep s{};
  s.lr = 3e-3f;
  s.beta1 = 0.9f;
  s.beta2 = 0.95f;
  s.eps = 1e-8f;
  s.weight_decay = 0.1f;
  s.grad_scale = 0.25f;
  s.bias_correction1 = 1.f - std::pow(s.beta1, 7.f);
  s.bias_correction2 = 1.f - std::pow(s.beta2, 7.f);
  return s;
}

struct AdamWState {
  std::vector<float> param, grad, m, v;
};

AdamWState Initial(int64_t n) {
  AdamWState s{Random(n, 71), Random(n, 72, -2, 2), Random(n, 73, -0.1, 0.1),
               Random(n, 74, 0, 0.01)};
  // No gradient and no history: the update is the weight decay alone.
  s.grad[1] = s.m[1] = s.v[1] = 0;
  s.grad[2] = 1e4f;  // a gradient far outside its history
  return s;
}

// The CPU backend's fp32 AdamW (engine/cpu/cpu_backend.cc), term for term.
void CpuAdamW(AdamWState& s, const cuda::AdamWStep& u) {
  for (size_t i = 0; i < s.param.size(); ++i) {
    const float g = s.grad[i] * u.grad_scale;
    s.m[i] = u.beta1 * s.m[i] + (1.f - u.beta1) * g;
    s.v[i] = u.beta2 * s.v[i] + (1.f - u.beta2) * g * g;
    const float m_hat = s.m[i] / u.bias_correction1;
    const float v_hat = s.v[i] / u.bias_correction2;
    s.param[i] -= u.lr * (m_hat / (std::sqrt(v_hat) + u.eps) +
                          u.weight_decay * s.param[i]);
  }
}

// AdamW in double from the same fp32 inputs, with bounds on the kernel's
// fp32 results, to first order in u and doubled for the rest. 1 - beta is
// exact in fp32 (Sterbenz: beta in [1/2, 1]); sqrtf and the divisions are
// correctly rounded, on the GPU too (no fast math).
//   g = grad gs: 1 rounding.
//   m = b1 m0 + (1 - b1) g: e_m = gamma_3 (|b1 m0| + |(1 - b1) g|).
//   v = b2 v0 + (1 - b2) g g: e_v = gamma_5 (b2 v0 + (1 - b2) g^2),
//     relative (every term is >= 0).
//   den = sqrt(v / bc2) + eps: the divide, the root (halving v's relative
//     error) and the add (eps >= 0): relative gamma_5.
//   q = (m / bc1) / den: e_m / (bc1 den) + gamma_7 |q|.
//   p' = p - lr (q + wd p): e_q + u |wd p| + u |q + wd p| scaled by lr,
//     then u |lr (q + wd p)| + u |p'|.
struct AdamWWant {
  std::vector<double> param, param_tol, m, m_tol, v, v_tol;
};

AdamWWant HostAdamW(const AdamWState& s, const cuda::AdamWStep& u) {
  const size_t n = s.param.size();
  AdamWWant w{std::vector<double>(n), std::vector<double>(n),
              std::vector<double>(n), std::vector<double>(n),
              std::vector<double>(n), std::vector<double>(n)};
  const double c1 = 1.f - u.beta1, c2 = 1.f - u.beta2;
  for (size_t i = 0; i < n; ++i) {
    const double g = static_cast<double>(s.grad[i]) * u.grad_scale;
    const double b1m = static_cast<double>(u.beta1) * s.m[i];
    const double b2v = static_cast<double>(u.beta2) * s.v[i];
    w.m[i] = b1m + c1 * g;
    w.m_tol[i] = 2 * Gamma(3) * (std::abs(b1m) + std::abs(c1 * g));
    w.v[i] = b2v + c2 * g * g;
    w.v_tol[i] = 2 * Gamma(5) * w.v[i];
    const double den = std::sqrt(w.v[i] / u.bias_correction2) + u.eps;
    const double q = w.m[i] / u.bias_correction1 / den;
    const double decay = static_cast<double>(u.weight_decay) * s.param[i];
    const double step = u.lr * (q + decay);
    w.param[i] = s.param[i] - step;
    const double e_q =
        w.m_tol[i] / 2 / (u.bias_correction1 * den) + Gamma(7) * std::abs(q);
    w.param_tol[i] =
        2 * (u.lr * (e_q + kU * std::abs(decay) + kU * std::abs(q + decay)) +
             kU * std::abs(step) + kU * std::abs(w.param[i]));
  }
  return w;
}

struct AdamWRun {
  std::vector<float> param, m, v;
  std::vector<uint16_t> working;  // empty when none was asked for
};

AdamWRun RunAdamW(const AdamWState& s, const cuda::AdamWStep& u,
                  bool with_working) {
  const int64_t n = static_cast<int64_t>(s.param.size());
  Guarded<float> param(s.param), grad(s.grad), m(s.m), v(s.v);
  Guarded<uint16_t> working(std::vector<uint16_t>(n, 0x7777));
  EXPECT_EQ(
      cuda::LaunchAdamW(param.get(), grad.get(), m.get(), v.get(),
                        with_working ? working.get() : nullptr, n, u, nullptr),
      cudaSuccess);
  EXPECT_TRUE(param.GuardsIntact() && grad.GuardsIntact() && m.GuardsIntact() &&
              v.GuardsIntact() && working.GuardsIntact());
  ExpectBitwise(grad.values(), s.grad, "grad (read only)");
  AdamWRun r{param.values(), m.values(), v.values(), {}};
  if (with_working) {
    r.working = working.values();
  } else {
    EXPECT_EQ(working.values(), std::vector<uint16_t>(n, 0x7777));
  }
  return r;
}

TEST(EmulatedOptimizerTest, AdamWWithinBoundWithBf16WorkingCopy) {
  const cuda::AdamWStep u = Step();
  for (const int64_t n : {kFullGrid + 1001, int64_t{1001}, int64_t{3}}) {
    const AdamWState s = Initial(n);
    const AdamWWant want = HostAdamW(s, u);
    AdamWState cpu = s;
    CpuAdamW(cpu, u);
    const AdamWRun got = RunAdamW(s, u, /*with_working=*/true);
    ExpectWithin(got.m, want.m, want.m_tol, "m");
    ExpectWithin(got.v, want.v, want.v_tol, "v");
    ExpectWithin(got.param, want.param, want.param_tol, "param");
    ExpectBitwise(got.m, cpu.m, "m against the CPU's");
    ExpectBitwise(got.v, cpu.v, "v against the CPU's");
    ExpectBitwise(got.param, cpu.param, "param against the CPU's");
    std::vector<uint16_t> rounded(n);
    FloatsToBf16(got.param.data(), n, rounded.data());
    EXPECT_EQ(got.working, rounded) << "the working copy, n = " << n;
    // Without a working copy: the same master and moments, bitwise.
    const AdamWRun plain = RunAdamW(s, u, /*with_working=*/false);
    ExpectBitwise(plain.param, got.param, "param without a working copy");
    ExpectBitwise(plain.m, got.m, "m without a working copy");
    ExpectBitwise(plain.v, got.v, "v without a working copy");
  }
}

TEST(EmulatedOptimizerTest, AdamWOfNothingWritesNothing) {
  const AdamWState s = Initial(4);
  for (const int64_t n : {int64_t{0}, int64_t{-2}}) {
    Guarded<float> param(s.param), grad(s.grad), m(s.m), v(s.v);
    Guarded<uint16_t> working(std::vector<uint16_t>(4, 0x7777));
    EXPECT_EQ(cuda::LaunchAdamW(param.get(), grad.get(), m.get(), v.get(),
                                working.get(), n, Step(), nullptr),
              cudaSuccess);
    EXPECT_TRUE(SameBits(param.values(), s.param) &&
                SameBits(m.values(), s.m) && SameBits(v.values(), s.v));
    EXPECT_EQ(working.values(), std::vector<uint16_t>(4, 0x7777));
  }
}

// A batch of tensors in one launch: every tensor, whatever its size (none,
// a few, more than a grid) and its own weight decay, bitwise what the CPU's
// loop makes of it alone, its working copy (on every other tensor) the
// rounded master, nothing written outside any of them.
TEST(EmulatedOptimizerTest, AdamWBatchUpdatesEachTensorAsAlone) {
  constexpr int kTensors = cuda::kAdamWBatchTensors;
  std::vector<AdamWState> states;
  std::vector<std::unique_ptr<Guarded<float>>> buffers;
  std::vector<std::unique_ptr<Guarded<uint16_t>>> workings;
  cuda::AdamWBatch batch;
  const cuda::AdamWStep u = Step();
  for (int i = 0; i < kTensors; ++i) {
    const int64_t n = i == 7 ? kFullGrid + 3 : (i % 5 == 0 ? 0 : 3 + i * 97);
    states.push_back(Initial(std::max<int64_t>(n, 3)));
    AdamWState& s = states.back();
    for (auto* x : {&s.param, &s.grad, &s.m, &s.v}) x->resize(n);
    const size_t first = buffers.size();  // param, grad, m, v
    for (const std::vector<float>* x : {&s.param, &s.grad, &s.m, &s.v}) {
      buffers.push_back(std::make_unique<Guarded<float>>(*x));
    }
    workings.push_back(
        std::make_unique<Guarded<uint16_t>>(std::vector<uint16_t>(n, 0x7777)));
    batch.tensors[i] = {buffers[first]->get(),
                        buffers[first + 1]->get(),
                        buffers[first + 2]->get(),
                        buffers[first + 3]->get(),
                        i % 2 == 0 ? workings.back()->get() : nullptr,
                        n,
                        0.05f * static_cast<float>(i % 3)};
  }
  batch.count = kTensors;
  ASSERT_EQ(cuda::LaunchAdamWBatch(batch, u, nullptr), cudaSuccess);
  for (int i = 0; i < kTensors; ++i) {
    cuda::AdamWStep alone = u;
    alone.weight_decay = batch.tensors[i].weight_decay;
    AdamWState want = states[i];
    CpuAdamW(want, alone);
    const std::string at = "tensor " + std::to_string(i);
    const auto& param = *buffers[4 * i];
    const auto& m = *buffers[4 * i + 2];
    const auto& v = *buffers[4 * i + 3];
    for (int k = 0; k < 4; ++k) {
      EXPECT_TRUE(buffers[4 * i + k]->GuardsIntact()) << at;
    }
    EXPECT_TRUE(workings[i]->GuardsIntact()) << at;
    ExpectBitwise(param.values(), want.param, (at + " param").c_str());
    ExpectBitwise(m.values(), want.m, (at + " m").c_str());
    ExpectBitwise(v.values(), want.v, (at + " v").c_str());
    const int64_t n = batch.tensors[i].n;
    std::vector<uint16_t> rounded(n, 0x7777);
    if (i % 2 == 0) FloatsToBf16(want.param.data(), n, rounded.data());
    EXPECT_EQ(workings[i]->values(), rounded) << at << " working copy";
  }
}

TEST(EmulatedOptimizerTest, AdamWBatchOfABadCountIsRefused) {
  cuda::AdamWBatch batch;
  for (const int count : {-1, cuda::kAdamWBatchTensors + 1}) {
    batch.count = count;
    EXPECT_EQ(cuda::LaunchAdamWBatch(batch, Step(), nullptr),
              cudaErrorInvalidValue)
        << "count " << count;
  }
  batch.count = 0;
  EXPECT_EQ(cuda::LaunchAdamWBatch(batch, Step(), nullptr), cudaSuccess);
}

}  // namespace
}  // namespace trainyard::engine
