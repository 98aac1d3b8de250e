// The classifier, embedding, bias-gradient and LayerNorm kernels run on the
// CUDA emulation, called through their launchers, against plain host loops
// (engine/cpu's semantics) in fp32 and bf16: shapes that exercise their
// strided loops, multi-round and chunked paths (a token at more than 1024
// positions, more than 1024 channels, thousands of rows, a scratch too
// small for all columns at once), bitwise repeatability (the emulation
// changes its thread order from launch to launch), writes outside the
// outputs (guard zones) and bad arguments.
//
// Tolerances are derived from the kernels' operation counts with
// gamma_n = n u / (1 - n u), u = 2^-24 (guarded_buffers.h): a sum whose
// terms each pass through at most n roundings is within gamma_n of the sum
// of the terms' magnitudes. The column sums (column_sums.cuh) add a term
// through at most ceil(rows / 32) lane adds, 32 lane-total adds, 32 split
// adds and the final add onto the output. bf16 outputs add 2^-8 |want|, one
// rounding to bf16. Inputs are generated in fp32 and, for bf16, rounded
// first, so both sides read the same values.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/cpu/test_inputs.h"
#include "engine/cuda/classifier_kernels.h"
#include "engine/cuda/elementwise_kernels.h"
#include "engine/cuda/embedding_kernels.h"
#include "engine/cuda/emulation/guarded_buffers.h"
#include "engine/cuda/layernorm_kernels.h"
#include "engine/cuda/linear_kernels.h"
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

// How many roundings a term of a column sum over `rows` rows goes through.
int64_t ColumnSumDepth(int64_t rows) { return (rows + 31) / 32 + 65; }

class EmulatedKernelsTest : public ::testing::TestWithParam<bool> {
 protected:
  bool bf16() const { return GetParam(); }
  // The rounding of one activation store.
  double StoreError(double want) const {
    return (bf16() ? kBf16U : kU) * std::abs(want);
  }
};

// ------------------------------------------------------------ classifier

struct SoftmaxRow {
  double max, sum;  // sum of exp(x - max) over finite entries
};

SoftmaxRow HostSoftmax(const float* x, int64_t classes) {
  double m = -INFINITY, s = 0;
  for (int64_t c = 0; c < classes; ++c) m = std::max<double>(m, x[c]);
  for (int64_t c = 0; c < classes; ++c) s += std::exp(x[c] - m);
  return {m, s};
}

// The kernel's softmax sum: each entry goes through its thread's online
// updates (ceil(classes / 512)), 5 butterfly and 15 warp merges, each an
// expf (1 ulp = 2u), a product and a sum: 4u a step, summed linearly.
double SoftmaxSumRelError(int64_t classes) {
  return Gamma(4 * ((classes + 511) / 512 + 20));
}

constexpr int64_t kRows = 37, kClasses = 1000;  // > 512: strided rows

// Logits in [-4, 4); row 3 holds a NaN, row 5 a -inf (a masked class).
std::vector<float> ClassifierLogits(bool bf16) {
  std::vector<float> x = Inputs(kRows * kClasses, 11, bf16, -4, 4);
  x[3 * kClasses + 17] = std::numeric_limits<float>::quiet_NaN();
  x[5 * kClasses + 2] = -INFINITY;
  return x;
}

std::vector<int32_t> ClassifierTargets() {
  std::vector<int32_t> t(kRows);
  for (int64_t r = 0; r < kRows; ++r) t[r] = (r * 389 + 7) % kClasses;
  t[7] = -1;        // outside [0, classes): NaN loss
  t[8] = kClasses;  // likewise
  return t;
}

