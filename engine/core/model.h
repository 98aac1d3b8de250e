// Model: a network with explicit forward and backward passes written against
// Backend ops. The MLP classifier implements it now; the GPT decoder will.
// Parameters are listed in a fixed order with their gradients, so the
// optimizer and checkpoints treat every model alike.
//
// Thread-safety: a Model is driven by one training loop; not thread-safe.
#ifndef TRAINYARD_ENGINE_CORE_MODEL_H_
#define TRAINYARD_ENGINE_CORE_MODEL_H_

#include <cstdint>
#include <string>
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
  float* value = nullptr;
  float* grad = nullptr;
  // Biases (and, later, norm gains) skip weight decay unless configured.
  bool is_bias = false;
  int64_t size() const { return NumElements(shape); }
};

// Sums over the examples of one forward pass.
struct ForwardStats {
  double loss_sum = 0;
  int64_t correct = 0;  // classifiers: argmax == target
  int64_t examples = 0;
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
  virtual void ZeroGradients() = 0;

  int64_t num_parameters() const {
    int64_t n = 0;
    for (const Parameter& p : parameters()) n += p.size();
    return n;
  }
};

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_MODEL_H_
