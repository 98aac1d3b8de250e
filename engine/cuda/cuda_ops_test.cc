// Every CudaBackend op against the CPU reference backend on fresh random
// inputs (engine/cpu/test_inputs.h), and run twice to check it gives
// bitwise the same result each time. Tolerances are per op, each justified
// where it is set: ops doing the same IEEE operations as the CPU must match
// bit for bit; sums in another order are held to the classic bound of
// cuda_test::Gamma on the magnitudes of their terms. GEMMs run in pure fp32
// (no TF32), which is what lets these bounds be tight. Skipped without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/cpu/test_inputs.h"
#include "engine/cuda/cuda_test_support.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

using cuda_test::ExpectNear;
using cuda_test::Gamma;
using cuda_test::Zeros;

constexpr double kU = 0x1p-24;  // fp32 unit roundoff

using CudaOpsTest = cuda_test::CudaVsCpuTest;

// Fill, Scale, Add and ReLU do one IEEE operation per element, as on the
// CPU: bit for bit, in place too.
TEST_F(CudaOpsTest, ElementwiseOpsMatchTheCpuExactly) {
  constexpr int64_t n = 100'003;  // not a multiple of any block size
  const auto a = Random(n, 1), b = Random(n, 2);
  std::vector<float> c_out = a;
  auto g = Up(a);
  auto gb = Up(b);
  gpu_->Add(g.get(), g.get(), gb.get(), n);
  cpu_->Add(c_out.data(), c_out.data(), b.data(), n);
  EXPECT_EQ(Down(g), c_out);
  gpu_->Scale(g.get(), n, -0.37f);
  cpu_->Scale(c_out.data(), n, -0.37f);
  EXPECT_EQ(Down(g), c_out);
  auto relu = Zeros<float>(*gpu_, n);
  std::vector<float> c_relu(n);
  gpu_->ReluForward(relu.get(), g.get(), n);
  cpu_->ReluForward(c_relu.data(), c_out.data(), n);
  EXPECT_EQ(Down(relu), c_relu);
  gpu_->ReluBackward(gb.get(), gb.get(), relu.get(), n);  // in place
  std::vector<float> c_dx = b;
  cpu_->ReluBackward(c_dx.data(), c_dx.data(), c_relu.data(), n);
  EXPECT_EQ(Down(gb), c_dx);
  gpu_->Fill(g.get(), n, 2.5f);
  EXPECT_EQ(Down(g), std::vector<float>(n, 2.5f));
  gpu_->Fill(g.get(), 0, 1.f);  // nothing to do, and no error
  ASSERT_TRUE(gpu_->Synchronize().ok());
}

// GELU uses the CPU's formula, tanh through one expf: the results differ
// only by expf's rounding (CUDA's expf is within 2 ulp, glibc's within 1)
// and FMA contraction, a few ulp of each intermediate: 1e-5 relative. Where
// tanh saturates (x near -5), 1 + t cancels, so one ulp of t (6e-8) can
// move the output by up to 0.5 |x| 6e-8 < 1e-6 and the derivative, whose
// sech^2 term is multiplied by about 9 there, by up to ~2e-6: absolute
// floors of 1e-6 and 1e-5.
TEST_F(CudaOpsTest, GeluMatchesCpu) {
  constexpr int64_t n = 50'001;
  const auto x = Random(n, 3, -6, 6), dout = Random(n, 4);
  auto gx = Up(x);
  auto gdout = Up(dout);
  auto gout = Zeros<float>(*gpu_, n);
  std::vector<float> out(n), dx(n);
  gpu_->GeluForward(gout.get(), gx.get(), n);
  cpu_->GeluForward(out.data(), x.data(), n);
  ExpectNear(Down(gout), out, 1e-5, 1e-6, "gelu");
  auto gdx = Zeros<float>(*gpu_, n);
  gpu_->GeluBackward(gdx.get(), gx.get(), gdout.get(), n);
  cpu_->GeluBackward(dx.data(), x.data(), dout.data(), n);
  const std::vector<float> got = Down(gdx);
  ExpectNear(got, dx, 1e-5, 1e-5, "dgelu");
  gpu_->GeluBackward(gdout.get(), gx.get(), gdout.get(), n);  // in place
  EXPECT_EQ(Down(gdout), got);
}

