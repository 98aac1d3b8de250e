// The CUDA backend in bf16 mixed precision against the CPU backend in bf16
// (the same bf16 inputs, fp32 math, one rounding on store), op by op on
// fresh random inputs; a GPT's 50-step loss curve in bf16 on the GPU
// against fp32 on the CPU; and an exact resume in bf16. Skips without a GPU.
//
// Tolerances. Both backends compute an op's fp32 result from identical bf16
// inputs; they differ only in summation order and expf's last bits, by at
// most delta = 2 gamma_n * (sum of |terms|) (cuda_test_support.h). A bf16
// store then rounds with relative error <= 2^-8 (8 significant bits), and
// two fp32 values delta apart can round to neighbouring bf16 values, one
// bf16 ulp (<= 2^-7 relative) apart. So a bf16 output is within
// delta + 2^-7 |want| (+ a small absolute term near zero, where ulps
// shrink), and an fp32 output (weight gradients, statistics) within delta.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <utility>
#include <vector>

#include "engine/core/adamw.h"
#include "engine/core/bf16.h"
#include "engine/core/gpt.h"
#include "engine/core/rng.h"
#include "engine/core/trainer_test_support.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/test_inputs.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_test_support.h"
#include "gtest/gtest.h"

#if defined(TRAINYARD_CUDA_EMULATION)
#include "engine/cuda/emulation/cublas_host.h"
#endif

namespace trainyard::engine::cuda_test {
namespace {

constexpr double kBf16Ulp = 0x1p-7;  // one bf16 ulp, relative (at most)

std::vector<uint16_t> ToBf16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  FloatsToBf16(x.data(), static_cast<int64_t>(x.size()), out.data());
  return out;
}

std::vector<float> FromBf16(const std::vector<uint16_t>& x) {
  std::vector<float> out(x.size());
  Bf16ToFloats(x.data(), static_cast<int64_t>(x.size()), out.data());
  return out;
}

// A bf16 backend's options with an arena of `arena_bytes`, each op waited
// for (an asynchronous fault names its op).
CudaBackendOptions Bf16Options(int64_t arena_bytes = int64_t{256} << 20) {
  CudaBackendOptions options;
  options.arena_bytes = arena_bytes;
  options.sync_after_each_op = true;
  options.activation_dtype = DType::kBF16;
  return options;
}

class CudaBf16Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!DevicePresent()) GTEST_SKIP() << kNoDevice;
    auto gpu = CudaBackend::Create(Bf16Options(int64_t{1} << 30));
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = *std::move(gpu);
    CpuBackendOptions cpu;
    cpu.activation_dtype = DType::kBF16;
    cpu_ = *CpuBackend::Create(cpu);
  }
  void TearDown() override {
    if (gpu_ != nullptr) {
      const absl::Status s = gpu_->Synchronize();
      EXPECT_TRUE(s.ok()) << s;
    }
  }

  // A bf16 activation tensor on the GPU and its host twin, from fp32.
  struct Act {
    DeviceArray<uint16_t> dev;
    std::vector<uint16_t> host;
  };
  Act MakeAct(int64_t n, uint64_t seed, float lo = -1, float hi = 1) {
    Act a;
    a.host = ToBf16(Random(n, seed, lo, hi));
    a.dev = Upload(*gpu_, a.host);
    return a;
  }
  Act ZeroAct(int64_t n) {
    Act a;
    a.host.assign(n, 0);
    a.dev = Zeros<uint16_t>(*gpu_, n);
    return a;
  }
  std::vector<float> Got(const Act& a) {
    return FromBf16(Download(*gpu_, a.dev));
  }

  // Tolerance for a bf16 output whose fp32 value sums n terms of
  // magnitude <= term each.
  static std::vector<double> Bf16Tol(const std::vector<float>& want, int64_t n,
                                     double term, double abs = 1e-6) {
    std::vector<double> tol(want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      tol[i] = 2 * Gamma(n) * n * term + kBf16Ulp * std::abs(want[i]) + abs;
    }
    return tol;
  }

  // One attention forward and backward on `backend` of B sequences of T
  // tokens, C channels in NH heads, from host inputs; the launches go to
  // `blocks` and `grids` (LaunchShapes).
  struct AttentionResult {
    std::vector<uint16_t> out;
    std::vector<float> state;
    std::vector<uint16_t> dqkv;
  };
  static AttentionResult RunAttention(CudaBackend& backend,
                                      const std::vector<uint16_t>& qkv,
                                      const std::vector<uint16_t>& dout,
                                      int64_t B, int64_t T, int64_t C,
                                      int64_t NH, std::vector<dim3>* blocks,
                                      std::vector<dim3>* grids);

  std::unique_ptr<CudaBackend> gpu_;
  std::unique_ptr<CpuBackend> cpu_;
};

