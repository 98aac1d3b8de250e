// Error bounds and comparisons shared by the CUDA kernel tests, on a GPU
// (cuda_test_support.h) and in the host emulation (emulation/): the Higham
// bound on an fp32 sum and element-wise checks against tolerances. Plain
// host code, no CUDA; header-only, for tests.
#ifndef TRAINYARD_ENGINE_CUDA_TEST_TOLERANCES_H_
#define TRAINYARD_ENGINE_CUDA_TEST_TOLERANCES_H_

#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace trainyard::engine::cuda_test {

// gamma_n = n u / (1 - n u), u = 2^-24: a sum of n fp32 terms, in any order
// and with or without fused multiply-adds, is within gamma_n * (sum of the
// terms' magnitudes) of the exact sum (Higham, Accuracy and Stability of
// Numerical Algorithms, 3.1). Two such sums differ by at most twice that.
inline double Gamma(int64_t n) {
  const double u = 0x1p-24;
  return n * u / (1 - n * u);
}

// Each got[i] within tol[i] of want[i] (float or double); reports the first
// few misses.
template <typename Want>
void ExpectWithin(const std::vector<float>& got, const std::vector<Want>& want,
                  const std::vector<double>& tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int misses = 0;
  for (size_t i = 0; i < got.size() && misses < 5; ++i) {
    const double diff =
        std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
    if (!(diff <= tol[i])) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want "
                    << want[i] << " (tolerance " << tol[i] << ")";
      ++misses;
    }
  }
}

// Each got[i] within abs + rel * |want[i]|.
inline void ExpectNear(const std::vector<float>& got,
                       const std::vector<float>& want, double rel, double abs,
                       const char* what) {
  std::vector<double> tol(want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    tol[i] = abs + rel * std::abs(want[i]);
  }
  ExpectWithin(got, want, tol, what);
}

}  // namespace trainyard::engine::cuda_test

#endif  // TRAINYARD_ENGINE_CUDA_TEST_TOLERANCES_H_