// AdamW does the CPU's arithmetic term for term (sqrtf and division are
// correctly rounded on both); only FMA contraction differs, a few ulp of
// each result.
TEST_F(CudaOpsTest, AdamWMatchesCpu) {
  constexpr int64_t n = 10'007;
  auto param = Random(n, 5), grad = Random(n, 6), m = Random(n, 7, -0.1f, 0.1f);
  auto v = Random(n, 8, 0.01f, 1.f);
  AdamWUpdate u;
  u.lr = 1e-3f;
  u.weight_decay = 0.1f;
  u.grad_scale = 0.7f;
  u.bias_correction1 = 1 - std::pow(0.9f, 3.f);
  u.bias_correction2 = 1 - std::pow(0.999f, 3.f);
  auto gp = Up(param), gg = Up(grad), gm = Up(m), gv = Up(v);
  gpu_->AdamW(gp.get(), gg.get(), gm.get(), gv.get(), nullptr, n, u);
  cpu_->AdamW(param.data(), grad.data(), m.data(), v.data(), n, u);
  // m = beta1 m + (1 - beta1) g may cancel: its error is relative to the
  // two terms (|0.9 m| + |0.1 g| <= 0.16 here), not to the result.
  ExpectNear(Down(gm), m, 4 * kU, 4 * kU * 0.16, "m");
  ExpectNear(Down(gv), v, 4 * kU, 1e-12, "v");
  ExpectNear(Down(gp), param, 1e-6, 1e-7, "param");
}

// The batched update (64 tensors a launch, 150 tensors here: three
// launches) is bitwise the update of each tensor alone, with each
// tensor's own weight decay.
TEST_F(CudaOpsTest, AdamWEachIsAdamWOfEachTensor) {
  constexpr int kTensors = 150;
  std::vector<int64_t> sizes;
  for (int i = 0; i < kTensors; ++i)
    sizes.push_back(i % 9 == 0 ? 0 : 1 + i * 211);
  AdamWUpdate u;
  u.lr = 1e-3f;
  u.grad_scale = 0.7f;
  u.bias_correction1 = 1 - std::pow(0.9f, 3.f);
  u.bias_correction2 = 1 - std::pow(0.999f, 3.f);
  // param, grad, m and v of each tensor
  std::vector<cuda_test::DeviceArray<float>> each, alone;
  std::vector<Backend::AdamWTensor> tensors;
  for (int i = 0; i < kTensors; ++i) {
    const int64_t n = std::max<int64_t>(sizes[i], 1);
    for (int copy = 0; copy < 2; ++copy) {
      auto& into = copy == 0 ? each : alone;
      into.push_back(Up(Random(n, 100 + i)));
      into.push_back(Up(Random(n, 300 + i)));
      into.push_back(Up(Random(n, 500 + i, -0.1f, 0.1f)));
      into.push_back(Up(Random(n, 700 + i, 0.01f, 1.f)));
    }
    const float decay = 0.05f * static_cast<float>(i % 3);
    tensors.push_back({each[4 * i].get(), each[4 * i + 1].get(),
                       each[4 * i + 2].get(), each[4 * i + 3].get(), nullptr,
                       sizes[i], decay});
    AdamWUpdate one = u;
    one.weight_decay = decay;
    gpu_->AdamW(alone[4 * i].get(), alone[4 * i + 1].get(),
                alone[4 * i + 2].get(), alone[4 * i + 3].get(), nullptr,
                sizes[i], one);
  }
  gpu_->AdamWEach(tensors, u);
  ASSERT_TRUE(gpu_->Synchronize().ok());
  for (size_t k = 0; k < each.size(); ++k) {
    EXPECT_EQ(Down(each[k]), Down(alone[k])) << "tensor " << k / 4;
  }
}

