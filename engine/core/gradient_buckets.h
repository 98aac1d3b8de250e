// Gradient buckets: how a data-parallel step sums its gradients while
// backward is still running. The gradients are cut into buckets of about
// bucket_floats floats, taken from the last parameter to the first, the
// order in which backward finishes them (the output layers first, the
// embeddings last). During the last backward of a step the model says which
// parameters are final (Model::set_gradients_final_callback); a bucket's
// all-reduce starts as soon as every gradient it touches is final, so the
// sums of the late layers travel while the early layers are computed.
//
// Buckets start in a fixed order (the plan's), the same on every rank
// whatever the timing: each is started only after the one before it. A
// bucket may hold pieces of several parameters or a piece of one; pieces
// adjacent in memory are merged, so gradients kept in one buffer (as every
// model here keeps them) make one span per bucket.
//
// Thread-safety: not thread-safe; the training loop drives it (the model's
// callback runs on that loop's thread).
#ifndef TRAINYARD_ENGINE_CORE_GRADIENT_BUCKETS_H_
#define TRAINYARD_ENGINE_CORE_GRADIENT_BUCKETS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "engine/core/collective.h"
#include "engine/core/model.h"

namespace trainyard::engine {

struct GradientBucket {
  std::vector<FloatSpan> spans;
  // The parameters it holds pieces of: indices [first_param, last_param].
  size_t first_param = 0;
  size_t last_param = 0;
  int64_t floats = 0;
};

// The buckets of `params`' gradients, in the order they are to start.
// bucket_floats <= 0: one bucket of everything (no overlap).
std::vector<GradientBucket> PlanGradientBuckets(
    const std::vector<Parameter>& params, int64_t bucket_floats);

class OverlappedGradientSum {
 public:
  // `collective` must outlive this.
  OverlappedGradientSum(std::vector<GradientBucket> buckets, size_t num_params,
                        Collective* collective);

  // A new backward begins: no gradient is final.
  void Begin();
  // Parameters [begin, end) are final; starts every bucket that now is
  // complete and whose predecessors have started.
  void MarkFinal(size_t begin, size_t end);
  // Marks every gradient final, starts the buckets left and then `extra`
  // (the step's small figures), and waits for all of them.
  absl::Status Finish(std::vector<FloatSpan> extra);

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  // Buckets started so far in this backward (before Finish: the overlap).
  size_t started() const { return next_; }

 private:
  void StartReady();

  const std::vector<GradientBucket> buckets_;
  Collective* const collective_;
  std::vector<bool> final_;
  size_t next_ = 0;  // the next bucket to start
};

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_GRADIENT_BUCKETS_H_
