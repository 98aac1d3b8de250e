// What the tests of the NCCL stand-in share: emulated device buffers,
// polling a non-blocking communicator with a deadline, and the values the
// ranks sum with the sum they must give (in rank order, bit for bit).
//
// Thread-safety: a DeviceBuffer belongs to the thread that made it.
#ifndef TRAINYARD_ENGINE_CUDA_EMULATION_EMULATED_NCCL_TEST_SUPPORT_H_
#define TRAINYARD_ENGINE_CUDA_EMULATION_EMULATED_NCCL_TEST_SUPPORT_H_

#include <nccl.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "engine/cuda/emulation/runtime.h"

namespace trainyard::cuda_emulation::testing {

// n floats of emulated device memory on `device` (made current on this
// thread).
class DeviceBuffer {
 public:
  DeviceBuffer(int device, size_t n) : n_(n) {
    if (cudaSetDevice(device) != cudaSuccess ||
        cudaMalloc(reinterpret_cast<void**>(&data_), n * sizeof(float)) !=
            cudaSuccess) {
      data_ = nullptr;
    }
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  float* data() const { return data_; }
  void Upload(const std::vector<float>& values) {
    cudaMemcpy(data_, values.data(), n_ * sizeof(float),
               cudaMemcpyHostToDevice);
  }
  std::vector<float> Download() const {
    std::vector<float> values(n_);
    cudaMemcpy(values.data(), data_, n_ * sizeof(float),
               cudaMemcpyDeviceToHost);
    return values;
  }

 private:
  size_t n_;
  float* data_ = nullptr;
};

// Polls `comm` until its state is no longer ncclInProgress or `timeout`
// passed (then ncclInProgress).
inline ncclResult_t AwaitState(
    ncclComm_t comm,
    std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    ncclResult_t state = ncclInternalError;
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) {
      return ncclInternalError;
    }
    if (state != ncclInProgress) return state;
    if (std::chrono::steady_clock::now() > deadline) return ncclInProgress;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

inline ncclConfig_t NonBlocking() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// Rank `rank`'s i-th value: sums of them round differently in different
// orders.
inline float Value(int rank, size_t i) {
  const float sign = rank % 2 == 0 ? 1.0f : -1.0f;
  return 0.1f * static_cast<float>(rank + 1) +
         sign * 1e-3f * static_cast<float>(i % 1013) / 3.0f;
}

inline std::vector<float> Values(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = Value(rank, i);
  return v;
}

// The sum of every rank's values, added in rank order.
inline std::vector<float> RankOrderSum(int world, size_t n) {
  std::vector<float> sum = Values(0, n);
  for (int r = 1; r < world; ++r) {
    for (size_t i = 0; i < n; ++i) sum[i] += Value(r, i);
  }
  return sum;
}

inline bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace trainyard::cuda_emulation::testing

#endif  // TRAINYARD_ENGINE_CUDA_EMULATION_EMULATED_NCCL_TEST_SUPPORT_H_