// Squares of floats are exact in double, so the only difference is the
// order of n double additions: within 2 gamma_n in double of the sum.
TEST_F(CudaOpsTest, SumSquaresMatchesCpuAndRepeatsExactly) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{255}, int64_t{1'000'007}}) {
    const auto x = Random(std::max<int64_t>(n, 1), 9, -3, 3);
    auto gx = Up(x);
    const double got = gpu_->SumSquares(gx.get(), n);
    const double want = cpu_->SumSquares(x.data(), n);
    EXPECT_NEAR(got, want, 2.0 * n * 0x1p-53 * want) << "n=" << n;
    EXPECT_EQ(got, gpu_->SumSquares(gx.get(), n)) << "n=" << n;
  }
}

// The batched sums (the gradient norm's) are each tensor's SumSquares bit
// for bit, across more tensors than one batch copies back at once.
TEST_F(CudaOpsTest, SumSquaresEachIsSumSquaresOfEachTensor) {
  const auto x = Random(5000, 12, -3, 3);
  auto gx = Up(x);
  std::vector<Backend::FloatTensor> tensors;
  for (int64_t i = 0; i < 9000; ++i) {
    const int64_t n = i % 7 == 0 ? 0 : 1 + i * 37 % 3000;  // empty ones too
    tensors.push_back({gx.get() + i % 1000, n});
  }
  const std::vector<double> sums = gpu_->SumSquaresEach(tensors);
  ASSERT_EQ(sums.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); i += 97) {
    EXPECT_EQ(sums[i], gpu_->SumSquares(tensors[i].data, tensors[i].n))
        << "tensor " << i;
  }
  EXPECT_EQ(sums.back(),
            gpu_->SumSquares(tensors.back().data, tensors.back().n));
  EXPECT_TRUE(gpu_->Synchronize().ok());
}

// The classifier's hits: argmax == target, the first index on ties, as
// the CPU, whether the tied columns are read by one thread of the row's
// block (5 and 517: 512 threads apart) or by two (7 and 300).
TEST_F(CudaOpsTest, ClassifierHitsTakeTheFirstOfTies) {
  constexpr int64_t rows = 6, classes = 600;  // more columns than threads
  auto logits = Random(rows * classes, 10);
  for (int64_t c : {5, 517}) logits[0 * classes + c] = 9.f;
  for (int64_t c : {7, 300}) logits[1 * classes + c] = 9.f;
  for (int64_t c : {599, 598}) logits[2 * classes + c] = 9.f;
  logits[3 * classes + 0] = 9.f;
  for (int64_t c = 0; c < classes; ++c) logits[4 * classes + c] = 1.f;
  const std::vector<int32_t> hit_first = {5, 7, 598, 0, 0, 17};
  const std::vector<int32_t> hit_later = {517, 300, 599, 1, 1, 17};
  auto gl = Up(logits);
  for (const auto* targets : {&hit_first, &hit_later}) {
    std::vector<float> losses(rows);
    std::vector<int32_t> hits(rows);
    cpu_->SoftmaxCrossEntropyForward(losses.data(), hits.data(), nullptr,
                                     logits.data(), targets->data(), rows,
                                     classes);
    auto gt = Up(*targets);
    auto gloss = Zeros<float>(*gpu_, rows);
    auto ghits = Zeros<int32_t>(*gpu_, rows);
    gpu_->SoftmaxCrossEntropyForward(gloss.get(), ghits.get(), nullptr,
                                     gl.get(), gt.get(), rows, classes);
    EXPECT_EQ(Down(ghits), hits);
  }
}