TEST_P(EmulatedKernelsTest, SoftmaxCrossEntropyForward) {
  std::vector<float> x = ClassifierLogits(bf16());
  const std::vector<int32_t> tgt = ClassifierTargets();
  // Rows whose argmax is the target (hits), and ties (the first index
  // wins): row 6 ties column 0 with its target (a miss), row 9 ties its
  // target with a later column (a hit). Small integers: exact in bf16.
  for (const int64_t r : {0, 2, 4}) x[r * kClasses + tgt[r]] = 6.f;
  x[6 * kClasses + 0] = x[6 * kClasses + tgt[6]] = 7.f;
  x[9 * kClasses + tgt[9]] = x[9 * kClasses + kClasses - 1] = 7.f;
  Activations logits(x, bf16());
  Guarded<int32_t> targets(tgt);
  Guarded<float> losses(std::vector<float>(kRows, -7.f));
  Guarded<int32_t> hits(std::vector<int32_t>(kRows, -7));
  ASSERT_EQ(cuda::LaunchSoftmaxCrossEntropyForward(
                losses.get(), hits.get(), logits.get(), targets.get(), kRows,
                kClasses, bf16(), nullptr),
            cudaSuccess);
  EXPECT_TRUE(losses.GuardsIntact());
  EXPECT_TRUE(hits.GuardsIntact());
  const std::vector<float> got = losses.values();
  const std::vector<int32_t> t = targets.values();
  // Hits: argmax (the first index on ties, as the CPU) == target.
  const std::vector<int32_t> got_hits = hits.values();
  for (int64_t r = 0; r < kRows; ++r) {
    const float* row = &x[r * kClasses];
    int64_t best = 0;
    for (int64_t c = 1; c < kClasses; ++c) {
      if (row[c] > row[best]) best = c;
    }
    if (std::isnan(row[best])) continue;  // unspecified for NaN rows
    bool nan_row = false;
    for (int64_t c = 0; c < kClasses; ++c) nan_row |= std::isnan(row[c]);
    if (nan_row) continue;
    EXPECT_EQ(got_hits[r], best == t[r] ? 1 : 0) << "row " << r;
  }
  const double rel = SoftmaxSumRelError(kClasses);
  for (int64_t r = 0; r < kRows; ++r) {
    if (r == 3 || r == 7 || r == 8) {
      EXPECT_TRUE(std::isnan(got[r])) << "row " << r << ": " << got[r];
      continue;
    }
    const SoftmaxRow s = HostSoftmax(&x[r * kClasses], kClasses);
    const double shifted = x[r * kClasses + t[r]] - s.max;
    const double want = std::log(s.sum) - shifted;
    const double tol = 1.01 * rel + 2 * kU *
                                        (std::abs(std::log(s.sum)) +
                                         std::abs(shifted) + std::abs(want));
    EXPECT_NEAR(got[r], want, tol) << "row " << r;
  }
  // Again, in another thread order: the same bits.
  Guarded<float> again(std::vector<float>(kRows, -7.f));
  ASSERT_EQ(cuda::LaunchSoftmaxCrossEntropyForward(
                again.get(), /*hits=*/nullptr, logits.get(), targets.get(),
                kRows, kClasses, bf16(), nullptr),
            cudaSuccess);
  EXPECT_TRUE(SameBits(got, again.values()));
}

TEST_P(EmulatedKernelsTest, SoftmaxCrossEntropyBackwardAlsoInPlace) {
  const std::vector<float> x = ClassifierLogits(bf16());
  std::vector<int32_t> t = ClassifierTargets();
  t[7] = 0;  // the backward's targets are in range
  t[8] = kClasses - 1;
  const float scale = 1.f / kRows;
  Activations logits(x, bf16());
  Activations dlogits(std::vector<float>(x.size(), 5.f), bf16());
  Guarded<int32_t> targets(t);
  ASSERT_EQ(cuda::LaunchSoftmaxCrossEntropyBackward(dlogits.get(), logits.get(),
                                                    targets.get(), scale, kRows,
                                                    kClasses, bf16(), nullptr),
            cudaSuccess);
  EXPECT_TRUE(dlogits.GuardsIntact());
  const std::vector<float> got = dlogits.values();
  const double rel_p = SoftmaxSumRelError(kClasses) + 3 * 2 * kU;
  std::vector<double> want(x.size()), tol(x.size());
  for (int64_t r = 0; r < kRows; ++r) {
    const SoftmaxRow s = HostSoftmax(&x[r * kClasses], kClasses);
    for (int64_t c = 0; c < kClasses; ++c) {
      const int64_t i = r * kClasses + c;
      const double p = std::exp(x[i] - s.max) / s.sum;
      want[i] = (p - (c == t[r] ? 1 : 0)) * scale;
      tol[i] = scale * (p * rel_p + kU * std::abs(p - (c == t[r]))) +
               kU * std::abs(want[i]) + StoreError(want[i]);
    }
  }
  std::vector<float> finite = got;
  for (int64_t c = 0; c < kClasses; ++c) {
    EXPECT_TRUE(std::isnan(got[3 * kClasses + c])) << "NaN row, class " << c;
    finite[3 * kClasses + c] = 0;
    want[3 * kClasses + c] = 0;
    tol[3 * kClasses + c] = 0;
  }
  ExpectWithin(finite, want, tol, "dlogits");
  // In place: the logits' buffer receives the same bits.
  Activations in_place(x, bf16());
  ASSERT_EQ(cuda::LaunchSoftmaxCrossEntropyBackward(
                in_place.get(), in_place.get(), targets.get(), scale, kRows,
                kClasses, bf16(), nullptr),
            cudaSuccess);
  EXPECT_TRUE(in_place.GuardsIntact());
  EXPECT_TRUE(SameBits(in_place.values(), got));
}

