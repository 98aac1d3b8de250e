// Model: a network with explicit forward and backward passes written against
// Backend ops: the MLP classifier and the GPT decoder.
// Parameters are listed in a fixed order with their gradients, so the
// optimizer and checkpoints treat every model alike.
//
// Thread-safety: a Model is driven by one training loop; not thread-safe.
#ifndef TRAINYARD_ENGINE_CORE_MODEL_H_
#define TRAINYARD_ENGINE_CORE_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/batch.h"
#include "engine/core/rng.h"
#include "engine/core/tensor.h"

namespace trainyard::engine {

// A trainable tensor and its gradient, both in device memory.
struct Parameter {
  std::string name;  // e.g. "fc0.weight"; also the checkpoint tensor name
  Shape shape;
  float* value = nullptr;  // fp32 master
  float* grad = nullptr;   // fp32
  // Biases, norm gains and embeddings skip weight decay unless configured
  // (AdamWConfig::decay_biases).
  bool is_bias = false;
  // What the ops read, in the backend's activation dtype: `value` itself
  // in fp32; in bf16 a rounded copy, which AdamW rewrites with each update
  // and the model refreshes from `value` at its first Forward (so weights
  // written before then, by init, import or resume, reach it).
  void* working = nullptr;
  int64_t size() const { return NumElements(shape); }
};

// Sums over one forward pass. The loss is a sum of `examples` terms: one per
// example for classifiers, one per predicted token for language models.
struct ForwardStats {
  double loss_sum = 0;
  int64_t correct = 0;  // argmax == target
  int64_t examples = 0;
  int64_t tokens = 0;  // language models: tokens processed
};

class Model {
 public:
  virtual ~Model() = default;

  virtual absl::string_view kind() const = 0;
  virtual const std::vector<Parameter>& parameters() const = 0;
  // Largest batch Forward accepts (activations are allocated for it).
  virtual int64_t max_batch() const = 0;

  // Draws fresh initial weights from `rng`.
  virtual absl::Status InitializeParameters(Rng& rng) = 0;
  // Runs the forward pass and the loss; keeps what Backward needs.
  // INVALID_ARGUMENT when the batch does not fit the model.
  virtual absl::StatusOr<ForwardStats> Forward(const Batch& batch) = 0;
  // Adds d(loss_scale * sum of the last Forward's losses)/d(param) to each
  // gradient. REQUIRES: Forward just ran.
  virtual void Backward(float loss_scale) = 0;
  // One training micro-batch: Forward, then Backward(LossScale(examples,
  // parts)), the mean over the loss terms of `parts` such micro-batches
  // (gradient accumulation steps x ranks). A model may fuse the two where
  // the loss's inputs are at hand (the GPT takes the logits' gradient in
  // the loss's pass); the gradients are the two calls' either way.
  virtual absl::StatusOr<ForwardStats> ForwardBackward(const Batch& batch,
                                                       int64_t parts) {
    absl::StatusOr<ForwardStats> stats = Forward(batch);
    if (stats.ok()) Backward(LossScale(stats->examples, parts));
    return stats;
  }
  static float LossScale(int64_t examples, int64_t parts) {
    return 1.0f / static_cast<float>(examples * parts);
  }
  virtual void ZeroGradients() = 0;

  int64_t num_parameters() const {
    int64_t n = 0;
    for (const Parameter& p : parameters()) n += p.size();
    return n;
  }

  // Backward calls `fn(begin, end)` once the gradients of parameters
  // [begin, end) are final for this pass (their last op is queued on the
  // backend), so data-parallel training can start summing them across
  // ranks while backward goes on. Models call it from the last parameter
  // towards the first, as backward reaches them. Calling it is an
  // optimisation: every gradient counts as final once Backward returns.
  // Null (the default): no calls.
  void set_gradients_final_callback(std::function<void(size_t, size_t)> fn) {
    gradients_final_ = std::move(fn);
  }

 protected:
  void GradientsFinal(size_t begin, size_t end) const {
    if (gradients_final_) gradients_final_(begin, end);
  }

 private:
  std::function<void(size_t, size_t)> gradients_final_;
};

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_MODEL_H_