// The fused classifier: the row sum of `classes` exponentials in another
// order (2 gamma_classes relative), expf's rounding (a few ulp) and the
// online rescaling by exp(m_old - m_new) — at most the thread's share of
// the row plus the 5 warp and 15 block merges, about 25 rescales of about 2
// ulp each — carry into every probability relative to itself, and into
// the loss (a log of the sum) absolutely. The gradient is p - onehot times
// the scale: p's error, at most `rel` since p <= 1, absolutely.
TEST_F(CudaOpsTest, FusedClassifierMatchesCpu) {
  constexpr int64_t rows = 37, classes = 1000;
  constexpr float scale = 0.25f;
  const auto logits = Random(rows * classes, 11, -8, 8);
  std::vector<int32_t> targets(rows);
  for (int64_t r = 0; r < rows; ++r) targets[r] = (r * 277) % classes;
  std::vector<float> losses(rows), d(rows * classes);
  cpu_->SoftmaxCrossEntropyForward(losses.data(), nullptr, nullptr,
                                   logits.data(), targets.data(), rows,
                                   classes);
  cpu_->SoftmaxCrossEntropyBackward(d.data(), logits.data(), nullptr,
                                    targets.data(), scale, rows, classes);
  auto gl = Up(logits);
  auto gt = Up(targets);
  auto gloss = Zeros<float>(*gpu_, rows);
  gpu_->SoftmaxCrossEntropyForward(gloss.get(), nullptr, nullptr, gl.get(),
                                   gt.get(), rows, classes);
  const double rel = 2 * Gamma(classes) + 64 * kU;
  ExpectNear(Down(gloss), losses, 2 * kU, rel, "losses");
  const std::vector<float> first = Down(gloss);
  gpu_->SoftmaxCrossEntropyForward(gloss.get(), nullptr, nullptr, gl.get(),
                                   gt.get(), rows, classes);
  EXPECT_EQ(Down(gloss), first) << "the same logits, another loss";

  auto gd = Zeros<float>(*gpu_, rows * classes);
  gpu_->SoftmaxCrossEntropyBackward(gd.get(), gl.get(), nullptr, gt.get(),
                                    scale, rows, classes);
  const std::vector<float> out_of_place = Down(gd);
  ExpectNear(out_of_place, d, 2 * kU, scale * rel, "dlogits");
  // In place, as the models run it: the gradient over the logits, bitwise
  // the same as into a buffer of its own.
  gpu_->SoftmaxCrossEntropyBackward(gl.get(), gl.get(), nullptr, gt.get(),
                                    scale, rows, classes);
  EXPECT_EQ(Down(gl), out_of_place);
  // From the forward's log-sum-exp (the GPT's step): no second pass over
  // the logits, p = exp(x - lse) within the same bound and the lse's
  // rounding (|x - lse| <= 16 + log(classes)).
  auto fresh = Up(logits);
  auto glse = Zeros<float>(*gpu_, rows);
  gpu_->SoftmaxCrossEntropyForward(gloss.get(), nullptr, glse.get(),
                                   fresh.get(), gt.get(), rows, classes);
  EXPECT_EQ(Down(gloss), first) << "asking for the lse changed the loss";
  gpu_->SoftmaxCrossEntropyBackward(fresh.get(), fresh.get(), glse.get(),
                                    gt.get(), scale, rows, classes);
  ExpectNear(Down(fresh), d, 2 * kU, scale * (rel + 2 * 32 * kU),
             "dlogits from lse");
}

