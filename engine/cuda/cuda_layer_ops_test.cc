// The CUDA backend's layer ops — linear (cuBLASLt), LayerNorm and flash
// attention — against the CPU reference backend on fresh random inputs,
// each also run twice to check it repeats bit for bit. Sums taken in
// another order than the CPU's are held to 2 gamma_n times the magnitudes
// of their terms (cuda_test::Gamma), a bound that holds for any order and
// with or without FMA; where an op chains several sums the bound is
// derived beside its test. Skipped without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <vector>

#include "absl/strings/match.h"
#include "engine/cpu/test_inputs.h"
#include "engine/cuda/cuda_test_support.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

using cuda_test::DeviceArray;
using cuda_test::ExpectNear;
using cuda_test::ExpectWithin;
using cuda_test::Gamma;
using cuda_test::Zeros;

constexpr double kU = 0x1p-24;  // fp32 unit roundoff

struct LinearShape {
  int64_t batch, in, out;
  bool bias;
  bool aligned;  // false: every pointer one float past 256-byte alignment
};

void PrintTo(const LinearShape& s, std::ostream* os) {
  *os << s.batch << "x" << s.in << "->" << s.out
      << (s.bias ? " bias" : " no bias")
      << (s.aligned ? " aligned" : " misaligned");
}

class CudaLinearTest : public cuda_test::CudaVsCpuTest,
                       public ::testing::WithParamInterface<LinearShape> {
 protected:
  // A device copy starting `shift` floats into its buffer.
  DeviceArray<float> Shifted(const std::vector<float>& v, int64_t shift) {
    std::vector<float> padded(shift, 0.f);
    padded.insert(padded.end(), v.begin(), v.end());
    return Up(padded);
  }
};

// The bounds a product's outputs are held to: each is a sum of k terms
// a_i b_i plus at most one more (a bias or the value accumulated onto), so
// two orders differ by at most 2 gamma_{k+1} times the terms' magnitudes.
struct LinearTolerances {
  std::vector<double> out, dinp, dweight, dbias;
};

LinearTolerances ToleranceFor(const LinearShape& shape,
                              const std::vector<float>& inp,
                              const std::vector<float>& w,
                              const std::vector<float>& bias,
                              const std::vector<float>& dout,
                              const std::vector<float>& dw0,
                              const std::vector<float>& db0) {
  const int64_t B = shape.batch, I = shape.in, O = shape.out;
  LinearTolerances t{std::vector<double>(B * O), std::vector<double>(B * I),
                     std::vector<double>(O * I), std::vector<double>(O)};
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t o = 0; o < O; ++o) {
      double m = shape.bias ? std::abs(bias[o]) : 0.0;
      for (int64_t i = 0; i < I; ++i) {
        m += std::abs(inp[b * I + i] * w[o * I + i]);
      }
      t.out[b * O + o] = 2 * Gamma(I + 1) * m;
    }
    for (int64_t i = 0; i < I; ++i) {
      double m = 0;
      for (int64_t o = 0; o < O; ++o) {
        m += std::abs(dout[b * O + o] * w[o * I + i]);
      }
      t.dinp[b * I + i] = 2 * Gamma(O) * m;
    }
  }
  for (int64_t o = 0; o < O; ++o) {
    double mb = std::abs(db0[o]);
    for (int64_t b = 0; b < B; ++b) mb += std::abs(dout[b * O + o]);
    t.dbias[o] = 2 * Gamma(B + 1) * mb;
    for (int64_t i = 0; i < I; ++i) {
      double m = std::abs(dw0[o * I + i]);
      for (int64_t b = 0; b < B; ++b) {
        m += std::abs(dout[b * O + o] * inp[b * I + i]);
      }
      t.dweight[o * I + i] = 2 * Gamma(B + 1) * m;
    }
  }
  return t;
}

