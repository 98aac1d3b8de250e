// Rng: the engine's random number generator, xoshiro256** seeded through
// SplitMix64. We use our own generator and our own distributions (not
// <random>'s, whose outputs differ between standard libraries) so a seed
// means the same numbers everywhere and the state can be checkpointed and
// restored exactly. Not thread-safe; each user owns its Rng.
#ifndef TRAINYARD_ENGINE_CORE_RNG_H_
#define TRAINYARD_ENGINE_CORE_RNG_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainyard::engine {

class Rng {
 public:
  // `stream` selects an independent sequence for the same seed (e.g. one per
  // epoch for data shuffling).
  explicit Rng(uint64_t seed, uint64_t stream = 0);

  uint64_t NextU64();
  // Uniform in [0, 1) with 24 bits of precision.
  float NextFloat();
  // Uniform in [lo, hi).
  float Uniform(float lo, float hi);
  // Normal with the given mean and standard deviation (Box-Muller in
  // double; two draws per call, no cached spare, so the state stays the
  // four words).
  float Normal(float mean, float stddev);
  // Uniform integer in [0, n). REQUIRES: n > 0. Unbiased (rejection).
  uint64_t Below(uint64_t n);

  // The state as 64 hex digits, and back.
  std::string SerializeState() const;
  static absl::StatusOr<Rng> FromState(absl::string_view hex);

  bool operator==(const Rng& other) const { return s_ == other.s_; }

 private:
  Rng() = default;
  std::array<uint64_t, 4> s_{};
};

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_RNG_H_
