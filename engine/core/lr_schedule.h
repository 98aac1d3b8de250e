// The learning-rate schedule: linear warmup, then cosine decay to a floor.
// A pure function of the step, so a resumed run follows the same curve.
#ifndef TRAINYARD_ENGINE_CORE_LR_SCHEDULE_H_
#define TRAINYARD_ENGINE_CORE_LR_SCHEDULE_H_

#include <cstdint>

namespace trainyard::engine {

struct LrSchedule {
  double base_lr = 1e-3;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  // The cosine ends at base_lr * min_lr_ratio; 1 keeps the rate constant.
  double min_lr_ratio = 0.1;

  // Rate for optimizer step `step` (0-based): base_lr * (step + 1) / warmup
  // during warmup, then base_lr * (r + (1 - r) * (1 + cos(pi * p)) / 2) with
  // p the fraction of the post-warmup steps already taken.
  double At(int64_t step) const;
};

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_LR_SCHEDULE_H_
