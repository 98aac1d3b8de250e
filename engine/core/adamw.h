// AdamW over a model's parameters with fp32 moments, global-norm gradient
// clipping, and decoupled weight decay that skips biases unless configured.
// The moments live in backend buffers (one pair per parameter) and are named
// "adamw.m.<param>" / "adamw.v.<param>" in checkpoints.
//
// Thread-safety: not thread-safe; one training loop drives it.
#ifndef TRAINYARD_ENGINE_CORE_ADAMW_H_
#define TRAINYARD_ENGINE_CORE_ADAMW_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/backend.h"
#include "engine/core/model.h"

namespace trainyard::engine {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decay_biases = false;
  // Global gradient norm cap; 0 turns clipping off.
  double grad_clip = 1.0;
};

// The factor clipping applies to gradients whose global norm is `norm`:
// max_norm / (norm + 1e-6) when that is below 1, else 1 (as PyTorch's
// clip_grad_norm_). 1 when max_norm <= 0.
double ClipScale(double norm, double max_norm);

struct OptimizerStepStats {
  double grad_norm = 0;  // before clipping
  double clip_scale = 1;
};

class AdamW {
 public:
  // `params` (and the memory they point to) and `backend` must outlive it.
  static absl::StatusOr<std::unique_ptr<AdamW>> Create(
      const AdamWConfig& config, const std::vector<Parameter>* params,
      Backend* backend);

  // Clips and applies one update at learning rate `lr`. FAILED_PRECONDITION
  // when the gradient norm is not finite (the parameters are left as they
  // were, so the last checkpoint stays good).
  absl::StatusOr<OptimizerStepStats> Step(double lr);

  // Completed updates (t in the bias corrections).
  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t t) { step_count_ = t; }

  // Moment tensors for checkpoints, in parameter order (m then v each).
  struct MomentRef {
    std::string name;
    Shape shape;
    float* data;
  };
  std::vector<MomentRef> moments() const;

  // Global L2 norm of all gradients, deterministic for a given model.
  double GradientNorm() const;

 private:
  AdamW(const AdamWConfig& config, const std::vector<Parameter>* params,
        Backend* backend)
      : config_(config), params_(params), backend_(backend) {}

  const AdamWConfig config_;
  const std::vector<Parameter>* const params_;
  Backend* const backend_;
  std::vector<std::unique_ptr<DeviceBuffer>> m_, v_;
  int64_t step_count_ = 0;
};

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_ADAMW_H_