// ------------------------------------------------------------- embedding

TEST_P(EmulatedKernelsTest, EmbeddingBackwardAddsInPositionOrderBitwise) {
  // 1560 positions, token 7 at 1092 of them (two rounds of its owner's
  // 1024-position list), 1100 channels (two passes of a block's threads).
  const int64_t batch = 3, seq = 520, channels = 1100, vocab = 64;
  const int64_t rows = batch * seq;
  std::vector<int32_t> tokens(rows);
  for (int64_t r = 0; r < rows; ++r) {
    tokens[r] =
        r % 10 < 7 ? 7 : static_cast<int32_t>((r * 2654435761u) % vocab);
  }
  ASSERT_GT(std::count(tokens.begin(), tokens.end(), 7), 1024);
  const std::vector<float> dout = Inputs(rows * channels, 21, bf16());
  std::vector<float> wte = Random(vocab * channels, 22);
  std::vector<float> wpe = Random(seq * channels, 23);
  Guarded<float> dwte(wte), dwpe(wpe);
  Activations d(dout, bf16());
  Guarded<int32_t> tok(tokens);
  ASSERT_EQ(
      cuda::LaunchEmbeddingBackward(dwte.get(), dwpe.get(), d.get(), tok.get(),
                                    batch, seq, channels, bf16(), nullptr),
      cudaSuccess);
  EXPECT_TRUE(dwte.GuardsIntact());
  EXPECT_TRUE(dwpe.GuardsIntact());
  for (int64_t r = 0; r < rows; ++r) {  // fp32 adds, ascending positions
    for (int64_t c = 0; c < channels; ++c) {
      wte[tokens[r] * channels + c] += dout[r * channels + c];
      wpe[(r % seq) * channels + c] += dout[r * channels + c];
    }
  }
  EXPECT_TRUE(SameBits(dwte.values(), wte));
  EXPECT_TRUE(SameBits(dwpe.values(), wpe));
}

// ----------------------------------------------------------- column sums

constexpr int64_t kSumRows = 2500, kSumCols = 200;

// Scratch sizes (floats per output): every column at once in 10 row
// ranges, and 96 columns at a time (chunks of 96, 96 and 8 columns).
const int64_t kScratchPerOutput[] = {32 * kSumCols, 96};

TEST_P(EmulatedKernelsTest, BiasGradSumsRowsInChunksAndRepeatsBitwise) {
  const std::vector<float> dout = Inputs(kSumRows * kSumCols, 31, bf16());
  const std::vector<float> init = Random(kSumCols, 32);
  std::vector<double> want(kSumCols), tol(kSumCols);
  for (int64_t c = 0; c < kSumCols; ++c) {
    double sum = init[c], mag = std::abs(init[c]);
    for (int64_t r = 0; r < kSumRows; ++r) {
      sum += dout[r * kSumCols + c];
      mag += std::abs(dout[r * kSumCols + c]);
    }
    want[c] = sum;
    tol[c] = Gamma(ColumnSumDepth(kSumRows)) * mag;
  }
  Activations d(dout, bf16());
  for (const int64_t scratch_floats : kScratchPerOutput) {
    std::vector<float> first;
    for (int run = 0; run < 2; ++run) {
      Guarded<float> dbias(init);
      Guarded<float> scratch(std::vector<float>(scratch_floats, 0.f));
      ASSERT_EQ(
          cuda::LaunchBiasGrad(dbias.get(), d.get(), kSumRows, kSumCols,
                               scratch.get(), scratch_floats, bf16(), nullptr),
          cudaSuccess);
      EXPECT_TRUE(dbias.GuardsIntact());
      EXPECT_TRUE(scratch.GuardsIntact());
      if (run == 0) {
        first = dbias.values();
        ExpectWithin(first, want, tol, "dbias");
      } else {
        EXPECT_TRUE(SameBits(dbias.values(), first))
            << "scratch " << scratch_floats;
      }
    }
  }
  Guarded<float> dbias(init), scratch(std::vector<float>(31, 0.f));
  EXPECT_EQ(cuda::LaunchBiasGrad(dbias.get(), d.get(), kSumRows, kSumCols,
                                 scratch.get(), 31, bf16(), nullptr),
            cudaErrorInvalidValue);
  EXPECT_TRUE(SameBits(dbias.values(), init)) << "wrote despite the error";
}

