// AdamW step and gradient clipping. See adamw.h.
#include "engine/core/adamw.h"

#include <cmath>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace trainyard::engine {

double ClipScale(double norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  const double scale = max_norm / (norm + 1e-6);
  return scale < 1.0 ? scale : 1.0;
}

absl::StatusOr<std::unique_ptr<AdamW>> AdamW::Create(
    const AdamWConfig& config, const std::vector<Parameter>* params,
    Backend* backend) {
  if (!(config.beta1 >= 0 && config.beta1 < 1 && config.beta2 >= 0 &&
        config.beta2 < 1 && config.eps > 0 && config.weight_decay >= 0 &&
        config.grad_clip >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "adamw: need 0 <= beta1, beta2 < 1, eps > 0, weight_decay >= 0 and "
        "grad_clip >= 0; got beta1=",
        config.beta1, " beta2=", config.beta2, " eps=", config.eps,
        " weight_decay=", config.weight_decay,
        " grad_clip=", config.grad_clip));
  }
  std::unique_ptr<AdamW> opt(new AdamW(config, params, backend));
  for (const Parameter& p : *params) {
    ASSIGN_OR_RETURN(opt->m_.emplace_back(), backend->Allocate(p.size() * 4));
    ASSIGN_OR_RETURN(opt->v_.emplace_back(), backend->Allocate(p.size() * 4));
  }
  return opt;
}

double AdamW::GradientNorm() const {
  std::vector<Backend::FloatTensor> grads;
  grads.reserve(params_->size());
  for (const Parameter& p : *params_) grads.push_back({p.grad, p.size()});
  double sum = 0;
  for (double s : backend_->SumSquaresEach(grads)) sum += s;
  return std::sqrt(sum);
}

absl::StatusOr<OptimizerStepStats> AdamW::Step(double lr) {
  OptimizerStepStats stats;
  stats.grad_norm = GradientNorm();
  RETURN_IF_ERROR(backend_->Synchronize());
  if (!std::isfinite(stats.grad_norm)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "training diverged: gradient norm is ", stats.grad_norm, " at step ",
        step_count_ + 1, " (try a lower learning rate)"));
  }
  stats.clip_scale = ClipScale(stats.grad_norm, config_.grad_clip);
  const int64_t t = step_count_ + 1;
  AdamWUpdate u;
  u.lr = static_cast<float>(lr);
  u.beta1 = static_cast<float>(config_.beta1);
  u.beta2 = static_cast<float>(config_.beta2);
  u.eps = static_cast<float>(config_.eps);
  u.grad_scale = static_cast<float>(stats.clip_scale);
  u.bias_correction1 =
      static_cast<float>(1.0 - std::pow(config_.beta1, static_cast<double>(t)));
  u.bias_correction2 =
      static_cast<float>(1.0 - std::pow(config_.beta2, static_cast<double>(t)));
  std::vector<Backend::AdamWTensor> tensors;
  tensors.reserve(params_->size());
  for (size_t i = 0; i < params_->size(); ++i) {
    const Parameter& p = (*params_)[i];
    const float weight_decay = (p.is_bias && !config_.decay_biases)
                                   ? 0.0f
                                   : static_cast<float>(config_.weight_decay);
    // Mixed precision: the same pass rewrites the working copy the ops read.
    void* working = p.working == p.value ? nullptr : p.working;
    tensors.push_back({p.value, p.grad, m_[i]->f32(), v_[i]->f32(), working,
                       p.size(), weight_decay});
  }
  backend_->AdamWEach(tensors, u);
  RETURN_IF_ERROR(backend_->Synchronize());
  step_count_ = t;
  return stats;
}

std::vector<AdamW::MomentRef> AdamW::moments() const {
  std::vector<MomentRef> out;
  for (size_t i = 0; i < params_->size(); ++i) {
    const Parameter& p = (*params_)[i];
    out.push_back({"adamw.m." + p.name, p.shape, m_[i]->f32()});
    out.push_back({"adamw.v." + p.name, p.shape, v_[i]->f32()});
  }
  return out;
}

}  // namespace trainyard::engine
