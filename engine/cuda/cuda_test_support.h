// Shared pieces of the CUDA backend's tests: whether this machine has a
// device (the tests skip without one), device copies of host vectors, the
// fp32 error bound the comparisons with the CPU backend use, and a fixture
// holding one backend of each kind. Header-only; for tests.
#ifndef TRAINYARD_ENGINE_CUDA_CUDA_TEST_SUPPORT_H_
#define TRAINYARD_ENGINE_CUDA_CUDA_TEST_SUPPORT_H_

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/core/backend.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/device_query.h"
#include "engine/cuda/test_tolerances.h"
#include "gtest/gtest.h"

namespace trainyard::engine::cuda_test {

inline constexpr const char* kNoDevice =
    "no CUDA device or driver on this machine; the GPU tests need one";

inline bool DevicePresent() {
  absl::StatusOr<std::vector<cuda::CudaDeviceInfo>> devices =
      cuda::ListCudaDevices();
  return devices.ok() && !devices->empty();
}

// A device buffer holding n values of T.
template <typename T>
struct DeviceArray {
  std::unique_ptr<DeviceBuffer> buffer;
  int64_t n = 0;
  T* get() const { return static_cast<T*>(buffer->data()); }
};

template <typename T>
DeviceArray<T> Upload(Backend& backend, const std::vector<T>& host) {
  DeviceArray<T> a;
  a.n = static_cast<int64_t>(host.size());
  a.buffer = *backend.Allocate(a.n * static_cast<int64_t>(sizeof(T)));
  backend.CopyToDevice(a.buffer->data(), host.data(), a.n * sizeof(T));
  return a;
}

template <typename T>
DeviceArray<T> Zeros(Backend& backend, int64_t n) {
  DeviceArray<T> a;
  a.n = n;
  a.buffer = *backend.Allocate(n * static_cast<int64_t>(sizeof(T)));
  return a;
}

template <typename T>
std::vector<T> Download(Backend& backend, const T* device, int64_t n) {
  std::vector<T> host(static_cast<size_t>(n));
  backend.CopyToHost(host.data(), device, n * static_cast<int64_t>(sizeof(T)));
  return host;
}

template <typename T>
std::vector<T> Download(Backend& backend, const DeviceArray<T>& a) {
  return Download(backend, a.get(), a.n);
}

// A CUDA backend (1 GiB arena, synchronizing after each op so a fault names
// its op) beside a CPU backend; skips the test without a device.
class CudaVsCpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!DevicePresent()) GTEST_SKIP() << kNoDevice;
    CudaBackendOptions options;
    options.arena_bytes = int64_t{1} << 30;
    options.sync_after_each_op = true;
    auto gpu = CudaBackend::Create(options);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = *std::move(gpu);
    cpu_ = *CpuBackend::Create({});
  }
  void TearDown() override {
    if (gpu_ != nullptr) {
      const absl::Status s = gpu_->Synchronize();
      EXPECT_TRUE(s.ok()) << s;
    }
  }

  template <typename T>
  DeviceArray<T> Up(const std::vector<T>& v) {
    return Upload(*gpu_, v);
  }
  template <typename T>
  std::vector<T> Down(const DeviceArray<T>& a) {
    return Download(*gpu_, a);
  }

  std::unique_ptr<CudaBackend> gpu_;
  std::unique_ptr<CpuBackend> cpu_;
};

}  // namespace trainyard::engine::cuda_test

#endif  // TRAINYARD_ENGINE_CUDA_CUDA_TEST_SUPPORT_H_
