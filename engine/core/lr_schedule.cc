// Warmup + cosine. See lr_schedule.h.
#include "engine/core/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace trainyard::engine {

double LrSchedule::At(int64_t step) const {
  if (step < warmup_steps) {
    return base_lr * static_cast<double>(step + 1) /
           static_cast<double>(warmup_steps);
  }
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup_steps);
  const double progress = std::clamp(
      static_cast<double>(step - warmup_steps) / decay_steps, 0.0, 1.0);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return base_lr * (min_lr_ratio + (1.0 - min_lr_ratio) * cosine);
}

}  // namespace trainyard::engine
