// xoshiro256** (Blackman & Vigna) with SplitMix64 seeding. See rng.h.
#include "engine/core/rng.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace trainyard::engine {
namespace {

uint64_t SplitMix64(uint64_t* x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Rng::Rng(uint64_t seed, uint64_t stream) {
  uint64_t x = seed ^ (stream * 0xD1B54A32D192ED03ull);
  // Mix the stream in twice so nearby (seed, stream) pairs diverge at once.
  x = SplitMix64(&x) + stream;
  for (uint64_t& word : s_) word = SplitMix64(&x);
}

uint64_t Rng::NextU64() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

float Rng::NextFloat() {
  return static_cast<float>(NextU64() >> 40) * (1.0f / 16777216.0f);
}

float Rng::Uniform(float lo, float hi) { return lo + (hi - lo) * NextFloat(); }

float Rng::Normal(float mean, float stddev) {
  // u1 in (0, 1] so the log is finite.
  const double u1 = (static_cast<double>(NextU64() >> 11) + 1.0) * 0x1.0p-53;
  const double u2 = static_cast<double>(NextU64() >> 11) * 0x1.0p-53;
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  return static_cast<float>(mean + stddev * z);
}

uint64_t Rng::Below(uint64_t n) {
  // Reject the top partial range so every residue is equally likely.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do {
    x = NextU64();
  } while (x >= limit);
  return x % n;
}

std::string Rng::SerializeState() const {
  return absl::StrFormat("%016x%016x%016x%016x", s_[0], s_[1], s_[2], s_[3]);
}

absl::StatusOr<Rng> Rng::FromState(absl::string_view hex) {
  if (hex.size() != 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("rng state: expected 64 hex digits, got ", hex.size()));
  }
  Rng rng;
  for (int w = 0; w < 4; ++w) {
    uint64_t v = 0;
    for (int i = 0; i < 16; ++i) {
      char c = hex[w * 16 + i];
      int d;
      if (c >= '0' && c <= '9')
        d = c - '0';
      else if (c >= 'a' && c <= 'f')
        d = c - 'a' + 10;
      else
        return absl::InvalidArgumentError("rng state: not hex");
      v = (v << 4) | static_cast<uint64_t>(d);
    }
    rng.s_[w] = v;
  }
  if (rng.s_ == std::array<uint64_t, 4>{}) {
    return absl::InvalidArgumentError("rng state: all zero");
  }
  return rng;
}

}  // namespace trainyard::engine
