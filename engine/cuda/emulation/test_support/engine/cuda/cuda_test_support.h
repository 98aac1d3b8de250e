// The emulation's stand-in for engine/cuda/cuda_test_support.h, found
// first on the include path of tests that run GPU test sources on the
// emulated kernels: a device is always present (the emulation), and the
// error bound and comparison helpers are the real header's
// (test_tolerances.h). The backend
// fixtures of the real header are left out: the emulation has no
// CudaBackend. Header-only; for tests.
#ifndef TRAINYARD_ENGINE_CUDA_CUDA_TEST_SUPPORT_H_
#define TRAINYARD_ENGINE_CUDA_CUDA_TEST_SUPPORT_H_

#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/cuda/test_tolerances.h"
#include "gtest/gtest.h"

namespace trainyard::engine::cuda_test {

inline constexpr const char* kNoDevice = "unreachable: the emulation is there";

inline bool DevicePresent() { return true; }

}  // namespace trainyard::engine::cuda_test

#endif  // TRAINYARD_ENGINE_CUDA_CUDA_TEST_SUPPORT_H_