TEST_P(CudaLinearTest, ForwardAndBackwardMatchCpu) {
  const auto [B, I, O, has_bias, aligned] = GetParam();
  const int64_t s = aligned ? 0 : 1;
  const auto inp = Random(B * I, 20), w = Random(O * I, 21);
  const auto bias = Random(O, 22), dout = Random(B * O, 23);
  const auto dw0 = Random(O * I, 24), db0 = Random(O, 25);
  const LinearTolerances tol =
      ToleranceFor(GetParam(), inp, w, bias, dout, dw0, db0);
  auto ginp = Shifted(inp, s), gw = Shifted(w, s), gbias = Shifted(bias, s);
  auto gdout = Shifted(dout, s), gdw = Shifted(dw0, s), gdb = Shifted(db0, s);
  auto gout = Zeros<float>(*gpu_, B * O + s);
  auto gdinp = Zeros<float>(*gpu_, B * I + s);
  auto down = [&](const DeviceArray<float>& a, int64_t n) {
    return cuda_test::Download(*gpu_, a.get() + s, n);
  };
  auto forward = [&] {
    gpu_->LinearForward(gout.get() + s, ginp.get() + s, gw.get() + s,
                        has_bias ? gbias.get() + s : nullptr, B, I, O);
  };

  std::vector<float> out(B * O), dinp(B * I), dw = dw0, db = db0;
  cpu_->LinearForward(out.data(), inp.data(), w.data(),
                      has_bias ? bias.data() : nullptr, B, I, O);
  forward();
  const std::vector<float> got = down(gout, B * O);
  ExpectWithin(got, out, tol.out, "out");

  cpu_->LinearBackward(dinp.data(), dw.data(), db.data(), dout.data(),
                       inp.data(), w.data(), B, I, O);
  gpu_->LinearBackward(gdinp.get() + s, gdw.get() + s, gdb.get() + s,
                       gdout.get() + s, ginp.get() + s, gw.get() + s, B, I, O);
  ExpectWithin(down(gdinp, B * I), dinp, tol.dinp, "dinp");
  const std::vector<float> got_dw = down(gdw, O * I), got_db = down(gdb, O);
  ExpectWithin(got_dw, dw, tol.dweight, "dweight");
  ExpectWithin(got_db, db, tol.dbias, "dbias");

  // Again from the same state: bitwise the same.
  forward();
  EXPECT_EQ(down(gout, B * O), got);
  gpu_->CopyToDevice(gdw.get() + s, dw0.data(), O * I * 4);
  gpu_->CopyToDevice(gdb.get() + s, db0.data(), O * 4);
  gpu_->LinearBackward(nullptr, gdw.get() + s, gdb.get() + s, gdout.get() + s,
                       ginp.get() + s, gw.get() + s, B, I, O);
  EXPECT_EQ(down(gdw, O * I), got_dw);
  EXPECT_EQ(down(gdb, O), got_db);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaLinearTest,
    ::testing::Values(LinearShape{37, 53, 29, true, false},
                      LinearShape{64, 128, 96, true, true},
                      LinearShape{5, 3, 1, false, true},
                      LinearShape{300, 17, 130, true, true},
                      LinearShape{2, 768, 2304, true, true},
                      LinearShape{33, 64, 50, false, false},
                      // The bias gradient over 20 row ranges, and over
                      // two column chunks of the backend's scratch.
                      LinearShape{5000, 8, 70, true, true},
                      LinearShape{3, 2, 120000, true, true}));

struct LayerNormShape {
  int64_t rows, channels;
};

void PrintTo(const LayerNormShape& s, std::ostream* os) {
  *os << s.rows << "x" << s.channels;
}

class CudaLayerNormTest : public cuda_test::CudaVsCpuTest,
                          public ::testing::WithParamInterface<LayerNormShape> {
};

