// Text generation from a GptModel: extend a context one token at a time,
// each drawn from the model's next-token distribution with a temperature
// and an optional top-k cut, from a seeded Rng (same seed, same text).
// The model sees at most its last seq_len tokens. Not thread-safe (drives
// the model).
#ifndef TRAINYARD_ENGINE_CORE_GPT_SAMPLER_H_
#define TRAINYARD_ENGINE_CORE_GPT_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/gpt.h"

namespace trainyard::engine {

struct SampleOptions {
  int64_t tokens = 200;      // how many to generate
  double temperature = 1.0;  // 0: always the most likely token
  int64_t top_k = 0;         // 0: no cut
  uint64_t seed = 0;
  // Draw only tokens below this; 0: the whole vocabulary. A text model's
  // tokenizer may know fewer tokens than its vocab_size (e.g. 65
  // characters in a vocabulary of 128), and the ones past it are no text.
  int64_t vocab_limit = 0;
};

// Returns only the generated tokens. INVALID_ARGUMENT for an empty context,
// tokens outside the vocabulary, a negative count, top_k or temperature, a
// vocab_limit outside [0, vocab_size];
// DATA_LOSS when the model's logits are not finite (its weights are broken,
// e.g. by training that diverged) rather than text drawn from them.
absl::StatusOr<std::vector<int32_t>> SampleTokens(GptModel& model,
                                                  std::vector<int32_t> context,
                                                  const SampleOptions& options);

// Index drawn from `logits` / temperature restricted to the top_k largest
// (ties to the lower index); argmax when temperature is 0. The logits must
// be finite. Exposed for tests.
int32_t SampleFromLogits(const std::vector<float>& logits, double temperature,
                         int64_t top_k, Rng& rng);

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_GPT_SAMPLER_H_
