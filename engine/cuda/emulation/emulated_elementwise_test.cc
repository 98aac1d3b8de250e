// The elementwise kernels (fill, scale, cast, add, ReLU), GELU and the
// device probe run on the CUDA emulation, called through their launchers,
// against host loops with the CPU backend's semantics (engine/cpu), in fp32
// and bf16: one size just over a full grid (ElementwiseBlocks caps a launch
// at 8192 blocks of 256 threads, so the first threads of the fp32 kernels
// take a second turn of their grid-stride loops; the activation kernels
// stride over 16-byte packs, and AddTakesASecondGridTurnOfPacks gives them
// that many), an odd size that leaves the last block partly idle, and a
// single element, each with the tensors 16-byte aligned and 3 elements off
// (a scalar head and tail around the packs) and with tensors aligned unlike
// each other (no packs); guard zones around every output; the in-place
// calls the launchers allow; special values (ties of the bf16 rounding,
// signed zeros, infinities, NaN).
//
// Fill, scale, cast, add and ReLU are one IEEE operation and at most one
// rounding to bf16, so they must match bitwise. GELU goes through expf: it
// is checked against double within the bound derived below, and bitwise
// against the CPU backend's fp32 loop, which the kernels repeat term for
// term (this test and the kernels are both built without FMA contraction,
// and call the same host expf).
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "engine/core/bf16.h"
#include "engine/cpu/test_inputs.h"
#include "engine/cuda/elementwise_kernels.h"
#include "engine/cuda/emulation/guarded_buffers.h"
#include "engine/cuda/gelu_kernels.h"
#include "engine/cuda/probe_kernel.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

using emulation_test::Activations;
using emulation_test::ExpectBitwise;
using emulation_test::ExpectWithin;
using emulation_test::Gamma;
using emulation_test::Guarded;
using emulation_test::kBf16U;
using emulation_test::kU;

