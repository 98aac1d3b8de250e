// Seeded random inputs for the CPU backend's tests: the same seed gives the
// same values on every machine (our own Rng, not std:: distributions).
// Header-only; pure functions.
#ifndef TRAINYARD_ENGINE_CPU_TEST_INPUTS_H_
#define TRAINYARD_ENGINE_CPU_TEST_INPUTS_H_

#include <cstdint>
#include <vector>

#include "engine/core/rng.h"

namespace trainyard::engine {

// n values drawn uniformly from [lo, hi).
inline std::vector<float> Random(int64_t n, uint64_t seed, float lo = -1,
                                 float hi = 1) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = rng.Uniform(lo, hi);
  return v;
}

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CPU_TEST_INPUTS_H_
