// The LayerNorm kernels (layernorm_kernels.cu) on the CUDA emulation,
// called through their launchers, against host loops in double, in fp32 and
// bf16, over row shapes that exercise their packed access (vec16.cuh):
// whole packs (200 channels, aligned), rows whose arrays align unlike each
// other (203 channels: element by element), and every array 3 elements off
// a 16-byte boundary (a scalar head and tail around the packs), and the
// widths around the one-pass backward's limit (768 and 1,024 channels: 3
// and 4 bf16 packs a lane, 6 and 8 fp32; 1,032: one pack a lane too many).
// Also: thousands of rows and few, scratch sizes that pick the one-pass
// backward at several block counts or the two-pass one (too small for one
// block's partials, or for all columns at once), bitwise repeatability
// while the emulation changes its thread order, guard zones and a bad
// scratch size.
//
// Bounds (gamma_n as guarded_buffers.h): a row's sums are warp sums whose
// terms pass through the adds of their lane and the 5 of the butterfly.
// Packed, a lane adds the entries of ceil(packs / 32) packs of P channels
// in order plus at most one head and one tail channel; element by element,
// ceil(C / 32) channels (LaneTerms). The parameter gradients are column
// sums over rows: in two passes (column_sums.cuh) of depth ColumnSumDepth;
// in one, a lane's ceil(rows / 8G) rows, the block's 8 warps, the G
// blocks' partials and the add onto the gradient, for the launcher's block
// count G, at most 264 (ParamSumDepth bounds both for any G).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "engine/cpu/test_inputs.h"
#include "engine/cuda/elementwise_kernels.h"
#include "engine/cuda/emulation/guarded_buffers.h"
#include "engine/cuda/layernorm_kernels.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

using emulation_test::Activations;
using emulation_test::ColumnSumDepth;
using emulation_test::ExpectWithin;
using emulation_test::Gamma;
using emulation_test::Guarded;
using emulation_test::Inputs;
using emulation_test::kBf16U;
using emulation_test::kU;
using emulation_test::SameBits;

constexpr int64_t kLnRows = 2000;
constexpr double kLnEps = 1e-5;

struct LnShape {
  int64_t channels;
  int64_t offset;  // elements of every activation's base past 16 bytes
};

// The most terms one lane adds into its share of a row's sum (the header's
// count).
int64_t LaneTerms(int64_t C, bool bf16) {
  const int64_t P = bf16 ? 8 : 4;
  return std::max((C + 31) / 32, (C + 32 * P - 1) / (32 * P) * P + 2);
}

// The most adds on the way from a term of a parameter gradient's column
// sum to the gradient, on the path the launcher takes for this shape,
// scratch and number of sums (2: dweight and dbias; 3: dinp's column sums
// too) (its header's conditions; G as layernorm_kernels.cu picks it).
int64_t ParamSumDepth(int64_t rows, int64_t C, int64_t offset, bool bf16,
                      int64_t scratch_floats, int64_t sums) {
  const int64_t P = bf16 ? 8 : 4;
  const bool one_pass =
      offset == 0 && C % P == 0 && C <= 1024 && scratch_floats >= sums * C;
  if (!one_pass) return ColumnSumDepth(rows);
  const int64_t g =
      std::min({(rows + 7) / 8, int64_t{264}, scratch_floats / (sums * C)});
  return (rows + 8 * g - 1) / (8 * g) + 8 + g + 1;
}

class EmulatedLayerNormTest
    : public ::testing::TestWithParam<std::tuple<bool, LnShape>> {
 protected:
  bool bf16() const { return std::get<0>(GetParam()); }
  int64_t channels() const { return std::get<1>(GetParam()).channels; }
  int64_t offset() const { return std::get<1>(GetParam()).offset; }
  // An activation tensor at the shape's offset.
  Activations Act(const std::vector<float>& v) const {
    return Activations(v, bf16(), offset());
  }
  Activations Zeros(int64_t n) const { return Act(std::vector<float>(n, 0.f)); }
};

// Rows of LayerNorm inputs, each row's mean and rstd from the forward.
struct LayerNormCase {
  std::vector<float> inp, weight, bias, mean, rstd;
};