// Forward: the mean and the variance are sums of C terms whose relative
// errors (2 gamma_C between two orders, the variance's doubled by its
// dependence on the mean) carry into every normalized value: 8 gamma_C of
// the output's two terms, |norm * weight| + |bias|.
// Backward, from the same saved statistics: the input gradient subtracts
// two means of C terms (bounded by their magnitudes); the weight and bias
// gradients are sums over the rows plus the value accumulated onto.
TEST_P(CudaLayerNormTest, ForwardAndBackwardMatchCpu) {
  const int64_t R = GetParam().rows, C = GetParam().channels;
  const auto x = Random(R * C, 30, -2, 3), w = Random(C, 31), b = Random(C, 32);
  const auto dout = Random(R * C, 33), dinp0 = Random(R * C, 34);
  const auto dw0 = Random(C, 35), db0 = Random(C, 36);
  std::vector<float> out(R * C), mean(R), rstd(R);
  cpu_->LayerNormForward(out.data(), mean.data(), rstd.data(), x.data(),
                         w.data(), b.data(), R, C);
  auto gx = Up(x), gw = Up(w), gb = Up(b);
  auto gout = Zeros<float>(*gpu_, R * C);
  auto gmean = Zeros<float>(*gpu_, R), grstd = Zeros<float>(*gpu_, R);
  gpu_->LayerNormForward(gout.get(), gmean.get(), grstd.get(), gx.get(),
                         gw.get(), gb.get(), R, C);
  const double g = Gamma(C);
  std::vector<double> tol_out(R * C);
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t c = 0; c < C; ++c) {
      const double norm = (x[r * C + c] - mean[r]) * rstd[r];
      tol_out[r * C + c] = 8 * g * (std::abs(norm * w[c]) + std::abs(b[c]));
    }
  }
  ExpectWithin(Down(gout), out, tol_out, "out");
  ExpectNear(Down(gmean), mean, 2 * g, 2 * g * 3, "mean");  // |x| <= 3
  ExpectNear(Down(grstd), rstd, 8 * g, 0, "rstd");

  // dinp's column sums (the bias gradient of the layer before) start at
  // 0.25, as gradients accumulated over an earlier micro-batch would.
  const std::vector<float> sums0(C, 0.25f);
  std::vector<float> dinp = dinp0, dw = dw0, db = db0, sums = sums0;
  cpu_->LayerNormBackward(dinp.data(), dw.data(), db.data(), sums.data(),
                          dout.data(), x.data(), w.data(), mean.data(),
                          rstd.data(), R, C);
  auto gdout = Up(dout), gdinp = Up(dinp0), gdw = Up(dw0), gdb = Up(db0);
  auto gsums = Up(sums0);
  auto cmean = Up(mean), crstd = Up(rstd);  // the CPU's statistics
  gpu_->LayerNormBackward(gdinp.get(), gdw.get(), gdb.get(), gsums.get(),
                          gdout.get(), gx.get(), gw.get(), cmean.get(),
                          crstd.get(), R, C);
  std::vector<double> tol_dinp(R * C), tol_dw(C), tol_db(C);
  for (int64_t r = 0; r < R; ++r) {
    double wd = 0, wdn = 0, max_wd = 0, max_norm = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double norm = (x[r * C + c] - mean[r]) * rstd[r];
      const double t = std::abs(w[c] * dout[r * C + c]);
      wd += t;
      wdn += t * std::abs(norm);
      max_wd = std::max(max_wd, t);
      max_norm = std::max(max_norm, std::abs(norm));
    }
    const double m = rstd[r] * (max_wd + wd / C + max_norm * wdn / C);
    for (int64_t c = 0; c < C; ++c) {
      tol_dinp[r * C + c] = 4 * g * m + 2 * kU * std::abs(dinp[r * C + c]);
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    double mw = std::abs(dw0[c]), mb = std::abs(db0[c]);
    for (int64_t r = 0; r < R; ++r) {
      const double d = std::abs(dout[r * C + c]);
      mw += std::abs((x[r * C + c] - mean[r]) * rstd[r]) * d;
      mb += d;
    }
    tol_dw[c] = 2 * Gamma(R + 3) * mw;
    tol_db[c] = 2 * Gamma(R + 1) * mb;
  }
  // The sums of dinp: each term within its dinp's bound, plus the sum's
  // own rounding.
  std::vector<double> tol_sums(C);
  for (int64_t c = 0; c < C; ++c) {
    double terms = std::abs(sums0[c]), bound = 0;
    for (int64_t r = 0; r < R; ++r) {
      terms += std::abs(dinp[r * C + c]);
      bound += tol_dinp[r * C + c];
    }
    tol_sums[c] = bound + 2 * Gamma(R + 1) * terms;
  }
  const std::vector<float> got_dinp = Down(gdinp), got_dw = Down(gdw);
  const std::vector<float> got_sums = Down(gsums);
  ExpectWithin(got_dinp, dinp, tol_dinp, "dinp");
  ExpectWithin(got_dw, dw, tol_dw, "dweight");
  ExpectWithin(Down(gdb), db, tol_db, "dbias");
  ExpectWithin(got_sums, sums, tol_sums, "dinp's column sums");

  gpu_->CopyToDevice(gdinp.get(), dinp0.data(), R * C * 4);
  gpu_->CopyToDevice(gdw.get(), dw0.data(), C * 4);
  gpu_->CopyToDevice(gsums.get(), sums0.data(), C * 4);
  gpu_->LayerNormBackward(gdinp.get(), gdw.get(), gdb.get(), gsums.get(),
                          gdout.get(), gx.get(), gw.get(), cmean.get(),
                          crstd.get(), R, C);
  EXPECT_EQ(Down(gdinp), got_dinp);
  EXPECT_EQ(Down(gdw), got_dw);
  EXPECT_EQ(Down(gsums), got_sums);
}