TEST_F(CudaBf16Test, LinearForwardAndBackward) {
  const int64_t B = 37, I = 64, O = 96;  // odd rows: unaligned bf16 rows too
  Act x = MakeAct(B * I, 1), w = MakeAct(O * I, 2), b = MakeAct(O, 3);
  Act out = ZeroAct(B * O);
  gpu_->LinearForward(out.dev.get(), x.dev.get(), w.dev.get(), b.dev.get(), B,
                      I, O);
  cpu_->LinearForward(out.host.data(), x.host.data(), w.host.data(),
                      b.host.data(), B, I, O);
  const std::vector<float> want = FromBf16(out.host);
  ExpectWithin(Got(out), want, Bf16Tol(want, I + 1, 1.0), "linear out");

  Act dout = MakeAct(B * O, 4), dinp = ZeroAct(B * I);
  std::vector<float> dw(O * I, 0.f), db(O, 0.f);
  auto gdw = Upload(*gpu_, dw), gdb = Upload(*gpu_, db);
  gpu_->LinearBackward(dinp.dev.get(), gdw.get(), gdb.get(), dout.dev.get(),
                       x.dev.get(), w.dev.get(), B, I, O);
  cpu_->LinearBackward(dinp.host.data(), dw.data(), db.data(), dout.host.data(),
                       x.host.data(), w.host.data(), B, I, O);
  const std::vector<float> want_dinp = FromBf16(dinp.host);
  ExpectWithin(Got(dinp), want_dinp, Bf16Tol(want_dinp, O, 1.0), "dinp");
  // fp32 weight gradients: sums of B products of bf16 values (exact in
  // fp32), so only the summation order differs.
  ExpectNear(Download(*gpu_, gdw), dw, 0, 2 * Gamma(B) * B, "dweight");
  ExpectNear(Download(*gpu_, gdb), db, 0, 2 * Gamma(B) * B, "dbias");
}

// The fused GELU epilogue (O a multiple of 8): the pre-activation is
// LinearForward's product, but gelu comes from cuBLASLt's epilogue on the
// unrounded fp32 value where the CPU takes gelu of the rounded bf16 one.
// gelu' < 1.13, so that moves the output by at most 1.13 bf16 ulps of the
// pre-activation; the epilogue's own tanh is allowed 2^-10 relative.
// Without the fused path (O = 100) the op is exactly LinearForward then
// GeluForward on the GPU.
TEST_F(CudaBf16Test, LinearGeluForwardMatchesLinearThenGelu) {
  const int64_t B = 37, I = 64;
  for (const int64_t O : {96, 100}) {
    Act x = MakeAct(B * I, 21), w = MakeAct(O * I, 22), b = MakeAct(O, 23);
    Act pre = ZeroAct(B * O), out = ZeroAct(B * O);
    gpu_->LinearGeluForward(out.dev.get(), pre.dev.get(), x.dev.get(),
                            w.dev.get(), b.dev.get(), B, I, O);
    cpu_->LinearGeluForward(out.host.data(), pre.host.data(), x.host.data(),
                            w.host.data(), b.host.data(), B, I, O);
    const std::vector<float> want_pre = FromBf16(pre.host);
    const std::vector<float> want = FromBf16(out.host);
    ExpectWithin(Got(pre), want_pre, Bf16Tol(want_pre, I + 1, 1.0), "pre");
    std::vector<double> tol = Bf16Tol(want, I + 1, 1.13);
    for (size_t i = 0; i < tol.size(); ++i) {
      tol[i] += 1.13 * kBf16Ulp * std::abs(want_pre[i]) +
                std::ldexp(std::abs(want[i]), -10);
    }
    ExpectWithin(Got(out), want, tol, "gelu(pre)");
    if (O % 8 != 0) {
      Act split_pre = ZeroAct(B * O), split = ZeroAct(B * O);
      gpu_->LinearForward(split_pre.dev.get(), x.dev.get(), w.dev.get(),
                          b.dev.get(), B, I, O);
      gpu_->GeluForward(split.dev.get(), split_pre.dev.get(), B * O);
      EXPECT_EQ(Download(*gpu_, pre.dev), Download(*gpu_, split_pre.dev));
      EXPECT_EQ(Download(*gpu_, out.dev), Download(*gpu_, split.dev));
    }
  }
}

// The GELU gradient epilogue (I a multiple of 8): the product dout . W
// times gelu'(pre) rounded once, where the CPU rounds the product to bf16
// and then the GELU gradient (|gelu'| < 1.13): the product's tolerance
// scaled by 1.13, plus two bf16 ulps for the two roundings. Without the
// fused path (I = 68) the op is exactly LinearBackward then GeluBackward
// on the GPU. Weight and bias gradients are LinearBackward's either way.
TEST_F(CudaBf16Test, LinearBackwardThroughGeluMatchesTheTwoOps) {
  const int64_t B = 37, O = 48;
  for (const int64_t I : {64, 68}) {
    Act x = MakeAct(B * I, 24), w = MakeAct(O * I, 25),
        dout = MakeAct(B * O, 26);
    Act pre = MakeAct(B * I, 27, -3, 3), dpre = ZeroAct(B * I);
    std::vector<float> dw(O * I, 0.f), db(O, 0.f);
    auto gdw = Upload(*gpu_, dw), gdb = Upload(*gpu_, db);
    gpu_->LinearBackwardThroughGelu(dpre.dev.get(), gdw.get(), gdb.get(),
                                    dout.dev.get(), x.dev.get(), w.dev.get(),
                                    pre.dev.get(), B, I, O);
    cpu_->LinearBackwardThroughGelu(dpre.host.data(), dw.data(), db.data(),
                                    dout.host.data(), x.host.data(),
                                    w.host.data(), pre.host.data(), B, I, O);
    const std::vector<float> want = FromBf16(dpre.host);
    std::vector<double> tol = Bf16Tol(want, O, 1.13);
    for (size_t i = 0; i < tol.size(); ++i) {
      tol[i] += 2 * kBf16Ulp * std::abs(want[i]);
    }
    ExpectWithin(Got(dpre), want, tol, "dpre");
    ExpectNear(Download(*gpu_, gdw), dw, 0, 2 * Gamma(B) * B, "dweight");
    ExpectNear(Download(*gpu_, gdb), db, 0, 2 * Gamma(B) * B, "dbias");
    if (I % 8 != 0) {
      Act split = ZeroAct(B * I);
      auto sdw = Upload(*gpu_, std::vector<float>(O * I, 0.f));
      gpu_->LinearBackward(split.dev.get(), sdw.get(), nullptr, dout.dev.get(),
                           x.dev.get(), w.dev.get(), B, I, O);
      gpu_->GeluBackward(split.dev.get(), pre.dev.get(), split.dev.get(),
                         B * I);
      EXPECT_EQ(Download(*gpu_, dpre.dev), Download(*gpu_, split.dev));
    }
  }
}

