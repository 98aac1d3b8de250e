// The emulation's stand-in for engine/cuda/cuda_test_support.h, found
// first on the include path of tests that run GPU test sources on the
// emulated kernels: a device is always present (the emulation), and the
// error bound and comparison helpers are the real header's. The backend
// fixtures of the real header are left out: the emulation has no
// CudaBackend. Header-only; for tests.
#ifndef TRAINYARD_ENGINE_CUDA_CUDA_TEST_SUPPORT_H_
#define TRAINYARD_ENGINE_CUDA_CUDA_TEST_SUPPORT_H_

#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace trainyard::engine::cuda_test {

inline constexpr const char* kNoDevice = "unreachable: the emulation is there";

inline bool DevicePresent() { return true; }

// As the real header: the Higham bound on an n-term fp32 sum.
inline double Gamma(int64_t n) {
  const double u = 0x1p-24;
  return n * u / (1 - n * u);
}

// As the real header: each got[i] within tol[i] of want[i].
inline void ExpectWithin(const std::vector<float>& got,
                         const std::vector<float>& want,
                         const std::vector<double>& tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int misses = 0;
  for (size_t i = 0; i < got.size() && misses < 5; ++i) {
    const double diff = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(diff <= tol[i])) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want "
                    << want[i] << " (tolerance " << tol[i] << ")";
      ++misses;
    }
  }
}

}  // namespace trainyard::engine::cuda_test

#endif  // TRAINYARD_ENGINE_CUDA_CUDA_TEST_SUPPORT_H_
