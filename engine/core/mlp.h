// MlpModel: a multi-layer perceptron classifier,
//   input -> [linear -> ReLU] x hidden layers -> linear -> softmax CE,
// with explicit forward and backward passes over Backend ops. Parameters,
// gradients and activations live in a few backend buffers allocated once at
// creation for a maximum batch size.
//
// Thread-safety: not thread-safe; one training loop drives it.
#ifndef TRAINYARD_ENGINE_CORE_MLP_H_
#define TRAINYARD_ENGINE_CORE_MLP_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/backend.h"
#include "engine/core/model.h"

namespace trainyard::engine {

struct MlpConfig {
  int64_t input_dim = 784;
  std::vector<int64_t> hidden = {256, 128};
  int64_t num_classes = 10;
};

class MlpModel : public Model {
 public:
  // INVALID_ARGUMENT for non-positive sizes; RESOURCE_EXHAUSTED when the
  // backend cannot hold the buffers. `backend` must outlive the model.
  static absl::StatusOr<std::unique_ptr<MlpModel>> Create(
      const MlpConfig& config, int64_t max_batch, Backend* backend);

  absl::string_view kind() const override { return "mlp"; }
  const std::vector<Parameter>& parameters() const override { return params_; }
  int64_t max_batch() const override { return max_batch_; }
  absl::Status InitializeParameters(Rng& rng) override;
  absl::StatusOr<ForwardStats> Forward(const Batch& batch) override;
  void Backward(float loss_scale) override;
  void ZeroGradients() override;

  // Logits of the last Forward, [batch, classes], on the host as floats.
  std::vector<float> LastLogits() const;

 private:
  MlpModel(const MlpConfig& config, int64_t max_batch, Backend* backend);
  absl::Status AllocateBuffers();
  int num_layers() const { return static_cast<int>(widths_.size()) - 1; }
  // Device pointer to the input of layer l ([batch, widths_[l]]).
  // Activation dtype.
  const void* LayerInput(int l) const;
  absl::Status CheckBatch(const Batch& batch) const;

  const MlpConfig config_;
  const int64_t max_batch_;
  Backend* const backend_;
  std::vector<int64_t> widths_;  // input, hidden..., classes

  std::unique_ptr<DeviceBuffer> param_buf_, grad_buf_;
  // bf16 only: the working copy of the weights (see Parameter::working).
  std::unique_ptr<DeviceBuffer> working_buf_;
  bool working_current_ = false;
  // Inputs and layer outputs and their gradients are in the activation
  // dtype; probabilities and losses fp32.
  std::unique_ptr<DeviceBuffer> input_buf_, target_buf_;
  std::vector<std::unique_ptr<DeviceBuffer>> acts_;   // per layer output
  std::vector<std::unique_ptr<DeviceBuffer>> dacts_;  // their gradients
  std::unique_ptr<DeviceBuffer> loss_buf_, hit_buf_;
  std::vector<Parameter> params_;  // weight, bias per layer
  int64_t last_batch_ = 0;
};

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_MLP_H_
