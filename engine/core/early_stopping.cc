#include "engine/core/early_stopping.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace trainyard::engine {

EarlyStopping::Verdict EarlyStopping::Observe(int64_t step, double loss) {
  if (!enabled()) return {};
  const bool finite = std::isfinite(loss);
  if (state_.best_step < 0) {  // nothing to compare with yet
    if (!finite) return {};
    state_ = {loss, step, 0};
    return {.improved = true, .stop = false};
  }
  if (finite && loss < state_.best_loss - min_delta_) {
    state_ = {loss, step, 0};
    return {.improved = true, .stop = false};
  }
  ++state_.evals_since_best;
  return {.improved = false, .stop = should_stop()};
}

std::string EarlyStopping::Reason() const {
  return absl::StrFormat(
      "eval loss did not improve on %.4f (step %d) for %d evaluation%s",
      state_.best_loss, state_.best_step, state_.evals_since_best,
      state_.evals_since_best == 1 ? "" : "s");
}

absl::Status EarlyStopping::Restore(const EarlyStoppingState& state) {
  if (state.evals_since_best < 0 ||
      (state.best_step < 0 && state.evals_since_best != 0) ||
      (state.best_step >= 0 && !std::isfinite(state.best_loss))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "early stopping state: best_step ", state.best_step,
        ", evals_since_best ", state.evals_since_best, ", best_loss ",
        state.best_loss, " cannot come from a run"));
  }
  state_ = state;
  return absl::OkStatus();
}

}  // namespace trainyard::engine