// -------------------------------------------------------------- LayerNorm

constexpr int64_t kLnRows = 2000, kLnChannels = 200;
constexpr double kLnEps = 1e-5;

// Rows of LayerNorm inputs, each row's mean and rstd from the forward.
struct LayerNormCase {
  std::vector<float> inp, weight, bias, mean, rstd;
};

// Runs the forward and checks it: mean and rstd against double, out within
// the errors of a strided warp sum (ceil(C / 32) + 5 adds) and the few
// roundings after it.
LayerNormCase CheckedForward(bool bf16) {
  LayerNormCase k;
  k.inp = Inputs(kLnRows * kLnChannels, 41, bf16, -2, 3);
  k.weight = Inputs(kLnChannels, 42, bf16, 0.5, 1.5);
  k.bias = Inputs(kLnChannels, 43, bf16);
  Activations inp(k.inp, bf16), weight(k.weight, bf16), bias(k.bias, bf16);
  Activations out(std::vector<float>(k.inp.size(), 0.f), bf16);
  Guarded<float> mean(std::vector<float>(kLnRows, 0.f));
  Guarded<float> rstd(std::vector<float>(kLnRows, 0.f));
  EXPECT_EQ(cuda::LaunchLayerNormForward(out.get(), mean.get(), rstd.get(),
                                         inp.get(), weight.get(), bias.get(),
                                         kLnRows, kLnChannels, bf16, nullptr),
            cudaSuccess);
  EXPECT_TRUE(out.GuardsIntact() && mean.GuardsIntact() && rstd.GuardsIntact());
  k.mean = mean.values();
  k.rstd = rstd.values();
  const std::vector<float> got = out.values();
  const int64_t C = kLnChannels, depth = (C + 31) / 32 + 5;
  std::vector<double> want(got.size()), tol(got.size());
  for (int64_t r = 0; r < kLnRows; ++r) {
    const float* x = &k.inp[r * C];
    double m = 0, mag = 0, var = 0;
    for (int64_t c = 0; c < C; ++c) {
      m += x[c] / C;
      mag += std::abs(x[c]);
    }
    for (int64_t c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    var /= C;
    const double s = 1 / std::sqrt(var + kLnEps);
    const double err_m = Gamma(depth + 1) * mag / C;
    const double rel_s = 0.5 * Gamma(depth + 4) + Gamma(3);
    EXPECT_NEAR(k.mean[r], m, err_m) << "mean " << r;
    EXPECT_NEAR(k.rstd[r], s, rel_s * s) << "rstd " << r;
    for (int64_t c = 0; c < C; ++c) {
      const int64_t i = r * C + c;
      want[i] = (x[c] - m) * s * k.weight[c] + k.bias[c];
      tol[i] =
          s * k.weight[c] * (std::abs(x[c] - m) * (rel_s + Gamma(4)) + err_m) +
          Gamma(2) * std::abs(want[i]) +
          (bf16 ? kBf16U : 0) * std::abs(want[i]);
    }
  }
  ExpectWithin(got, want, tol, "layernorm out");
  return k;
}

// The backward's host result in double from the forward's fp32 mean and
// rstd, with bounds: dinp as derived in the comment inside; dweight and
// dbias as column sums of terms of 3 and 0 roundings.
struct LayerNormGrads {
  std::vector<double> dinp, dinp_tol, dweight, dweight_tol, dbias, dbias_tol;
};

LayerNormGrads HostBackward(const LayerNormCase& k,
                            const std::vector<float>& dout,
                            const std::vector<float>& dinp0,
                            const std::vector<float>& dw0,
                            const std::vector<float>& db0, bool bf16) {
  const int64_t C = kLnChannels, depth = (C + 31) / 32 + 5;
  LayerNormGrads g{
      {}, {}, {dw0.begin(), dw0.end()}, {}, {db0.begin(), db0.end()}, {}};
  g.dinp.resize(dinp0.size());
  g.dinp_tol.resize(dinp0.size());
  std::vector<double> dw_mag(C), db_mag(C);
  for (int64_t c = 0; c < C; ++c) {
    dw_mag[c] = std::abs(dw0[c]);
    db_mag[c] = std::abs(db0[c]);
  }
  for (int64_t r = 0; r < kLnRows; ++r) {
    const double m = k.mean[r], s = k.rstd[r];
    double a = 0, b = 0, a_mag = 0, b_mag = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double dn = k.weight[c] * dout[r * C + c];
      const double nrm = (k.inp[r * C + c] - m) * s;
      a += dn / C;
      b += dn * nrm / C;
      a_mag += std::abs(dn) / C;
      b_mag += std::abs(dn * nrm) / C;
    }
    for (int64_t c = 0; c < C; ++c) {
      const int64_t i = r * C + c;
      const double d = dout[i], dn = k.weight[c] * d;
      const double nrm = (k.inp[i] - m) * s;
      g.dinp[i] = dinp0[i] + (dn - a - nrm * b) * s;
      // The two warp sums (depth adds, plus up to 4 roundings per term and
      // 2 for the division by C) and the 5 roundings of the final
      // expression, each bounded by its operands' magnitudes; doubled for
      // the products of errors.
      g.dinp_tol[i] =
          2 * s * Gamma(depth + 8) *
              (std::abs(dn) + a_mag + std::abs(nrm) * (std::abs(b) + b_mag)) +
          2 * kU * std::abs(g.dinp[i]) +
          (bf16 ? kBf16U * std::abs(g.dinp[i]) : 0);
      g.dweight[c] += nrm * d;
      dw_mag[c] += std::abs(nrm * d);
      g.dbias[c] += d;
      db_mag[c] += std::abs(d);
    }
  }
  g.dweight_tol.resize(C);
  g.dbias_tol.resize(C);
  for (int64_t c = 0; c < C; ++c) {
    g.dweight_tol[c] = Gamma(ColumnSumDepth(kLnRows) + 3) * dw_mag[c];
    g.dbias_tol[c] = Gamma(ColumnSumDepth(kLnRows)) * db_mag[c];
  }
  return g;
}