// The residual add fused into the LayerNorm reads back exactly the values
// it stored and sums them in the same lane order as the plain kernel: bit
// for bit the Add then LayerNormForward of the same backend.
TEST_P(CudaLayerNormTest, FusedResidualAddIsTheTwoOpsBitwise) {
  const int64_t R = GetParam().rows, C = GetParam().channels;
  const auto a = Random(R * C, 40, -2, 3), b = Random(R * C, 41);
  const auto w = Random(C, 42), bias = Random(C, 43);
  auto ga = Up(a), gb = Up(b), gw = Up(w), gbias = Up(bias);
  auto res = Zeros<float>(*gpu_, R * C), out = Zeros<float>(*gpu_, R * C);
  auto mean = Zeros<float>(*gpu_, R), rstd = Zeros<float>(*gpu_, R);
  gpu_->AddLayerNormForward(res.get(), out.get(), mean.get(), rstd.get(),
                            ga.get(), gb.get(), gw.get(), gbias.get(), R, C);
  auto res2 = Zeros<float>(*gpu_, R * C), out2 = Zeros<float>(*gpu_, R * C);
  auto mean2 = Zeros<float>(*gpu_, R), rstd2 = Zeros<float>(*gpu_, R);
  gpu_->Add(res2.get(), ga.get(), gb.get(), R * C);
  gpu_->LayerNormForward(out2.get(), mean2.get(), rstd2.get(), res2.get(),
                         gw.get(), gbias.get(), R, C);
  EXPECT_EQ(Down(res), Down(res2));
  EXPECT_EQ(Down(out), Down(out2));
  EXPECT_EQ(Down(mean), Down(mean2));
  EXPECT_EQ(Down(rstd), Down(rstd2));
}

// 3000 and 9000 rows: the parameter gradients sum over 12 and 32 row
// ranges (column_sums.cuh).
// The backward's paths (layernorm_kernels.cu): 33 channels are not whole
// fp32 packs (two passes, an element a thread); 96, 800 and 1,024 go in
// one pass (1, 7 and 8 packs a lane); 1,032 is a pack a lane too many (two
// passes, a pack a thread).
INSTANTIATE_TEST_SUITE_P(Shapes, CudaLayerNormTest,
                         ::testing::Values(LayerNormShape{67, 33},
                                           LayerNormShape{67, 96},
                                           LayerNormShape{67, 800},
                                           LayerNormShape{3000, 96},
                                           LayerNormShape{9000, 800},
                                           LayerNormShape{2000, 1024},
                                           LayerNormShape{67, 1032}));

struct AttentionShape {
  int64_t batch, seq, channels, heads;
};

void PrintTo(const AttentionShape& s, std::ostream* os) {
  *os << "B=" << s.batch << " T=" << s.seq << " C=" << s.channels
      << " NH=" << s.heads;
}

class CudaAttentionTest : public cuda_test::CudaVsCpuTest,
                          public ::testing::WithParamInterface<AttentionShape> {
};

// Each row's log-sum-exp of its scaled scores, in double, from qkv.
std::vector<double> LogSumExp(const std::vector<float>& qkv, int64_t B,
                              int64_t T, int64_t C, int64_t NH) {
  const int64_t hs = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  std::vector<double> lse(B * NH * T);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> s(i + 1);
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < hs; ++d) {
            dot += static_cast<double>(qkv[(b * T + i) * 3 * C + h * hs + d]) *
                   qkv[(b * T + j) * 3 * C + C + h * hs + d];
          }
          s[j] = dot * scale;
        }
        const double max = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double v : s) sum += std::exp(v - max);
        lse[(b * NH + h) * T + i] = max + std::log(sum);
      }
    }
  }
  return lse;
}