// The bias gradients from cuBLASLt's epilogue (BiasGradient::kEpilogue)
// in the weight gradient's product, through both linear backwards: summed
// into what the gradients held (nonzero here), within the column sums'
// bound (fp32 sums of B bf16 values, in an order of cuBLASLt's, plus the
// value held). The input gradient is the same product either way: the
// same bits. On the emulation the test also sees that the epilogue ran.
TEST_F(CudaBf16Test, BiasGradientsFromTheEpilogue) {
  CudaBackendOptions options = Bf16Options();
  options.bias_gradient = BiasGradient::kEpilogue;
  auto made = CudaBackend::Create(options);
  ASSERT_TRUE(made.ok()) << made.status();
  const int64_t B = 37, I = 64, O = 48;
  const std::vector<uint16_t> x = ToBf16(Random(B * I, 41)),
                              w = ToBf16(Random(O * I, 42)),
                              dout = ToBf16(Random(B * O, 43)),
                              pre = ToBf16(Random(B * I, 44, -3, 3));
  const std::vector<float> dw0 = Random(O * I, 45), db0 = Random(O, 46);
  const double tol = 2 * Gamma(B + 1) * (B + 1);
  for (const bool gelu : {false, true}) {
    SCOPED_TRACE(gelu ? "through GELU" : "linear");
    const auto backward = [&](Backend& b, void* dinp, float* dw, float* db,
                              const void* dy, const void* in, const void* wt,
                              const void* p) {
      if (gelu) {
        b.LinearBackwardThroughGelu(dinp, dw, db, dy, in, wt, p, B, I, O);
      } else {
        b.LinearBackward(dinp, dw, db, dy, in, wt, B, I, O);
      }
    };
    std::vector<uint16_t> dinp(B * I, 0);
    std::vector<float> dw = dw0, db = db0;
    backward(*cpu_, dinp.data(), dw.data(), db.data(), dout.data(), x.data(),
             w.data(), pre.data());
    struct Got {
      std::vector<uint16_t> dinp;
      std::vector<float> dw, db;
    };
    const auto run = [&](CudaBackend& b) {
      auto gx = Upload(b, x), gw = Upload(b, w), gdy = Upload(b, dout),
           gpre = Upload(b, pre);
      auto gdw = Upload(b, dw0), gdb = Upload(b, db0);
      auto gdinp = Zeros<uint16_t>(b, B * I);
      backward(b, gdinp.get(), gdw.get(), gdb.get(), gdy.get(), gx.get(),
               gw.get(), gpre.get());
      return Got{Download(b, gdinp), Download(b, gdw), Download(b, gdb)};
    };
    const Got plain = run(*gpu_);
#if defined(TRAINYARD_CUDA_EMULATION)
    const int epilogues = cuda_emulation::LtMatmulBiasGradients();
#endif
    const Got fused = run(**made);
#if defined(TRAINYARD_CUDA_EMULATION)
    EXPECT_EQ(cuda_emulation::LtMatmulBiasGradients(), epilogues + 1);
#endif
    EXPECT_TRUE(fused.dinp == plain.dinp) << "dinp";
    ExpectNear(fused.dw, dw, 0, tol, "dweight");
    ExpectNear(fused.db, db, 0, tol, "dbias");
    ExpectNear(plain.db, db, 0, tol, "dbias (column sums)");
  }
}

