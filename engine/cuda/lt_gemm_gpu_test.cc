// Which GELU cuBLASLt's GELU epilogues compute. The backend fuses them
// (bf16 LinearGeluForward, LinearBackwardThroughGelu) in place of its own
// GELU kernels, which compute GPT-2's tanh form, as the CPU reference does.
// NVIDIA's documentation does not say which form the epilogues take, and
// in bf16 the difference from the erf form (at most about 5e-4 near
// |x| = 2) hides in the rounding, so this asks in fp32: a product that is
// exactly x (identity times a column of values), through GELU_AUX and
// DGELU, against both forms. On the host emulation it checks the test
// itself (the stand-in computes the tanh form); on a GPU it settles it.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/cuda/cuda_test_support.h"
#include "engine/cuda/lt_gemm.h"
#include "gtest/gtest.h"

namespace trainyard::engine::cuda {
namespace {

double GeluTanh(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

double GeluTanhGrad(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  const double t = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
}

double GeluErf(double x) {
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}

// n floats of device memory, freed at the end.
struct DeviceFloats {
  explicit DeviceFloats(size_t n) : n(n) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&data), n * sizeof(float)),
              cudaSuccess);
  }
  ~DeviceFloats() { cudaFree(data); }
  void Set(const std::vector<float>& host) {
    ASSERT_EQ(cudaMemcpy(data, host.data(), n * sizeof(float),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  std::vector<float> Get() const {
    std::vector<float> host(n);
    EXPECT_EQ(cudaMemcpy(host.data(), data, n * sizeof(float),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }
  size_t n;
  float* data = nullptr;
};

class LtGemmGeluTest : public ::testing::Test {
 protected:
  // m = 8 rows (a multiple of 8, as the aux ld must be), n = 40 columns:
  // C[i, j] = sum_p I[i, p] X[p, j] = X[i, j], exact in fp32.
  static constexpr int64_t kM = 8, kN = 40;
  static constexpr int64_t kWorkspaceBytes = int64_t{32} << 20;

  void SetUp() override {
    if (!cuda_test::DevicePresent()) GTEST_SKIP() << cuda_test::kNoDevice;
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&workspace_, kWorkspaceBytes), cudaSuccess);
    auto gemm = LtGemm::Create(workspace_, kWorkspaceBytes, stream_);
    ASSERT_TRUE(gemm.ok()) << gemm.status();
    gemm_ = *std::move(gemm);
    identity_ = std::make_unique<DeviceFloats>(kM * kM);
    x_ = std::make_unique<DeviceFloats>(kM * kN);
    std::vector<float> identity(kM * kM, 0.f);
    for (int64_t i = 0; i < kM; ++i) identity[i * kM + i] = 1.f;
    identity_->Set(identity);
    // x from -4 to 4 in steps of 1/40: where the two forms differ most.
    for (int64_t i = 0; i < kM * kN; ++i) {
      x_host_.push_back(-4.f + static_cast<float>(i) / 40.f);
    }
    x_->Set(x_host_);
  }
  void TearDown() override {
    gemm_.reset();
    identity_.reset();
    x_.reset();
    if (workspace_ != nullptr) cudaFree(workspace_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // C = identity . B with the given epilogue, waited for.
  absl::Status Run(LtGemmArgs::Gelu gelu, const float* b, float* c,
                   const float* aux) {
    LtGemmArgs g;
    g.m = kM;
    g.n = kN;
    g.k = kM;
    g.a = identity_->data;
    g.lda = kM;
    g.b = b;
    g.ldb = kM;
    g.c = c;
    g.ldc = kM;
    g.gelu = gelu;
    g.gelu_aux = aux;
    absl::Status s = gemm_->Run(g);
    if (s.ok() && cudaStreamSynchronize(stream_) != cudaSuccess) {
      s = absl::InternalError("cudaStreamSynchronize");
    }
    return s;
  }

  cudaStream_t stream_ = nullptr;
  void* workspace_ = nullptr;
  std::unique_ptr<LtGemm> gemm_;
  std::unique_ptr<DeviceFloats> identity_, x_;
  std::vector<float> x_host_;
};

TEST_F(LtGemmGeluTest, TheGeluEpilogueIsTheTanhForm) {
  DeviceFloats out(kM * kN), aux(kM * kN);
  const absl::Status s =
      Run(LtGemmArgs::Gelu::kApply, x_->data, out.data, aux.data);
  if (s.code() == absl::StatusCode::kUnimplemented) {
    GTEST_SKIP() << "no fp32 GELU_AUX algorithm here: " << s;
  }
  ASSERT_TRUE(s.ok()) << s;
  const std::vector<float> got = out.Get(), pre = aux.Get();
  double off_tanh = 0, off_erf = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(pre[i], x_host_[i]) << "aux holds the pre-activation, " << i;
    off_tanh = std::max(off_tanh, std::abs(got[i] - GeluTanh(x_host_[i])));
    off_erf = std::max(off_erf, std::abs(got[i] - GeluErf(x_host_[i])));
  }
  // fp32 evaluation of either form is good to a few 1e-7 here; the forms
  // are 3e-4 apart at their widest on [-4, 4].
  EXPECT_LT(off_tanh, 2e-5)
      << "largest gap to tanh GELU " << off_tanh << ", to erf GELU " << off_erf;
  EXPECT_GT(off_erf, 1e-4);
}

TEST_F(LtGemmGeluTest, TheDgeluEpilogueIsTheTanhFormsDerivative) {
  DeviceFloats out(kM * kN), pre(kM * kN);
  // dout = 1 everywhere (identity . ones), aux = x: out = gelu'(x).
  DeviceFloats ones(kM * kN);
  ones.Set(std::vector<float>(kM * kN, 1.f));
  pre.Set(x_host_);
  const absl::Status s =
      Run(LtGemmArgs::Gelu::kGradient, ones.data, out.data, pre.data);
  if (s.code() == absl::StatusCode::kUnimplemented) {
    GTEST_SKIP() << "no fp32 DGELU algorithm here: " << s;
  }
  ASSERT_TRUE(s.ok()) << s;
  const std::vector<float> got = out.Get();
  double off = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    off = std::max(off, std::abs(got[i] - GeluTanhGrad(x_host_[i])));
  }
  EXPECT_LT(off, 5e-5) << "largest gap to the tanh form's derivative";
}

}  // namespace
}  // namespace trainyard::engine::cuda