// Rows whose logits are NaN must give NaN losses (a diverged run is seen),
// and a row of one class has loss 0 and gradient 0.
TEST_F(CudaOpsTest, FusedClassifierEdgeRows) {
  constexpr int64_t classes = 3;
  const std::vector<float> logits = {0.f, std::nanf(""), 1.f, 5.f, 5.f, 5.f};
  const std::vector<int32_t> targets = {0, 2};
  auto gl = Up(logits);
  auto gt = Up(targets);
  auto gloss = Zeros<float>(*gpu_, 2);
  gpu_->SoftmaxCrossEntropyForward(gloss.get(), nullptr, nullptr, gl.get(),
                                   gt.get(), 2, classes);
  const std::vector<float> loss = Down(gloss);
  EXPECT_TRUE(std::isnan(loss[0]));
  EXPECT_NEAR(loss[1], std::log(3.0), 1e-6);
  auto one = Up(std::vector<float>{7.f});
  auto zero = Up(std::vector<int32_t>{0});
  gpu_->SoftmaxCrossEntropyBackward(one.get(), one.get(), nullptr, zero.get(),
                                    1.f, 1, 1);
  EXPECT_EQ(Down(one), std::vector<float>{0.f});
}

// Embeddings: the forward is one add per element, and the backward adds
// each position's gradient in ascending (b, t) order exactly as the CPU
// does: bit for bit, accumulating onto what the tables held.
TEST_F(CudaOpsTest, EmbeddingMatchesCpuExactly) {
  constexpr int64_t B = 3, T = 37, C = 70, V = 50;
  std::vector<int32_t> tokens(B * T);
  for (int64_t i = 0; i < B * T; ++i) tokens[i] = (i * i + 3 * i) % V;
  const auto wte = Random(V * C, 12), wpe = Random(T * C, 13);
  const auto dout = Random(B * T * C, 14);
  auto dwte = Random(V * C, 15), dwpe = Random(T * C, 16);
  auto gtok = Up(tokens);
  auto gwte = Up(wte), gwpe = Up(wpe), gdout = Up(dout);
  auto gdwte = Up(dwte), gdwpe = Up(dwpe);
  auto gout = Zeros<float>(*gpu_, B * T * C);
  std::vector<float> out(B * T * C);
  gpu_->EmbeddingForward(gout.get(), gtok.get(), gwte.get(), gwpe.get(), B, T,
                         C);
  cpu_->EmbeddingForward(out.data(), tokens.data(), wte.data(), wpe.data(), B,
                         T, C);
  EXPECT_EQ(Down(gout), out);
  gpu_->EmbeddingBackward(gdwte.get(), gdwpe.get(), gdout.get(), gtok.get(), B,
                          T, C);
  cpu_->EmbeddingBackward(dwte.data(), dwpe.data(), dout.data(), tokens.data(),
                          B, T, C);
  EXPECT_EQ(Down(gdwte), dwte);
  EXPECT_EQ(Down(gdwpe), dwpe);
}

// The token table's owner blocks list a token's positions in rounds of
// 1024 and cover the channels in passes of 1024: a token at 2000 of 2400
// positions and 1100 channels take both paths, and must still add in
// ascending position order, bit for bit the CPU's sums.
TEST_F(CudaOpsTest, EmbeddingBackwardOfAFrequentTokenMatchesCpuExactly) {
  constexpr int64_t B = 3, T = 800, C = 1100, V = 7;
  std::vector<int32_t> tokens(B * T, 4);
  for (int64_t i = 0; i < B * T; i += 6)
    tokens[i] = static_cast<int32_t>(i % V);
  const auto dout = Random(B * T * C, 17);
  auto dwte = Random(V * C, 18), dwpe = Random(T * C, 19);
  auto gtok = Up(tokens);
  auto gdout = Up(dout);
  auto gdwte = Up(dwte), gdwpe = Up(dwpe);
  gpu_->EmbeddingBackward(gdwte.get(), gdwpe.get(), gdout.get(), gtok.get(), B,
                          T, C);
  cpu_->EmbeddingBackward(dwte.data(), dwpe.data(), dout.data(), tokens.data(),
                          B, T, C);
  EXPECT_EQ(Down(gdwte), dwte);
  EXPECT_EQ(Down(gdwpe), dwpe);
}

}  // namespace
}  // namespace trainyard::engine
