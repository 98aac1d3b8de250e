// Early stopping on the evaluation loss (spec eval.patience): training ends
// once `patience` evaluations in a row have not lowered the best eval loss
// by more than `min_delta`, as Keras' EarlyStopping and Hugging Face's
// EarlyStoppingCallback do. Its state goes into every checkpoint, so a
// resumed run stops at the same step as an uninterrupted one.
// Not thread-safe (the trainer's thread owns it).
#ifndef TRAINYARD_ENGINE_CORE_EARLY_STOPPING_H_
#define TRAINYARD_ENGINE_CORE_EARLY_STOPPING_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace trainyard::engine {

// What a checkpoint keeps of it. best_step < 0: no evaluation seen yet.
struct EarlyStoppingState {
  double best_loss = 0;
  int64_t best_step = -1;
  int64_t evals_since_best = 0;  // evaluations after best_step, none better
};

class EarlyStopping {
 public:
  // patience 0: never stops. `track_best`: follow the best evaluation even
  // so (checkpoint.keep_best).
  EarlyStopping(int64_t patience, double min_delta, bool track_best = false)
      : patience_(patience), min_delta_(min_delta), track_best_(track_best) {}

  // Whether it follows evaluations at all (patience or track_best).
  bool enabled() const { return patience_ > 0 || track_best_; }

  struct Verdict {
    bool improved = false;  // this evaluation is the new best
    bool stop = false;      // training should stop now
  };
  // Takes the evaluation at `step`. A loss that is not finite never counts
  // as an improvement.
  Verdict Observe(int64_t step, double loss);

  // True once Observe has said stop (also after a Restore of such a state).
  bool should_stop() const {
    return patience_ > 0 && state_.best_step >= 0 &&
           state_.evals_since_best >= patience_;
  }
  // Why it stopped, e.g. "eval loss did not improve on 0.2134 (step 300)
  // for 3 evaluations"; meaningful once should_stop().
  std::string Reason() const;

  const EarlyStoppingState& state() const { return state_; }
  // INVALID_ARGUMENT for a state no run could have written (a negative
  // count, a count without a best step).
  absl::Status Restore(const EarlyStoppingState& state);

 private:
  const int64_t patience_;
  const double min_delta_;
  const bool track_best_;
  EarlyStoppingState state_;
};

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_EARLY_STOPPING_H_