// The residual add fused into the LayerNorm: bit for bit LaunchAdd then
// LaunchLayerNormForward (it stores the rounded sum and normalizes what it
// stored, in the plain kernel's lane order).
TEST_P(EmulatedKernelsTest, AddLayerNormIsTheTwoOpsBitwise) {
  const int64_t n = kLnRows * kLnChannels;
  Activations a(Inputs(n, 44, bf16(), -2, 3), bf16());
  Activations b(Inputs(n, 45, bf16(), -1, 1), bf16());
  Activations weight(Inputs(kLnChannels, 46, bf16(), 0.5, 1.5), bf16());
  Activations bias(Inputs(kLnChannels, 47, bf16()), bf16());
  Activations res(std::vector<float>(n, 0.f), bf16());
  Activations out(std::vector<float>(n, 0.f), bf16());
  Guarded<float> mean(std::vector<float>(kLnRows, 0.f));
  Guarded<float> rstd(std::vector<float>(kLnRows, 0.f));
  ASSERT_EQ(cuda::LaunchAddLayerNormForward(res.get(), out.get(), mean.get(),
                                            rstd.get(), a.get(), b.get(),
                                            weight.get(), bias.get(), kLnRows,
                                            kLnChannels, bf16(), nullptr),
            cudaSuccess);
  EXPECT_TRUE(res.GuardsIntact() && out.GuardsIntact() && mean.GuardsIntact() &&
              rstd.GuardsIntact());
  Activations res2(std::vector<float>(n, 0.f), bf16());
  Activations out2(std::vector<float>(n, 0.f), bf16());
  Guarded<float> mean2(std::vector<float>(kLnRows, 0.f));
  Guarded<float> rstd2(std::vector<float>(kLnRows, 0.f));
  ASSERT_EQ(cuda::LaunchAdd(res2.get(), a.get(), b.get(), n, bf16(), nullptr),
            cudaSuccess);
  ASSERT_EQ(cuda::LaunchLayerNormForward(out2.get(), mean2.get(), rstd2.get(),
                                         res2.get(), weight.get(), bias.get(),
                                         kLnRows, kLnChannels, bf16(), nullptr),
            cudaSuccess);
  EXPECT_TRUE(SameBits(res.values(), res2.values()));
  EXPECT_TRUE(SameBits(out.values(), out2.values()));
  EXPECT_TRUE(SameBits(mean.values(), mean2.values()));
  EXPECT_TRUE(SameBits(rstd.values(), rstd2.values()));
}

