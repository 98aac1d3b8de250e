// The documented defaults of spec.proto, and the parameter count used to
// bound model sizes. Pure functions; thread-safe.
#include <cstdint>
#include <limits>

#include "spec/limits.h"
#include "spec/spec.h"

namespace trainyard::spec {
namespace {

using ::trainyard::v1::JobSpec;

constexpr int32_t kMnistInputs = 784;
constexpr int32_t kMnistClasses = 10;

// Saturating arithmetic: CountParameters also sees unvalidated specs, and a
// huge count must read as "too big", never wrap around to a small one.
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

int64_t SatMul(int64_t a, int64_t b) {
  if (a <= 0 || b <= 0) return 0;
  if (a > kMax / b) return kMax;
  return a * b;
}

int64_t SatAdd(int64_t a, int64_t b) {
  if (a > kMax - b) return kMax;
  return a + b;
}

int64_t CountMlp(const JobSpec& spec) {
  const auto& mlp = spec.model().mlp();
  int64_t in = mlp.input_dim() > 0 ? mlp.input_dim() : kMnistInputs;
  int64_t classes = mlp.num_classes() > 0 ? mlp.num_classes() : kMnistClasses;
  int64_t total = 0;
  for (int32_t width : mlp.hidden()) {
    int64_t out = width > 0 ? width : 0;
    total = SatAdd(total, SatAdd(SatMul(in, out), out));
    in = out;
  }
  return SatAdd(total, SatAdd(SatMul(in, classes), classes));
}

// GPT-2 with tied input/output embeddings: token and position embeddings,
// per block two layer norms (2d each), attention (4d^2 + 4d) and the MLP
// (8d^2 + 5d), then the final layer norm.
int64_t CountGpt(const JobSpec& spec) {
  const auto& gpt = spec.model().gpt();
  int64_t d = gpt.d_model() > 0 ? gpt.d_model() : 0;
  int64_t per_layer = SatAdd(SatMul(12, SatMul(d, d)), SatMul(13, d));
  int64_t total = SatMul(gpt.vocab_size() > 0 ? gpt.vocab_size() : 0, d);
  total = SatAdd(total, SatMul(gpt.seq_len() > 0 ? gpt.seq_len() : 0, d));
  total =
      SatAdd(total, SatMul(gpt.n_layer() > 0 ? gpt.n_layer() : 0, per_layer));
  return SatAdd(total, SatMul(2, d));
}

}  // namespace

JobSpec WithDefaults(const JobSpec& in) {
  JobSpec spec = in;
  auto* opt = spec.mutable_optimizer();
  if (!opt->has_lr()) opt->set_lr(1e-3);
  if (!opt->has_beta1()) opt->set_beta1(0.9);
  if (!opt->has_beta2()) opt->set_beta2(0.999);
  if (!opt->has_eps()) opt->set_eps(1e-8);
  if (!opt->has_weight_decay()) opt->set_weight_decay(0.0);
  if (!opt->has_grad_clip()) opt->set_grad_clip(1.0);
  if (!opt->has_min_lr_ratio()) opt->set_min_lr_ratio(0.1);
  auto* batch = spec.mutable_batch();
  if (!batch->has_grad_accum()) batch->set_grad_accum(1);
  auto* ckpt = spec.mutable_checkpoint();
  if (!ckpt->has_keep_last()) ckpt->set_keep_last(3);
  auto* res = spec.mutable_resources();
  if (!res->has_cpu_threads()) res->set_cpu_threads(1);
  if (spec.log_every_steps() == 0) spec.set_log_every_steps(10);
  if (spec.precision() == trainyard::v1::PRECISION_UNSPECIFIED) {
    spec.set_precision(trainyard::v1::FP32);
  }
  if (spec.model().has_mlp() && spec.data().has_mnist()) {
    auto* mlp = spec.mutable_model()->mutable_mlp();
    if (mlp->input_dim() == 0) mlp->set_input_dim(kMnistInputs);
    if (mlp->num_classes() == 0) mlp->set_num_classes(kMnistClasses);
  }
  if (spec.data().has_text() &&
      spec.data().text().tokenizer() == trainyard::v1::TOKENIZER_UNSPECIFIED) {
    spec.mutable_data()->mutable_text()->set_tokenizer(trainyard::v1::BYTE);
  }
  if (spec.has_halving() && spec.halving().factor() == 0) {
    spec.mutable_halving()->set_factor(kDefaultHalvingFactor);
  }
  return spec;
}

int64_t CountParameters(const JobSpec& spec) {
  if (spec.model().has_mlp()) return CountMlp(spec);
  if (spec.model().has_gpt()) return CountGpt(spec);
  return 0;
}

}  // namespace trainyard::spec