TEST_F(CudaBf16Test, LayerNormGeluAddAndEmbedding) {
  const int64_t rows = 33, C = 80;
  Act x = MakeAct(rows * C, 5, -3, 3), w = MakeAct(C, 6), b = MakeAct(C, 7);
  Act out = ZeroAct(rows * C);
  auto mean = Zeros<float>(*gpu_, rows), rstd = Zeros<float>(*gpu_, rows);
  std::vector<float> hmean(rows), hrstd(rows);
  gpu_->LayerNormForward(out.dev.get(), mean.get(), rstd.get(), x.dev.get(),
                         w.dev.get(), b.dev.get(), rows, C);
  cpu_->LayerNormForward(out.host.data(), hmean.data(), hrstd.data(),
                         x.host.data(), w.host.data(), b.host.data(), rows, C);
  const std::vector<float> want = FromBf16(out.host);
  // Normalized values are O(3); the statistics sum C terms of O(9).
  ExpectWithin(Got(out), want, Bf16Tol(want, 2 * C, 9.0, 1e-4), "ln out");
  ExpectNear(Download(*gpu_, rstd), hrstd, 1e-4, 0, "ln rstd");

  Act dout = MakeAct(rows * C, 8), dinp = MakeAct(rows * C, 9);
  std::vector<float> dw(C, 0.f), db(C, 0.f), sums(C, 0.f);
  auto gdw = Upload(*gpu_, dw), gdb = Upload(*gpu_, db);
  auto gsums = Upload(*gpu_, sums);
  gpu_->LayerNormBackward(dinp.dev.get(), gdw.get(), gdb.get(), gsums.get(),
                          dout.dev.get(), x.dev.get(), w.dev.get(), mean.get(),
                          rstd.get(), rows, C);
  cpu_->LayerNormBackward(dinp.host.data(), dw.data(), db.data(), nullptr,
                          dout.host.data(), x.host.data(), w.host.data(),
                          hmean.data(), hrstd.data(), rows, C);
  const std::vector<float> want_dinp = FromBf16(dinp.host);
  const std::vector<float> got_dinp = Got(dinp);
  ExpectWithin(got_dinp, want_dinp, Bf16Tol(want_dinp, 2 * C, 9.0, 1e-3),
               "ln dinp");
  // The column sums are of dinp as stored (bf16), summed in fp32.
  std::vector<float> stored_sums(C, 0.f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < C; ++c) stored_sums[c] += got_dinp[r * C + c];
  }
  ExpectNear(Download(*gpu_, gsums), stored_sums, 1e-5, 1e-5,
             "ln dinp's column sums");
  ExpectNear(Download(*gpu_, gdw), dw, 1e-4, 1e-4, "ln dweight");
  ExpectNear(Download(*gpu_, gdb), db, 1e-5, 1e-5, "ln dbias");

  Act g = ZeroAct(rows * C);
  gpu_->GeluForward(g.dev.get(), x.dev.get(), rows * C);
  cpu_->GeluForward(g.host.data(), x.host.data(), rows * C);
  const std::vector<float> want_g = FromBf16(g.host);
  ExpectWithin(Got(g), want_g, Bf16Tol(want_g, 1, 1e-6, 1e-6), "gelu");

  Act sum = ZeroAct(rows * C);
  gpu_->Add(sum.dev.get(), x.dev.get(), dinp.dev.get(), rows * C);
  cpu_->Add(sum.host.data(), x.host.data(), dinp.host.data(), rows * C);
  EXPECT_EQ(Download(*gpu_, sum.dev), sum.host);  // one add, one rounding

  const int64_t V = 11, T = 3;
  Act wte = MakeAct(V * C, 10), wpe = MakeAct(T * C, 11);
  std::vector<int32_t> tokens(rows / T * T);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = (i * 7) % V;
  auto gtok = Upload(*gpu_, tokens);
  Act emb = ZeroAct(tokens.size() * C);
  gpu_->EmbeddingForward(emb.dev.get(), gtok.get(), wte.dev.get(),
                         wpe.dev.get(), rows / T, T, C);
  cpu_->EmbeddingForward(emb.host.data(), tokens.data(), wte.host.data(),
                         wpe.host.data(), rows / T, T, C);
  EXPECT_EQ(Download(*gpu_, emb.dev), emb.host);
}

TEST_F(CudaBf16Test, AttentionAndClassifier) {
  const int64_t B = 2, T = 37, C = 64, NH = 2;
  Act qkv = MakeAct(B * T * 3 * C, 12), out = ZeroAct(B * T * C);
  const AttentionFloats gs =
      AttentionBufferFloats(gpu_->attention_state(), B, T, C, NH);
  const AttentionFloats cs =
      AttentionBufferFloats(cpu_->attention_state(), B, T, C, NH);
  auto gstate = Zeros<float>(*gpu_, gs.state);
  auto gscratch = Zeros<float>(*gpu_, gs.scratch);
  std::vector<float> cstate(cs.state), cscratch(cs.scratch);
  gpu_->AttentionForward(out.dev.get(), gstate.get(), qkv.dev.get(), B, T, C,
                         NH);
  cpu_->AttentionForward(out.host.data(), cstate.data(), qkv.host.data(), B, T,
                         C, NH);
  const std::vector<float> want = FromBf16(out.host);
  // Each output mixes up to T values of v (|v| <= 1) by probabilities. On
  // the tensor-core path (bf16, head size 32 here) the probabilities are
  // rounded to bf16 before P V: each term off by <= 2^-8 relative, and
  // the probabilities sum to 1, so <= 2^-8 absolute more.
  ExpectWithin(Got(out), want, Bf16Tol(want, T, 1.0, 1e-4 + 0x1p-8), "att out");
  Act dout = MakeAct(B * T * C, 13), dqkv = ZeroAct(B * T * 3 * C);
  gpu_->AttentionBackward(dqkv.dev.get(), gscratch.get(), dout.dev.get(),
                          out.dev.get(), qkv.dev.get(), gstate.get(), B, T, C,
                          NH);
  cpu_->AttentionBackward(dqkv.host.data(), cscratch.data(), dout.host.data(),
                          out.host.data(), qkv.host.data(), cstate.data(), B, T,
                          C, NH);
  const std::vector<float> want_d = FromBf16(dqkv.host);
  // The GPU recomputes probabilities from its own bf16 `out`, which may sit
  // one ulp from the CPU's: allow one more ulp and O(T) terms of O(1).
  ExpectWithin(Got(dqkv), want_d, Bf16Tol(want_d, 2 * T, 2.0, 2e-3),
               "att dqkv");

  const int64_t rows = 19, V = 300;
  Act logits = MakeAct(rows * V, 14, -4, 4);
  std::vector<int32_t> targets(rows);
  for (int64_t i = 0; i < rows; ++i) targets[i] = (i * 31) % V;
  auto gt = Upload(*gpu_, targets);
  auto glosses = Zeros<float>(*gpu_, rows);
  auto ghits = Zeros<int32_t>(*gpu_, rows);
  std::vector<float> losses(rows);
  std::vector<int32_t> hits(rows);
  gpu_->SoftmaxCrossEntropyForward(glosses.get(), ghits.get(), nullptr,
                                   logits.dev.get(), gt.get(), rows, V);
  cpu_->SoftmaxCrossEntropyForward(losses.data(), hits.data(), nullptr,
                                   logits.host.data(), targets.data(), rows, V);
  ExpectNear(Download(*gpu_, glosses), losses, 1e-5, 1e-5, "ce loss");
  EXPECT_EQ(Download(*gpu_, ghits), hits);
  // In place, as the models run it: the gradient over the logits.
  Act& dlogits = logits;
  gpu_->SoftmaxCrossEntropyBackward(dlogits.dev.get(), dlogits.dev.get(),
                                    nullptr, gt.get(), 0.5f, rows, V);
  cpu_->SoftmaxCrossEntropyBackward(dlogits.host.data(), dlogits.host.data(),
                                    nullptr, targets.data(), 0.5f, rows, V);
  const std::vector<float> want_dl = FromBf16(dlogits.host);
  ExpectWithin(Got(dlogits), want_dl, Bf16Tol(want_dl, 1, 1e-5, 1e-7),
               "ce dlogits");
}