// Runs the forward and checks it: mean and rstd against double, out within
// the errors of a warp sum (LaneTerms + 5 adds) and the few roundings
// after it.
LayerNormCase CheckedForward(bool bf16, int64_t C, int64_t offset,
                             int64_t rows) {
  LayerNormCase k;
  k.inp = Inputs(rows * C, 41, bf16, -2, 3);
  k.weight = Inputs(C, 42, bf16, 0.5, 1.5);
  k.bias = Inputs(C, 43, bf16);
  Activations inp(k.inp, bf16, offset), weight(k.weight, bf16, offset),
      bias(k.bias, bf16, offset);
  Activations out(std::vector<float>(k.inp.size(), 0.f), bf16, offset);
  Guarded<float> mean(std::vector<float>(rows, 0.f));
  Guarded<float> rstd(std::vector<float>(rows, 0.f));
  EXPECT_EQ(cuda::LaunchLayerNormForward(out.get(), mean.get(), rstd.get(),
                                         inp.get(), weight.get(), bias.get(),
                                         rows, C, bf16, nullptr),
            cudaSuccess);
  EXPECT_TRUE(out.GuardsIntact() && mean.GuardsIntact() && rstd.GuardsIntact());
  k.mean = mean.values();
  k.rstd = rstd.values();
  const std::vector<float> got = out.values();
  const int64_t depth = LaneTerms(C, bf16) + 5;
  std::vector<double> want(got.size()), tol(got.size());
  for (int64_t r = 0; r < rows; ++r) {
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
// dbias as column sums of param_depth adds of terms of 3 and 0 roundings.
struct LayerNormGrads {
  std::vector<double> dinp, dinp_tol, dweight, dweight_tol, dbias, dbias_tol;
};

LayerNormGrads HostBackward(const LayerNormCase& k,
                            const std::vector<float>& dout,
                            const std::vector<float>& dinp0,
                            const std::vector<float>& dw0,
                            const std::vector<float>& db0, bool bf16,
                            int64_t param_depth) {
  const int64_t C = static_cast<int64_t>(k.weight.size());
  const int64_t rows = static_cast<int64_t>(k.mean.size());
  const int64_t depth = LaneTerms(C, bf16) + 5;
  LayerNormGrads g{
      {}, {}, {dw0.begin(), dw0.end()}, {}, {db0.begin(), db0.end()}, {}};
  g.dinp.resize(dinp0.size());
  g.dinp_tol.resize(dinp0.size());
  std::vector<double> dw_mag(C), db_mag(C);
  for (int64_t c = 0; c < C; ++c) {
    dw_mag[c] = std::abs(dw0[c]);
    db_mag[c] = std::abs(db0[c]);
  }
  for (int64_t r = 0; r < rows; ++r) {
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
    g.dweight_tol[c] = Gamma(param_depth + 3) * dw_mag[c];
    g.dbias_tol[c] = Gamma(param_depth) * db_mag[c];
  }
  return g;
}

// The residual add fused into the LayerNorm: bit for bit LaunchAdd then
// LaunchLayerNormForward (it stores the rounded sum and normalizes what it
// stored, in the plain kernel's lane order and packs), its arrays aligned
// alike.
TEST_P(EmulatedLayerNormTest, AddLayerNormIsTheTwoOpsBitwise) {
  const int64_t C = channels(), n = kLnRows * C;
  Activations a = Act(Inputs(n, 44, bf16(), -2, 3));
  Activations b = Act(Inputs(n, 45, bf16(), -1, 1));
  Activations weight = Act(Inputs(C, 46, bf16(), 0.5, 1.5));
  Activations bias = Act(Inputs(C, 47, bf16()));
  Activations res = Zeros(n), out = Zeros(n);
  Guarded<float> mean(std::vector<float>(kLnRows, 0.f));
  Guarded<float> rstd(std::vector<float>(kLnRows, 0.f));
  ASSERT_EQ(cuda::LaunchAddLayerNormForward(
                res.get(), out.get(), mean.get(), rstd.get(), a.get(), b.get(),
                weight.get(), bias.get(), kLnRows, C, bf16(), nullptr),
            cudaSuccess);
  EXPECT_TRUE(res.GuardsIntact() && out.GuardsIntact() && mean.GuardsIntact() &&
              rstd.GuardsIntact());
  Activations res2 = Zeros(n), out2 = Zeros(n);
  Guarded<float> mean2(std::vector<float>(kLnRows, 0.f));
  Guarded<float> rstd2(std::vector<float>(kLnRows, 0.f));
  ASSERT_EQ(cuda::LaunchAdd(res2.get(), a.get(), b.get(), n, bf16(), nullptr),
            cudaSuccess);
  ASSERT_EQ(cuda::LaunchLayerNormForward(out2.get(), mean2.get(), rstd2.get(),
                                         res2.get(), weight.get(), bias.get(),
                                         kLnRows, C, bf16(), nullptr),
            cudaSuccess);
  EXPECT_TRUE(SameBits(res.values(), res2.values()));
  EXPECT_TRUE(SameBits(out.values(), out2.values()));
  EXPECT_TRUE(SameBits(mean.values(), mean2.values()));
  EXPECT_TRUE(SameBits(rstd.values(), rstd2.values()));
}

// Scratch sizes, in floats: room for 264 blocks' partials, for 32 blocks'
// (or every column at once in 10 row ranges for the two-pass backward),
// for one block's, and too little for one (96 columns at a time); each
// with and without dinp's column sums (which take a third of the scratch:
// 176 blocks, 21, the two-pass backward, 64 columns at a time). Each is
// within its path's bound and repeats bitwise; dinp is the same bits
// whichever path and block count, as the one-pass kernel's comment says.
// With 5 rows, most of the one block's warps have no row.
TEST_P(EmulatedLayerNormTest, BackwardInChunksAndRepeatsBitwise) {
  const int64_t C = channels();
  for (const int64_t rows : {kLnRows, int64_t{5}}) {
    SCOPED_TRACE("rows " + std::to_string(rows));
    const int64_t n = rows * C;
    const LayerNormCase k = CheckedForward(bf16(), C, offset(), rows);
    const std::vector<float> dout = Inputs(n, 51, bf16());
    const std::vector<float> dinp0 = Inputs(n, 52, bf16());
    const std::vector<float> dw0 = Random(C, 53);
    const std::vector<float> db0 = Random(C, 54);
    const std::vector<float> sums0 = Random(C, 55);
    Activations d = Act(dout), inp = Act(k.inp), weight = Act(k.weight);
    Guarded<float> mean(k.mean), rstd(k.rstd);
    std::vector<float> first_dinp;
    for (const int64_t scratch_floats :
         {2 * 264 * C, 64 * C, 2 * C, int64_t{192}}) {
      for (const int64_t sums : {2, 3}) {
        SCOPED_TRACE("scratch " + std::to_string(scratch_floats) + ", sums " +
                     std::to_string(sums));
        const int64_t depth =
            ParamSumDepth(rows, C, offset(), bf16(), scratch_floats, sums);
        const LayerNormGrads want =
            HostBackward(k, dout, dinp0, dw0, db0, bf16(), depth);
        const int outputs = sums == 3 ? 4 : 3;
        std::vector<float> first[4];
        for (int run = 0; run < 2; ++run) {
          Activations dinp = Act(dinp0);
          Guarded<float> dw(dw0), db(db0), dinp_sums(sums0);
          Guarded<float> scratch(std::vector<float>(scratch_floats, 0.f));
          ASSERT_EQ(cuda::LaunchLayerNormBackward(
                        dinp.get(), dw.get(), db.get(),
                        sums == 3 ? dinp_sums.get() : nullptr, d.get(),
                        inp.get(), weight.get(), mean.get(), rstd.get(), rows,
                        C, scratch.get(), scratch_floats, bf16(), nullptr),
                    cudaSuccess);
          EXPECT_TRUE(dinp.GuardsIntact() && dw.GuardsIntact() &&
                      db.GuardsIntact() && dinp_sums.GuardsIntact() &&
                      scratch.GuardsIntact());
          const std::vector<float> got[4] = {dinp.values(), dw.values(),
                                             db.values(), dinp_sums.values()};
          if (run == 0) {
            ExpectWithin(got[0], want.dinp, want.dinp_tol, "dinp");
            ExpectWithin(got[1], want.dweight, want.dweight_tol, "dweight");
            ExpectWithin(got[2], want.dbias, want.dbias_tol, "dbias");
            if (sums == 3) {
              // The sums of dinp as the kernel stored it.
              std::vector<double> want_sums(C), tol(C);
              for (int64_t c = 0; c < C; ++c) {
                double sum = sums0[c], mag = std::abs(sums0[c]);
                for (int64_t r = 0; r < rows; ++r) {
                  sum += got[0][r * C + c];
                  mag += std::abs(got[0][r * C + c]);
                }
                want_sums[c] = sum;
                tol[c] = Gamma(depth) * mag;
              }
              ExpectWithin(got[3], want_sums, tol, "dinp's column sums");
            } else {
              EXPECT_TRUE(SameBits(got[3], sums0)) << "sums asked for none";
            }
            for (int j = 0; j < outputs; ++j) first[j] = got[j];
            if (first_dinp.empty()) first_dinp = got[0];
            EXPECT_TRUE(SameBits(got[0], first_dinp));
          } else {
            for (int j = 0; j < outputs; ++j) {
              EXPECT_TRUE(SameBits(got[j], first[j])) << "output " << j;
            }
          }
        }
      }
    }
    Activations dinp = Act(dinp0);
    Guarded<float> dw(dw0), db(db0), dinp_sums(sums0);
    Guarded<float> scratch(std::vector<float>(95, 0.f));
    EXPECT_EQ(cuda::LaunchLayerNormBackward(
                  dinp.get(), dw.get(), db.get(), nullptr, d.get(), inp.get(),
                  weight.get(), mean.get(), rstd.get(), rows, C, scratch.get(),
                  63, bf16(), nullptr),
              cudaErrorInvalidValue);
    EXPECT_EQ(cuda::LaunchLayerNormBackward(
                  dinp.get(), dw.get(), db.get(), dinp_sums.get(), d.get(),
                  inp.get(), weight.get(), mean.get(), rstd.get(), rows, C,
                  scratch.get(), 95, bf16(), nullptr),
              cudaErrorInvalidValue);
    EXPECT_TRUE(SameBits(dinp.values(), dinp0)) << "nothing ran";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, EmulatedLayerNormTest,
    ::testing::Combine(::testing::Bool(),
                       ::testing::Values(LnShape{200, 0}, LnShape{203, 0},
                                         LnShape{200, 3}, LnShape{768, 0},
                                         LnShape{1024, 0}, LnShape{1032, 0})),
    [](const auto& info) {
      const LnShape s = std::get<1>(info.param);
      return std::string(std::get<0>(info.param) ? "Bf16" : "Fp32") + "_" +
             std::to_string(s.channels) + "_at" + std::to_string(s.offset);
    });

}  // namespace
}  // namespace trainyard::engine
