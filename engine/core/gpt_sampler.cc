// Sampling from a GPT. See gpt_sampler.h.
#include "engine/core/gpt_sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace trainyard::engine {

int32_t SampleFromLogits(const std::vector<float>& logits, double temperature,
                         int64_t top_k, Rng& rng) {
  const int64_t n = static_cast<int64_t>(logits.size());
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (temperature <= 0) return order[0];
  const int64_t keep = top_k > 0 ? std::min(top_k, n) : n;
  std::vector<double> p(keep);
  double sum = 0;
  for (int64_t i = 0; i < keep; ++i) {
    p[i] = std::exp((logits[order[i]] - logits[order[0]]) / temperature);
    sum += p[i];
  }
  const double u = static_cast<double>(rng.NextU64() >> 11) * 0x1.0p-53 * sum;
  double acc = 0;
  for (int64_t i = 0; i < keep; ++i) {
    acc += p[i];
    if (u < acc) return order[i];
  }
  return order[keep - 1];
}

absl::StatusOr<std::vector<int32_t>> SampleTokens(
    GptModel& model, std::vector<int32_t> context,
    const SampleOptions& options) {
  const GptConfig& c = model.config();
  if (context.empty()) {
    return absl::InvalidArgumentError("sample: the context is empty");
  }
  if (options.tokens < 0 || options.top_k < 0 || !(options.temperature >= 0)) {
    return absl::InvalidArgumentError(
        "sample: tokens, top_k and temperature must be >= 0");
  }
  if (options.vocab_limit < 0 || options.vocab_limit > c.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample: vocab_limit ", options.vocab_limit,
                     " outside [0, ", c.vocab_size, "]"));
  }
  const int64_t drawable =
      options.vocab_limit > 0 ? options.vocab_limit : c.vocab_size;
  for (int32_t t : context) {
    if (t < 0 || t >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sample: context token ", t, " outside [0, ", c.vocab_size, ")"));
    }
  }
  Rng rng(options.seed);
  std::vector<int32_t> out;
  Batch batch;
  batch.size = 1;
  for (int64_t i = 0; i < options.tokens; ++i) {
    const int64_t window =
        std::min<int64_t>(c.seq_len, static_cast<int64_t>(context.size()));
    batch.seq_len = window;
    batch.tokens.assign(context.end() - window, context.end());
    batch.targets = batch.tokens;  // unused; the loss is ignored
    RETURN_IF_ERROR(model.Forward(batch).status());
    std::vector<float> logits = model.Logits(0, window - 1);
    logits.resize(drawable);
    for (size_t t = 0; t < logits.size(); ++t) {
      if (!std::isfinite(logits[t])) {
        return absl::DataLossError(absl::StrCat(
            "sample: the model's logit for token ", t, " is ", logits[t],
            " at generated token ", i,
            ": its weights are broken (did its training diverge?)"));
      }
    }
    const int32_t next =
        SampleFromLogits(logits, options.temperature, options.top_k, rng);
    context.push_back(next);
    out.push_back(next);
  }
  return out;
}

}  // namespace trainyard::engine