// While alive, appends the block and grid of every kernel launch to
// `blocks` and `grids`: on the emulation, which lets a test observe its
// launches; on a GPU it records nothing.
class LaunchShapes {
 public:
  LaunchShapes(std::vector<dim3>* blocks, std::vector<dim3>* grids) {
#if defined(TRAINYARD_CUDA_EMULATION)
    cuda_emulation::SetLaunchObserver(
        [blocks, grids](const cuda_emulation::LaunchSite&,
                        const cuda_emulation::LaunchConfig& c) {
          blocks->push_back(c.block);
          grids->push_back(c.grid);
        });
#else
    (void)blocks;
    (void)grids;
#endif
  }
  ~LaunchShapes() {
#if defined(TRAINYARD_CUDA_EMULATION)
    cuda_emulation::SetLaunchObserver(nullptr);
#endif
  }
  LaunchShapes(const LaunchShapes&) = delete;
  LaunchShapes& operator=(const LaunchShapes&) = delete;
};

CudaBf16Test::AttentionResult CudaBf16Test::RunAttention(
    CudaBackend& backend, const std::vector<uint16_t>& qkv,
    const std::vector<uint16_t>& dout, int64_t B, int64_t T, int64_t C,
    int64_t NH, std::vector<dim3>* blocks, std::vector<dim3>* grids) {
  const AttentionFloats fs =
      AttentionBufferFloats(backend.attention_state(), B, T, C, NH);
  const DeviceArray<uint16_t> dx = Upload(backend, qkv),
                              ddy = Upload(backend, dout);
  auto out = Zeros<uint16_t>(backend, B * T * C);
  auto dqkv = Zeros<uint16_t>(backend, B * T * 3 * C);
  auto state = Zeros<float>(backend, fs.state);
  auto scratch = Zeros<float>(backend, fs.scratch);
  {
    const LaunchShapes recorder(blocks, grids);
    backend.AttentionForward(out.get(), state.get(), dx.get(), B, T, C, NH);
    backend.AttentionBackward(dqkv.get(), scratch.get(), ddy.get(), out.get(),
                              dx.get(), state.get(), B, T, C, NH);
  }
  return AttentionResult{Download(backend, out), Download(backend, state),
                         Download(backend, dqkv)};
}

