// CudaStatus formatting and codes; needs no device.
#include "engine/cuda/cuda_status.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace trainyard::engine::cuda {
namespace {

absl::Status FailingCall() {
  YARD_CUDA_RETURN_IF_ERROR(cudaErrorMemoryAllocation);
  return absl::OkStatus();
}

TEST(CudaStatusTest, SuccessIsOk) {
  EXPECT_TRUE(CudaStatus(cudaSuccess, "x", "f.cc", 1).ok());
}

TEST(CudaStatusTest, CarriesSiteExpressionAndCudaText) {
  absl::Status s = FailingCall();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(s.message(), "cuda_status_test.cc:"));
  EXPECT_TRUE(absl::StrContains(s.message(), "cudaErrorMemoryAllocation"));
  EXPECT_TRUE(absl::StrContains(s.message(),
                                cudaGetErrorString(cudaErrorMemoryAllocation)))
      << s.message();
}

TEST(CudaStatusTest, NoDeviceIsUnavailable) {
  EXPECT_EQ(CudaStatus(cudaErrorNoDevice, "x", "f.cc", 1).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(CudaStatus(cudaErrorInvalidValue, "x", "f.cc", 1).code(),
            absl::StatusCode::kInternal);
}

absl::Status FailingCublasCall() {
  YARD_CUBLAS_RETURN_IF_ERROR(CUBLAS_STATUS_NOT_SUPPORTED);
  return absl::OkStatus();
}

TEST(CublasStatusTest, CarriesSiteExpressionAndCublasText) {
  EXPECT_TRUE(CublasStatus(CUBLAS_STATUS_SUCCESS, "x", "f.cc", 1).ok());
  absl::Status s = FailingCublasCall();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StrContains(s.message(), "cuda_status_test.cc:"));
  EXPECT_TRUE(absl::StrContains(s.message(), "CUBLAS_STATUS_NOT_SUPPORTED"))
      << s.message();
  EXPECT_EQ(CublasStatus(CUBLAS_STATUS_ALLOC_FAILED, "x", "f.cc", 1).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(CublasStatus(CUBLAS_STATUS_EXECUTION_FAILED, "x", "f.cc", 1).code(),
            absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace trainyard::engine::cuda