constexpr int64_t kFullGrid = 8192 * 256;
constexpr int64_t kSizes[] = {kFullGrid + 1001, 1001, 1};
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Ties of the rounding to bf16 (to even: down from 1 + 2^-8, up from
// 1 + 3 2^-8 and from the largest finite float, to infinity), values just
// off a tie, signed zeros, the smallest subnormal and infinities.
const std::vector<float>& RoundingCases() {
  static const std::vector<float> cases = [] {
    std::vector<float> v;
    for (const uint32_t bits :
         {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x3f808001u, 0x3f807fffu,
          0x7f7fffffu, 0x7f7f8000u, 0x00000001u}) {
      v.push_back(FromBits(bits));
    }
    v.insert(v.end(), {0.f, -0.f, kInf, -kInf, 1.f / 3, -1e-30f});
    return v;
  }();
  return cases;
}

// v with `special` written at its start and, where it is long enough,
// again at its end (the elements of the second grid-stride turn).
std::vector<float> WithSpecials(std::vector<float> v,
                                const std::vector<float>& special) {
  for (size_t k = 0; k < special.size() && k < v.size(); ++k) {
    v[k] = special[k];
    if (v.size() >= 2 * special.size()) v[v.size() - 1 - k] = special[k];
  }
  return v;
}

// The value an activation store keeps: x itself, or x rounded to bf16.
float Stored(float x, bool bf16) { return bf16 ? RoundToBf16(x) : x; }

class EmulatedElementwiseTest
    : public ::testing::TestWithParam<std::tuple<bool, int64_t>> {
 protected:
  bool bf16() const { return std::get<0>(GetParam()); }
  // Elements of every tensor's base past a 16-byte boundary.
  int64_t offset() const { return std::get<1>(GetParam()); }
  // Random activations, with `special` mixed in; bf16-rounded when bf16.
  std::vector<float> ActInputs(int64_t n, uint64_t seed, float lo, float hi,
                               const std::vector<float>& special = {}) const {
    std::vector<float> v = WithSpecials(Random(n, seed, lo, hi), special);
    for (float& x : v) x = Stored(x, bf16());
    return v;
  }
};

// ---------------------------------------------------------- fp32 tensors

TEST(EmulatedFp32Test, FillAndScaleAreExact) {
  for (const int64_t n : kSizes) {
    Guarded<float> x(Random(n, 1));
    ASSERT_EQ(cuda::LaunchFill(x.get(), n, -2.5f, nullptr), cudaSuccess);
    EXPECT_TRUE(x.GuardsIntact());
    ExpectBitwise(x.values(), std::vector<float>(n, -2.5f), "fill");

    const std::vector<float> before =
        WithSpecials(Random(n, 2, -1e3, 1e3), RoundingCases());
    std::vector<float> want = before;
    const float s = 1.f / 3;
    for (float& v : want) v *= s;
    Guarded<float> y(before);
    ASSERT_EQ(cuda::LaunchScale(y.get(), n, s, nullptr), cudaSuccess);
    EXPECT_TRUE(y.GuardsIntact());
    ExpectBitwise(y.values(), want, "scale");
  }
}

TEST(EmulatedFp32Test, ProbeWritesEveryIndex) {
  for (const int n : {1, 127, 128, 1001}) {
    Guarded<int> out(std::vector<int>(n, -1));
    ASSERT_EQ(cuda::LaunchProbeKernel(out.get(), n), cudaSuccess);
    EXPECT_TRUE(out.GuardsIntact());
    const std::vector<int> got = out.values();
    for (int i = 0; i < n; ++i) ASSERT_EQ(got[i], i * i + 1) << "index " << i;
  }
}

TEST(EmulatedFp32Test, ProbeOfNothingLaunchesNothing) {
  EXPECT_EQ(cuda::LaunchProbeKernel(nullptr, 0), cudaSuccess);
  EXPECT_EQ(cuda::LaunchProbeKernel(nullptr, -1), cudaSuccess);
}

// ---------------------------------------------------- activation tensors

TEST_P(EmulatedElementwiseTest, FillActRoundsToNearestEven) {
  for (const int64_t n : kSizes) {
    for (const float value : RoundingCases()) {
      if (n > 1001 && value != RoundingCases()[0]) continue;  // one is enough
      Activations x(std::vector<float>(n, 7.f), bf16(), offset());
      ASSERT_EQ(cuda::LaunchFillAct(x.get(), n, value, bf16(), nullptr),
                cudaSuccess);
      EXPECT_TRUE(x.GuardsIntact());
      ExpectBitwise(x.values(), std::vector<float>(n, Stored(value, bf16())),
                    "fill");
    }
  }
}

TEST_P(EmulatedElementwiseTest, CastToActRoundsToNearestEven) {
  for (const int64_t n : kSizes) {
    std::vector<float> special = RoundingCases();
    special.push_back(kNaN);
    const std::vector<float> src = WithSpecials(Random(n, 3, -10, 10), special);
    std::vector<float> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = Stored(src[i], bf16());
    Guarded<float> s(src, offset());
    Activations dst(std::vector<float>(n, 7.f), bf16(), offset());
    ASSERT_EQ(cuda::LaunchCastToAct(dst.get(), s.get(), n, bf16(), nullptr),
              cudaSuccess);
    EXPECT_TRUE(dst.GuardsIntact());
    ExpectBitwise(dst.values(), want, "cast");
    ExpectBitwise(s.values(), src, "cast source");
  }
}

TEST_P(EmulatedElementwiseTest, AddIsExactAlsoInPlace) {
  for (const int64_t n : kSizes) {
    const std::vector<float> a = ActInputs(n, 4, -4, 4, RoundingCases());
    const std::vector<float> b = ActInputs(n, 5, -4, 4, {0x1p-8f, 0x1p-8f});
    std::vector<float> want(n), twice(n);
    for (int64_t i = 0; i < n; ++i) {
      want[i] = Stored(a[i] + b[i], bf16());
      twice[i] = Stored(a[i] + a[i], bf16());
    }
    Activations x(a, bf16(), offset()), y(b, bf16(), offset());
    Activations out(std::vector<float>(n, 7.f), bf16(), offset());
    ASSERT_EQ(cuda::LaunchAdd(out.get(), x.get(), y.get(), n, bf16(), nullptr),
              cudaSuccess);
    EXPECT_TRUE(out.GuardsIntact());
    ExpectBitwise(out.values(), want, "a + b");
    ExpectBitwise(x.values(), a, "a");  // inputs untouched
    ExpectBitwise(y.values(), b, "b");
    Activations into_a(a, bf16(), offset()), into_b(b, bf16(), offset()),
        both(a, bf16(), offset());
    ASSERT_EQ(cuda::LaunchAdd(into_a.get(), into_a.get(), y.get(), n, bf16(),
                              nullptr),
              cudaSuccess);
    ASSERT_EQ(cuda::LaunchAdd(into_b.get(), x.get(), into_b.get(), n, bf16(),
                              nullptr),
              cudaSuccess);
    ASSERT_EQ(
        cuda::LaunchAdd(both.get(), both.get(), both.get(), n, bf16(), nullptr),
        cudaSuccess);
    EXPECT_TRUE(into_a.GuardsIntact() && into_b.GuardsIntact() &&
                both.GuardsIntact());
    ExpectBitwise(into_a.values(), want, "a += b");
    ExpectBitwise(into_b.values(), want, "b = a + b");
    ExpectBitwise(both.values(), twice, "a += a");
  }
}

TEST_P(EmulatedElementwiseTest, ReluForwardAndBackwardAlsoInPlace) {
  // NaN and -0 are not > 0: both give +0, as on the CPU.
  const std::vector<float> special = {kNaN, -0.f,  0.f,
                                      kInf, -kInf, FromBits(0x00000001)};
  for (const int64_t n : kSizes) {
    const std::vector<float> x = ActInputs(n, 6, -1, 1, special);
    const std::vector<float> dout = ActInputs(n, 7, -1, 1);
    std::vector<float> want_out(n), want_dx(n);
    for (int64_t i = 0; i < n; ++i) {
      want_out[i] = x[i] > 0.f ? x[i] : 0.f;
      want_dx[i] = x[i] > 0.f ? dout[i] : 0.f;  // the forward's out > 0 too
    }
    Activations in(x, bf16(), offset()),
        out(std::vector<float>(n, 7.f), bf16(), offset());
    ASSERT_EQ(cuda::LaunchReluForward(out.get(), in.get(), n, bf16(), nullptr),
              cudaSuccess);
    EXPECT_TRUE(out.GuardsIntact());
    ExpectBitwise(out.values(), want_out, "relu");
    Activations in_place(x, bf16(), offset());
    ASSERT_EQ(cuda::LaunchReluForward(in_place.get(), in_place.get(), n, bf16(),
                                      nullptr),
              cudaSuccess);
    EXPECT_TRUE(in_place.GuardsIntact());
    ExpectBitwise(in_place.values(), want_out, "relu in place");

    // The backward reads the input x as `out`: NaN, -0 and negatives stop
    // the gradient.
    Activations d(dout, bf16(), offset()),
        dx(std::vector<float>(n, 7.f), bf16(), offset());
    ASSERT_EQ(cuda::LaunchReluBackward(dx.get(), d.get(), in.get(), n, bf16(),
                                       nullptr),
              cudaSuccess);
    EXPECT_TRUE(dx.GuardsIntact());
    ExpectBitwise(dx.values(), want_dx, "relu backward");
    ASSERT_EQ(cuda::LaunchReluBackward(d.get(), d.get(), in.get(), n, bf16(),
                                       nullptr),
              cudaSuccess);
    EXPECT_TRUE(d.GuardsIntact());
    ExpectBitwise(d.values(), want_dx, "relu backward in place");
  }
}

// Arrays aligned unlike each other: no packs, element by element, the
// same bits.
TEST_P(EmulatedElementwiseTest, ArraysAlignedUnlikeGoElementByElement) {
  const int64_t n = 1001;
  const std::vector<float> a = ActInputs(n, 11, -4, 4, RoundingCases());
  const std::vector<float> b = ActInputs(n, 12, -4, 4);
  std::vector<float> sum(n), cast(n);
  for (int64_t i = 0; i < n; ++i) {
    sum[i] = Stored(a[i] + b[i], bf16());
    cast[i] = Stored(b[i] / 3, bf16());
  }
  Activations x(a, bf16(), offset()), y(b, bf16(), offset());
  Activations out(std::vector<float>(n, 7.f), bf16(), offset() + 1);
  ASSERT_EQ(cuda::LaunchAdd(out.get(), x.get(), y.get(), n, bf16(), nullptr),
            cudaSuccess);
  EXPECT_TRUE(out.GuardsIntact());
  ExpectBitwise(out.values(), sum, "a + b into a shifted out");
  std::vector<float> src(n);
  for (int64_t i = 0; i < n; ++i) src[i] = b[i] / 3;
  Guarded<float> s(src, offset() + 1);
  Activations dst(std::vector<float>(n, 7.f), bf16(), offset());
  ASSERT_EQ(cuda::LaunchCastToAct(dst.get(), s.get(), n, bf16(), nullptr),
            cudaSuccess);
  EXPECT_TRUE(dst.GuardsIntact());
  ExpectBitwise(dst.values(), cast, "cast from a shifted source");
}

// More packs than a full grid has threads: the first threads take a second
// turn of the grid-stride loop over packs.
TEST_P(EmulatedElementwiseTest, AddTakesASecondGridTurnOfPacks) {
  const int64_t n = kFullGrid * (bf16() ? 8 : 4) + 1001;
  const std::vector<float> a = ActInputs(n, 13, -4, 4);
  const std::vector<float> b = ActInputs(n, 14, -4, 4);
  std::vector<float> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = Stored(a[i] + b[i], bf16());
  Activations x(a, bf16(), offset()), y(b, bf16(), offset());
  ASSERT_EQ(cuda::LaunchAdd(x.get(), x.get(), y.get(), n, bf16(), nullptr),
            cudaSuccess);
  EXPECT_TRUE(x.GuardsIntact());
  ExpectBitwise(x.values(), want, "a += b");
}

// ------------------------------------------------------------------- GELU

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
constexpr float k3Cubic = 3.f * kCubic;  // folded in fp32, as the kernel's

// The CPU backend's fp32 GELU (engine/cpu/gelu.cc), term for term.
float CpuTanh(float x) { return 1.f - 2.f / (1.f + std::exp(2.f * x)); }

float CpuGelu(float v) {
  const float inner = kSqrt2OverPi * (v + kCubic * v * v * v);
  return 0.5f * v * (1.f + CpuTanh(inner));
}

float CpuGeluGrad(float v, float dout) {
  const float inner = kSqrt2OverPi * (v + kCubic * v * v * v);
  const float t = CpuTanh(inner);
  const float sech2 = 1.f - t * t;
  const float local = 0.5f * (1.f + t) + 0.5f * v * sech2 * kSqrt2OverPi *
                                             (1.f + 3.f * kCubic * v * v);
  return local * dout;
}

// GELU in double from the kernels' fp32 constants, and bounds on the
// kernels' fp32 results, to first order in u and doubled for the rest:
//   inner: 3 roundings in kCubic v v v, 1 in the add, 1 in the product:
//     e_i = gamma_5 kS (|v| + |kCubic v^3|).
//   tanh = 1 - r, r = 2 / (1 + E), E = expf(2 inner): expf within 2 ulp
//     (4u; CUDA's bound, the host's is tighter) of exp(2 inner~), itself
//     off by 2 e_i relatively: dE = 2 e_i + 4u. r's relative error is
//     dE E / (1 + E) = dE (1 - r / 2) plus 2u (the add, the divide);
//     e_t = r (dE (1 - r / 2) + 2u) + u |t| (the subtract).
//   forward 0.5 v (1 + t): 0.5 |v| (e_t + u |1 + t|) + u |out|.
//   backward: sech2 = 1 - t t: e_s = 2 |t| e_t + u t^2 + u sech2;
//     A = 0.5 (1 + t): 0.5 (e_t + u |1 + t|); C = 1 + k3Cubic v v:
//     gamma_3 C; B = 0.5 v sech2 kS C, 3 products: 0.5 |v| kS (e_s C +
//     sech2 gamma_3 C) + gamma_3 |B|; local = A + B: e_A + e_B + u |local|;
//     dx = local dout: |dout| e_local + u |dx|.
// A bf16 store adds 2^-8 of the result.
struct GeluWant {
  double out, out_tol, dx, dx_tol;
};

GeluWant HostGelu(double v, double dout, bool bf16) {
  const double kS = kSqrt2OverPi, cube = kCubic * v * v * v;
  const double inner = kS * (v + cube), t = std::tanh(inner);
  const double e_i = Gamma(5) * kS * (std::abs(v) + std::abs(cube));
  const double r = 2 / (1 + std::exp(2 * inner));
  const double e_t =
      r * ((2 * e_i + 4 * kU) * (1 - r / 2) + 2 * kU) + kU * std::abs(t);
  GeluWant w;
  w.out = 0.5 * v * (1 + t);
  w.out_tol =
      2 * (0.5 * std::abs(v) * (e_t + kU * (1 + t)) + kU * std::abs(w.out));
  const double sech2 = 1 - t * t, c = 1 + k3Cubic * v * v;
  const double e_s = 2 * std::abs(t) * e_t + kU * t * t + kU * sech2;
  const double a = 0.5 * (1 + t), b = 0.5 * v * sech2 * kS * c;
  const double e_a = 0.5 * (e_t + kU * (1 + t));
  const double e_b = 0.5 * std::abs(v) * kS * (e_s * c + sech2 * Gamma(3) * c) +
                     Gamma(3) * std::abs(b);
  const double local = a + b;
  w.dx = local * dout;
  w.dx_tol = 2 * (std::abs(dout) * (e_a + e_b + kU * std::abs(local)) +
                  kU * std::abs(w.dx));
  if (bf16) {
    w.out_tol += kBf16U * (std::abs(w.out) + w.out_tol);
    w.dx_tol += kBf16U * (std::abs(w.dx) + w.dx_tol);
  }
  return w;
}

// Around zero, in the bend, and saturated (expf overflows or underflows).
const std::vector<float> kGeluSpecial = {0.f,   -0.f, 1e-30f, -1e-30f, 20.f,
                                         -20.f, 9.5f, -9.5f,  -0.75f};

TEST_P(EmulatedElementwiseTest, GeluForwardWithinBoundAlsoInPlace) {
  for (const int64_t n : kSizes) {
    const std::vector<float> x = ActInputs(n, 8, -6, 6, kGeluSpecial);
    std::vector<double> want(n), tol(n);
    std::vector<float> cpu(n);
    for (int64_t i = 0; i < n; ++i) {
      const GeluWant w = HostGelu(x[i], 0, bf16());
      want[i] = w.out;
      tol[i] = w.out_tol;
      cpu[i] = Stored(CpuGelu(x[i]), bf16());
    }
    Activations in(x, bf16(), offset()),
        out(std::vector<float>(n, 7.f), bf16(), offset());
    ASSERT_EQ(cuda::LaunchGeluForward(out.get(), in.get(), n, bf16(), nullptr),
              cudaSuccess);
    EXPECT_TRUE(out.GuardsIntact());
    const std::vector<float> got = out.values();
    ExpectWithin(got, want, tol, "gelu");
    ExpectBitwise(got, cpu, "gelu against the CPU's");
    Activations in_place(x, bf16(), offset());
    ASSERT_EQ(cuda::LaunchGeluForward(in_place.get(), in_place.get(), n, bf16(),
                                      nullptr),
              cudaSuccess);
    EXPECT_TRUE(in_place.GuardsIntact());
    ExpectBitwise(in_place.values(), got, "gelu in place");
  }
}

TEST_P(EmulatedElementwiseTest, GeluBackwardWithinBoundAlsoInPlace) {
  for (const int64_t n : kSizes) {
    const std::vector<float> x = ActInputs(n, 9, -6, 6, kGeluSpecial);
    const std::vector<float> dout = ActInputs(n, 10, -2, 2);
    std::vector<double> want(n), tol(n);
    std::vector<float> cpu(n);
    for (int64_t i = 0; i < n; ++i) {
      const GeluWant w = HostGelu(x[i], dout[i], bf16());
      want[i] = w.dx;
      tol[i] = w.dx_tol;
      cpu[i] = Stored(CpuGeluGrad(x[i], dout[i]), bf16());
    }
    Activations in(x, bf16(), offset()), d(dout, bf16(), offset());
    Activations dx(std::vector<float>(n, 7.f), bf16(), offset());
    ASSERT_EQ(cuda::LaunchGeluBackward(dx.get(), in.get(), d.get(), n, bf16(),
                                       nullptr),
              cudaSuccess);
    EXPECT_TRUE(dx.GuardsIntact());
    const std::vector<float> got = dx.values();
    ExpectWithin(got, want, tol, "gelu backward");
    ExpectBitwise(got, cpu, "gelu backward against the CPU's");
    ASSERT_EQ(cuda::LaunchGeluBackward(d.get(), in.get(), d.get(), n, bf16(),
                                       nullptr),
              cudaSuccess);
    EXPECT_TRUE(d.GuardsIntact());
    ExpectBitwise(d.values(), got, "gelu backward in place");
  }
}

// No elements (or fewer than none): nothing launched, nothing written.
TEST_P(EmulatedElementwiseTest, EmptyLaunchesWriteNothing) {
  for (const int64_t n : {int64_t{0}, int64_t{-3}}) {
    Guarded<float> f(std::vector<float>(1, 7.f));
    Activations a(std::vector<float>(1, 7.f), bf16());
    const bool b = bf16();
    EXPECT_EQ(cuda::LaunchFill(f.get(), n, 1.f, nullptr), cudaSuccess);
    EXPECT_EQ(cuda::LaunchScale(f.get(), n, 2.f, nullptr), cudaSuccess);
    EXPECT_EQ(cuda::LaunchFillAct(a.get(), n, 1.f, b, nullptr), cudaSuccess);
    EXPECT_EQ(cuda::LaunchCastToAct(a.get(), f.get(), n, b, nullptr),
              cudaSuccess);
    EXPECT_EQ(cuda::LaunchAdd(a.get(), a.get(), a.get(), n, b, nullptr),
              cudaSuccess);
    EXPECT_EQ(cuda::LaunchReluForward(a.get(), a.get(), n, b, nullptr),
              cudaSuccess);
    EXPECT_EQ(
        cuda::LaunchReluBackward(a.get(), a.get(), a.get(), n, b, nullptr),
        cudaSuccess);
    EXPECT_EQ(cuda::LaunchGeluForward(a.get(), a.get(), n, b, nullptr),
              cudaSuccess);
    EXPECT_EQ(
        cuda::LaunchGeluBackward(a.get(), a.get(), a.get(), n, b, nullptr),
        cudaSuccess);
    EXPECT_TRUE(f.GuardsIntact() && a.GuardsIntact());
    ExpectBitwise(f.values(), {7.f}, "fp32 after empty launches");
    ExpectBitwise(a.values(), {7.f}, "activations after empty launches");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Types, EmulatedElementwiseTest,
    ::testing::Combine(::testing::Bool(), ::testing::Values(0, 3)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) ? "Bf16" : "Fp32") + "_at" +
             std::to_string(std::get<1>(info.param));
    });

}  // namespace
}  // namespace trainyard::engine