// A backend created with each attention tiling gives the default one's
// bits, forward and backward (GPT-2's head size 64; 130 rows: two 128-row
// query tiles, the second ragged); the tiling is a speed setting only
// (the warpgroup tiling: on the emulation). On
// the emulation the test also sees the launches: the query-side kernels'
// blocks are the tiling's (its warps, one block per query tile of its
// rows), the key side's 4 warps over 64-row tiles whatever the tiling.
TEST_F(CudaBf16Test, AttentionTilingsGiveTheSameBits) {
  const int64_t B = 2, T = 130, C = 128, NH = 2;
  Act qkv = MakeAct(B * T * 3 * C, 15), dout = MakeAct(B * T * C, 16);
  using Result = AttentionResult;
  const auto run = [&](CudaBackend& backend, const std::vector<uint16_t>& x,
                       const std::vector<uint16_t>& dy,
                       std::vector<dim3>* blocks, std::vector<dim3>* grids) {
    return RunAttention(backend, x, dy, B, T, C, NH, blocks, grids);
  };
  std::vector<dim3> blocks, grids;
  const Result want = run(*gpu_, qkv.host, dout.host, &blocks, &grids);
  for (const cuda::AttentionTcTiling& t : cuda::kAttentionTcTilings) {
    // The forward's and the backward's apart: the backward with the next
    // tiling of the same kind, warpgroup or not (the query side's launch
    // shows which ran).
    const size_t n = std::size(cuda::kAttentionTcTilings);
    size_t next = static_cast<size_t>(&t - cuda::kAttentionTcTilings);
    do {
      next = (next + 1) % n;
    } while (cuda::kAttentionTcTilings[next].warpgroup != t.warpgroup);
    const cuda::AttentionTcTiling& u = cuda::kAttentionTcTilings[next];
    SCOPED_TRACE(cuda::AttentionTcTilingName(t) + "," +
                 cuda::AttentionTcTilingName(u));
#if !defined(TRAINYARD_CUDA_EMULATION)
    // On the GPU the warpgroup products may sum in another order than
    // mma.sync's; cuda_attention_test holds them to the reference's bounds.
    if (t.warpgroup) continue;
#endif
    CudaBackendOptions options = Bf16Options();
    options.attention_tiling = t;
    options.attention_backward_tiling = u;
    auto backend = CudaBackend::Create(options);
    ASSERT_TRUE(backend.ok()) << backend.status();
    blocks.clear();
    grids.clear();
    const Result got = run(**backend, qkv.host, dout.host, &blocks, &grids);
#if defined(TRAINYARD_CUDA_EMULATION)
    // The forward, the backward's query side, its key side.
    ASSERT_EQ(blocks.size(), 3u);
    for (int k : {0, 1}) {
      const cuda::AttentionTcTiling& of = k == 0 ? t : u;
      const unsigned rows = static_cast<unsigned>(of.warp_rows * of.warps);
      EXPECT_EQ(blocks[k].x, static_cast<unsigned>(32 * of.warps)) << k;
      EXPECT_EQ(grids[k].x, static_cast<unsigned>(B * NH)) << k;
      EXPECT_EQ(grids[k].y, (T + rows - 1) / rows) << k;
    }
    EXPECT_EQ(blocks[2].x, 128u);
    EXPECT_EQ(grids[2].y, (T + 63u) / 64u);
#endif
    EXPECT_TRUE(got.out == want.out) << "out";
    EXPECT_TRUE(got.state == want.state) << "state (lse)";
    EXPECT_TRUE(got.dqkv == want.dqkv) << "dqkv";
    const absl::Status s = (*backend)->Synchronize();
    EXPECT_TRUE(s.ok()) << s;
  }
}

// The ordered backward (one kernel a key tile, dQ summed in key-tile order)
// against the two-kernel default on GPT-2's head size: dK and dV come from
// the same products in the same order, so their bits agree; dQ's sums
// are grouped differently (a tile's 64 keys, then across tiles), so it
// agrees to a bf16 rounding of a value that differs by fp32 rounding. It
// takes the larger scratch its attention_state() asks for; on the
// emulation the test also sees its two launches after the forward: delta
// (a thread a row) and the key tiles.
TEST_F(CudaBf16Test, OrderedBackwardAgreesWithTheTwoKernels) {
  const int64_t B = 2, T = 130, C = 128, NH = 2;
  Act qkv = MakeAct(B * T * 3 * C, 17), dout = MakeAct(B * T * C, 18);
  CudaBackendOptions options = Bf16Options();
  options.attention_backward = cuda::AttentionTcBackward::kOrderedDq;
  auto ordered = CudaBackend::Create(options);
  ASSERT_TRUE(ordered.ok()) << ordered.status();
  ASSERT_EQ((*ordered)->attention_state(),
            AttentionState::kLogSumExpWithDqSums);
  EXPECT_GE(
      AttentionBufferFloats((*ordered)->attention_state(), B, T, C, NH).scratch,
      cuda::AttentionTcBackwardScratchFloats(
          cuda::AttentionTcBackward::kOrderedDq, B, T, C, NH));
  const auto run = [&](CudaBackend& backend, std::vector<dim3>* blocks,
                       std::vector<dim3>* grids) {
    const AttentionFloats fs =
        AttentionBufferFloats(backend.attention_state(), B, T, C, NH);
    const DeviceArray<uint16_t> dx = Upload(backend, qkv.host),
                                ddy = Upload(backend, dout.host);
    auto out = Zeros<uint16_t>(backend, B * T * C);
    auto dqkv = Zeros<uint16_t>(backend, B * T * 3 * C);
    auto state = Zeros<float>(backend, fs.state);
    auto scratch = Zeros<float>(backend, fs.scratch);
    backend.Fill(scratch.get(), fs.scratch, -1.f);  // turns must be zeroed
    {
      const LaunchShapes recorder(blocks, grids);
      backend.AttentionForward(out.get(), state.get(), dx.get(), B, T, C, NH);
      backend.AttentionBackward(dqkv.get(), scratch.get(), ddy.get(), out.get(),
                                dx.get(), state.get(), B, T, C, NH);
    }
    return Download(backend, dqkv);
  };
  std::vector<dim3> blocks, grids;
  const std::vector<uint16_t> want = run(*gpu_, &blocks, &grids);
  blocks.clear();
  grids.clear();
  const std::vector<uint16_t> got = run(**ordered, &blocks, &grids);
  const std::vector<uint16_t> again = run(**ordered, &blocks, &grids);
  EXPECT_TRUE(got == again) << "the ordered backward repeats bit for bit";
#if defined(TRAINYARD_CUDA_EMULATION)
  {
    // The warpgroup tiling's ordered key side gives the same bits here (on
    // the GPU its products may sum in another order: cuda_attention_test
    // holds it to the reference's bounds).
    options.attention_tiling = {16, 4, true};
    auto warpgroup = CudaBackend::Create(options);
    ASSERT_TRUE(warpgroup.ok()) << warpgroup.status();
    std::vector<dim3> wg_blocks, wg_grids;
    EXPECT_TRUE(run(**warpgroup, &wg_blocks, &wg_grids) == got)
        << "the warpgroup tiling's ordered backward";
    EXPECT_EQ(wg_blocks.size(), 3u);  // forward, delta, key tiles
  }
  ASSERT_EQ(blocks.size(), 6u);  // twice: forward, delta, key tiles
  EXPECT_EQ(blocks[1].x, 64u);
  EXPECT_EQ(blocks[2].x, 128u);
  for (int k : {1, 2}) {
    EXPECT_EQ(grids[k].x, static_cast<unsigned>(B * NH)) << k;
    EXPECT_EQ(grids[k].y, (T + 63u) / 64u) << k;
  }
#endif
  for (int64_t row = 0; row < B * T; ++row) {
    for (int64_t c = 0; c < 3 * C; ++c) {
      const int64_t i = row * 3 * C + c;
      if (c >= C) {
        ASSERT_EQ(got[i], want[i]) << "dk/dv row " << row << " column " << c;
        continue;
      }
      const double g = Bf16ToFloat(got[i]), w = Bf16ToFloat(want[i]);
      // One bf16 ulp of either side, and fp32 rounding of near-zero sums.
      EXPECT_LE(std::abs(g - w),
                2 * kBf16Ulp * std::max(std::abs(g), std::abs(w)) + 1e-6)
          << "dq row " << row << " column " << c;
    }
  }
}