TEST_P(EmulatedKernelsTest, LayerNormBackwardInChunksAndRepeatsBitwise) {
  const LayerNormCase k = CheckedForward(bf16());
  const int64_t n = kLnRows * kLnChannels;
  const std::vector<float> dout = Inputs(n, 51, bf16());
  const std::vector<float> dinp0 = Inputs(n, 52, bf16());
  const std::vector<float> dw0 = Random(kLnChannels, 53);
  const std::vector<float> db0 = Random(kLnChannels, 54);
  const LayerNormGrads want = HostBackward(k, dout, dinp0, dw0, db0, bf16());
  Activations d(dout, bf16()), inp(k.inp, bf16()), weight(k.weight, bf16());
  Guarded<float> mean(k.mean), rstd(k.rstd);
  for (const int64_t per_output : kScratchPerOutput) {
    std::vector<float> first[3];
    for (int run = 0; run < 2; ++run) {
      Activations dinp(dinp0, bf16());
      Guarded<float> dw(dw0), db(db0);
      Guarded<float> scratch(std::vector<float>(2 * per_output, 0.f));
      ASSERT_EQ(cuda::LaunchLayerNormBackward(
                    dinp.get(), dw.get(), db.get(), d.get(), inp.get(),
                    weight.get(), mean.get(), rstd.get(), kLnRows, kLnChannels,
                    scratch.get(), 2 * per_output, bf16(), nullptr),
                cudaSuccess);
      EXPECT_TRUE(dinp.GuardsIntact() && dw.GuardsIntact() &&
                  db.GuardsIntact() && scratch.GuardsIntact());
      const std::vector<float> got[3] = {dinp.values(), dw.values(),
                                         db.values()};
      if (run == 0) {
        ExpectWithin(got[0], want.dinp, want.dinp_tol, "dinp");
        ExpectWithin(got[1], want.dweight, want.dweight_tol, "dweight");
        ExpectWithin(got[2], want.dbias, want.dbias_tol, "dbias");
        for (int j = 0; j < 3; ++j) first[j] = got[j];
      } else {
        for (int j = 0; j < 3; ++j) {
          EXPECT_TRUE(SameBits(got[j], first[j]))
              << "output " << j << ", scratch " << 2 * per_output;
        }
      }
    }
  }
  Activations dinp(dinp0, bf16());
  Guarded<float> dw(dw0), db(db0), scratch(std::vector<float>(63, 0.f));
  EXPECT_EQ(cuda::LaunchLayerNormBackward(
                dinp.get(), dw.get(), db.get(), d.get(), inp.get(),
                weight.get(), mean.get(), rstd.get(), kLnRows, kLnChannels,
                scratch.get(), 63, bf16(), nullptr),
            cudaErrorInvalidValue);
}

// No rows or no columns: nothing launched, nothing written.
TEST_P(EmulatedKernelsTest, EmptyShapesLaunchNothing) {
  EXPECT_EQ(cuda::LaunchSoftmaxCrossEntropyForward(
                nullptr, nullptr, nullptr, nullptr, 0, 10, bf16(), nullptr),
            cudaSuccess);
  EXPECT_EQ(cuda::LaunchEmbeddingBackward(nullptr, nullptr, nullptr, nullptr, 0,
                                          4, 8, bf16(), nullptr),
            cudaSuccess);
  EXPECT_EQ(
      cuda::LaunchBiasGrad(nullptr, nullptr, 5, 0, nullptr, 0, bf16(), nullptr),
      cudaSuccess);
  EXPECT_EQ(cuda::LaunchLayerNormBackward(nullptr, nullptr, nullptr, nullptr,
                                          nullptr, nullptr, nullptr, nullptr, 0,
                                          8, nullptr, 0, bf16(), nullptr),
            cudaSuccess);
}

INSTANTIATE_TEST_SUITE_P(Types, EmulatedKernelsTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Bf16" : "Fp32";
                         });

}  // namespace
}  // namespace trainyard::engine