// With q, k, v, dout in [-1, 1]: a score sums hs products of magnitude <= 1
// and is scaled by 1/sqrt(hs), so two orders differ by at most
// e_s = 2 gamma_hs sqrt(hs); each probability then differs relatively by
// at most 2 e_s (its exponent and the row's maximum) plus 2 gamma_T (the
// row sum) plus expf's few ulp, and an output, a convex combination of
// values <= 1, absolutely by as much. The gradients chain a few more such
// sums with terms of similar size; we allow 10 times the forward's bound.
TEST_P(CudaAttentionTest, ForwardAndBackwardMatchCpu) {
  const auto [B, T, C, NH] = GetParam();
  const int64_t hs = C / NH;
  const auto qkv = Random(B * T * 3 * C, 40), dout = Random(B * T * C, 41);
  std::vector<float> out(B * T * C), att(B * NH * T * T), dqkv(B * T * 3 * C);
  std::vector<float> scratch(att.size());
  cpu_->AttentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  cpu_->AttentionBackward(dqkv.data(), scratch.data(), dout.data(), out.data(),
                          qkv.data(), att.data(), B, T, C, NH);

  ASSERT_EQ(gpu_->attention_state(), AttentionState::kLogSumExp);
  const AttentionFloats sizes =
      AttentionBufferFloats(gpu_->attention_state(), B, T, C, NH);
  EXPECT_EQ(sizes.state, B * NH * T);
  auto gqkv = Up(qkv), gdout = Up(dout);
  auto gout = Zeros<float>(*gpu_, B * T * C);
  auto gstate = Zeros<float>(*gpu_, sizes.state);
  auto gscratch = Zeros<float>(*gpu_, sizes.scratch);
  auto gdqkv = Zeros<float>(*gpu_, B * T * 3 * C);
  gpu_->Fill(gdqkv.get(), gdqkv.n, 7.f);  // every entry must be overwritten
  gpu_->AttentionForward(gout.get(), gstate.get(), gqkv.get(), B, T, C, NH);
  gpu_->AttentionBackward(gdqkv.get(), gscratch.get(), gdout.get(), gout.get(),
                          gqkv.get(), gstate.get(), B, T, C, NH);

  const double e_s = 2 * Gamma(hs) * std::sqrt(static_cast<double>(hs));
  const double fwd = 2 * e_s + 2 * Gamma(T) + 16 * kU;
  const std::vector<float> got_out = Down(gout), got_state = Down(gstate);
  ExpectNear(got_out, out, 0, fwd, "out");
  const std::vector<double> lse = LogSumExp(qkv, B, T, C, NH);
  const std::vector<float> want_lse(lse.begin(), lse.end());
  ExpectNear(got_state, want_lse, 4 * kU, e_s + 2 * Gamma(T) + 4 * kU, "lse");
  const std::vector<float> got_dqkv = Down(gdqkv);
  ExpectNear(got_dqkv, dqkv, 10 * fwd, 10 * fwd, "dqkv");

  gpu_->Fill(gdqkv.get(), gdqkv.n, 7.f);
  gpu_->AttentionForward(gout.get(), gstate.get(), gqkv.get(), B, T, C, NH);
  gpu_->AttentionBackward(gdqkv.get(), gscratch.get(), gdout.get(), gout.get(),
                          gqkv.get(), gstate.get(), B, T, C, NH);
  EXPECT_EQ(Down(gout), got_out);
  EXPECT_EQ(Down(gstate), got_state);
  EXPECT_EQ(Down(gdqkv), got_dqkv);
}

// Head sizes 3 to 128 (the kernels' three bounds, masked below them),
// sequences shorter and longer than a block of rows and a key tile, and a
// single token.
INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionTest,
                         ::testing::Values(AttentionShape{2, 5, 6, 2},
                                           AttentionShape{2, 70, 64, 4},
                                           AttentionShape{1, 129, 128, 2},
                                           AttentionShape{1, 40, 256, 2},
                                           AttentionShape{3, 1, 8, 1},
                                           AttentionShape{1, 200, 96, 1},
                                           AttentionShape{4, 33, 128, 4}));

using CudaAttentionShapeTest = cuda_test::CudaVsCpuTest;

TEST_F(CudaAttentionShapeTest, RefusesUnsupportedHeads) {
  auto buf = Zeros<float>(*gpu_, 4 * 3 * 258);
  gpu_->AttentionForward(buf.get(), buf.get(), buf.get(), 1, 2, 258, 1);
  absl::Status s = gpu_->Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "head size 258")) << s;
  gpu_->AttentionBackward(buf.get(), buf.get(), buf.get(), buf.get(), buf.get(),
                          buf.get(), 1, 2, 10, 3);
  s = gpu_->Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "do not split")) << s;
  EXPECT_TRUE(gpu_->Synchronize().ok());  // reported once
}

}  // namespace
}  // namespace trainyard::engine