// The fused update writes the master and its bf16 rounding in one pass.
// Attention tuning (CudaBackend::StartAttentionTuning): the first forward
// and backward after it run in every tiling the head size takes before
// their own run, and keep the fastest; they give the bits of a backend
// created with the tilings chosen, and later calls time nothing. On the
// emulation the test also counts the launches: a candidate's warm-up and
// timed run, then the call's own (the backward two kernels each). An fp32
// backend has no tilings to time.
TEST_F(CudaBf16Test, AttentionTuningTimesEachTilingOnceAndKeepsTheFastest) {
  const int64_t B = 2, T = 130, C = 128, NH = 2;  // heads of 64 channels
  Act qkv = MakeAct(B * T * 3 * C, 19), dout = MakeAct(B * T * C, 20);
  CudaBackendOptions options = Bf16Options();
  auto tuned = CudaBackend::Create(options);
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  EXPECT_EQ((*tuned)->StartAttentionTuning(0).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*tuned)->StartAttentionTuning(1).ok());
  std::vector<dim3> blocks, grids;
  const AttentionResult got =
      RunAttention(**tuned, qkv.host, dout.host, B, T, C, NH, &blocks, &grids);
  absl::StatusOr<CudaBackend::AttentionTuning> tuning =
      (*tuned)->FinishAttentionTuning();
  ASSERT_TRUE(tuning.ok()) << tuning.status();
  EXPECT_TRUE(tuning->forward_timed);
  EXPECT_TRUE(tuning->backward_timed);
  size_t taken = 0;
  for (const cuda::AttentionTcTiling& t : cuda::kAttentionTcTilings) {
    taken += cuda::AttentionTcTakesTiling(t, C / NH) ? 1 : 0;
  }
  ASSERT_GT(taken, 1u);
  ASSERT_EQ(tuning->timings.size(), 2 * taken);
  EXPECT_EQ(tuning->timings[0].rfind("forward 16x4: ", 0), 0u);
  EXPECT_EQ(tuning->timings[taken].rfind("backward 16x4: ", 0), 0u);
  const std::string chosen = AttentionTilingsText(tuning->tilings);
  EXPECT_EQ(AttentionTilingsText((*tuned)->attention_tilings()), chosen);
  SCOPED_TRACE(chosen);
#if defined(TRAINYARD_CUDA_EMULATION)
  EXPECT_EQ(blocks.size(), 3 * (2 * taken + 1));
#endif

  options.attention_tiling = tuning->tilings.forward;
  options.attention_backward_tiling = tuning->tilings.backward;
  auto fixed = CudaBackend::Create(options);
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  std::vector<dim3> fixed_blocks, fixed_grids;
  const AttentionResult want = RunAttention(**fixed, qkv.host, dout.host, B, T,
                                            C, NH, &fixed_blocks, &fixed_grids);
  EXPECT_TRUE(got.out == want.out) << "out";
  EXPECT_TRUE(got.state == want.state) << "state (lse)";
  EXPECT_TRUE(got.dqkv == want.dqkv) << "dqkv";

  blocks.clear();
  grids.clear();
  const AttentionResult later =
      RunAttention(**tuned, qkv.host, dout.host, B, T, C, NH, &blocks, &grids);
  EXPECT_TRUE(later.dqkv == want.dqkv) << "dqkv, after the tuning";
#if defined(TRAINYARD_CUDA_EMULATION)
  EXPECT_EQ(blocks.size(), 3u);
#endif

  options = CudaBackendOptions();
  options.arena_bytes = int64_t{256} << 20;
  auto fp32 = CudaBackend::Create(options);
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  ASSERT_TRUE((*fp32)->StartAttentionTuning(1).ok());
  const AttentionFloats fs =
      AttentionBufferFloats((*fp32)->attention_state(), B, T, C, NH);
  auto x = Zeros<float>(**fp32, B * T * 3 * C),
       y = Zeros<float>(**fp32, B * T * C);
  auto dx = Zeros<float>(**fp32, B * T * 3 * C),
       dy = Zeros<float>(**fp32, B * T * C);
  auto state = Zeros<float>(**fp32, fs.state);
  auto scratch = Zeros<float>(**fp32, fs.scratch);
  (*fp32)->AttentionForward(y.get(), state.get(), x.get(), B, T, C, NH);
  (*fp32)->AttentionBackward(dx.get(), scratch.get(), dy.get(), y.get(),
                             x.get(), state.get(), B, T, C, NH);
  absl::StatusOr<CudaBackend::AttentionTuning> none =
      (*fp32)->FinishAttentionTuning();
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->forward_timed);
  EXPECT_FALSE(none->backward_timed);
  EXPECT_TRUE(none->timings.empty());
}

TEST_F(CudaBf16Test, AdamWWritesMasterAndWorkingCopy) {
  const int64_t n = 1000;
  std::vector<float> p = Random(n, 20), g = Random(n, 21), m(n, 0.f), v(n, 0.f);
  auto gp = Upload(*gpu_, p), gg = Upload(*gpu_, g), gm = Upload(*gpu_, m),
       gv = Upload(*gpu_, v);
  auto working = Zeros<uint16_t>(*gpu_, n);
  AdamWUpdate u;
  u.lr = 1e-2f;
  u.weight_decay = 0.1f;
  u.bias_correction1 = 0.1f;
  u.bias_correction2 = 0.001f;
  gpu_->AdamW(gp.get(), gg.get(), gm.get(), gv.get(), working.get(), n, u);
  cpu_->AdamW(p.data(), g.data(), m.data(), v.data(), n, u);
  const std::vector<float> master = Download(*gpu_, gp);
  ExpectNear(master, p, 1e-6, 1e-7, "master");  // fp32, FMA contraction only
  const std::vector<uint16_t> w = Download(*gpu_, working);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(w[i], FloatToBf16(master[i])) << i;
  }
}

// Trains `steps` steps from seed 7 on `backend`; returns the losses, and
// the masters and moments in `state` when not null. `resume` (when not
// null) is loaded into the fresh model and optimizer first, as a resume
// from a checkpoint would, and the run starts at step `first`.
std::vector<double> Train(Backend& backend, const GptConfig& c, int first,
                          int steps,
                          const std::vector<std::vector<float>>* resume,
                          std::vector<std::vector<float>>* state) {
  auto model = *GptModel::Create(c, 4, &backend);
  auto opt = *AdamW::Create({}, &model->parameters(), &backend);
  Rng rng(7);
  EXPECT_TRUE(model->InitializeParameters(rng).ok());
  std::vector<float*> tensors;
  for (const Parameter& p : model->parameters()) tensors.push_back(p.value);
  for (const AdamW::MomentRef& m : opt->moments()) tensors.push_back(m.data);
  if (resume != nullptr) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      backend.CopyToDevice(tensors[i], (*resume)[i].data(),
                           (*resume)[i].size() * 4);
    }
    opt->set_step_count(first);
  }
  std::vector<double> losses;
  for (int s = first; s < first + steps; ++s) {
    model->ZeroGradients();
    absl::StatusOr<ForwardStats> st =
        model->Forward(NextTokenBatch(c, 4, s % 4));
    EXPECT_TRUE(st.ok()) << st.status();
    losses.push_back(st->loss_sum / static_cast<double>(st->examples));
    model->Backward(1.f / static_cast<float>(st->examples));
    EXPECT_TRUE(opt->Step(3e-3).ok());
  }
  if (state != nullptr) {
    state->clear();
    std::vector<int64_t> sizes;
    for (const Parameter& p : model->parameters()) sizes.push_back(p.size());
    for (const AdamW::MomentRef& m : opt->moments()) {
      sizes.push_back(NumElements(m.shape));
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      state->push_back(Download(backend, tensors[i], sizes[i]));
    }
  }
  return losses;
}

// 50 steps in bf16 on the GPU against fp32 on the CPU: the same bound as
// the CPU-only bf16 test (engine/core/mixed_precision_test.cc), whose
// derivation holds here: bf16 rounding dominates, the GPU's fp32 sum order
// adds ~1e-6 relative on top.
TEST_F(CudaBf16Test, GptLossCurveTracksFp32Cpu) {
  const GptConfig c{2, 2, 32, 16, 16};
  auto f32 = *CpuBackend::Create({});
  const std::vector<double> want = Train(*f32, c, 0, 50, nullptr, nullptr);
  const std::vector<double> got = Train(*gpu_, c, 0, 50, nullptr, nullptr);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 0.05) << "step " << i;
  }
  EXPECT_LT(got.back(), got.front() - 1.5);
}

// Stopping after 5 steps (masters and moments saved, as in a checkpoint)
// and resuming in a fresh model ends bitwise equal to 10 straight steps:
// the working copy is rebuilt from the masters at the first Forward.
TEST_F(CudaBf16Test, ResumeIsExact) {
  const GptConfig c{2, 2, 32, 16, 16};
  std::vector<std::vector<float>> straight, half, resumed;
  Train(*gpu_, c, 0, 10, nullptr, &straight);
  Train(*gpu_, c, 0, 5, nullptr, &half);
  Train(*gpu_, c, 5, 5, &half, &resumed);
  ASSERT_EQ(straight.size(), resumed.size());
  for (size_t i = 0; i < straight.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(straight[i].data(), resumed[i].data(),
                             straight[i].size() * 4))
        << "tensor " << i;
  }
}

}  // namespace
}  // namespace trainyard::engine::cuda_test
