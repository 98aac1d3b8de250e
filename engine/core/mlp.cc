// MLP forward/backward over Backend ops. See mlp.h.
#include "engine/core/mlp.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/core/bf16.h"

namespace trainyard::engine {

MlpModel::MlpModel(const MlpConfig& config, int64_t max_batch, Backend* backend)
    : config_(config), max_batch_(max_batch), backend_(backend) {
  widths_.push_back(config.input_dim);
  for (int64_t h : config.hidden) widths_.push_back(h);
  widths_.push_back(config.num_classes);
}

absl::StatusOr<std::unique_ptr<MlpModel>> MlpModel::Create(
    const MlpConfig& config, int64_t max_batch, Backend* backend) {
  if (config.input_dim <= 0 || config.num_classes <= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("mlp: input_dim must be >= 1 and num_classes >= 2, got ",
                     config.input_dim, " and ", config.num_classes));
  }
  for (int64_t h : config.hidden) {
    if (h <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("mlp: hidden sizes must be >= 1, got ", h));
    }
  }
  if (max_batch <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("mlp: max batch must be >= 1, got ", max_batch));
  }
  std::unique_ptr<MlpModel> model(new MlpModel(config, max_batch, backend));
  RETURN_IF_ERROR(model->AllocateBuffers());
  return model;
}

absl::Status MlpModel::AllocateBuffers() {
  int64_t total = 0;
  for (int l = 0; l < num_layers(); ++l) {
    total += widths_[l] * widths_[l + 1] + widths_[l + 1];
  }
  ASSIGN_OR_RETURN(param_buf_, backend_->Allocate(total * 4));
  ASSIGN_OR_RETURN(grad_buf_, backend_->Allocate(total * 4));
  const int64_t ab = DTypeBytes(backend_->activation_dtype());
  if (ab != 4) {
    ASSIGN_OR_RETURN(working_buf_, backend_->Allocate(total * ab));
  }
  int64_t offset = 0;
  for (int l = 0; l < num_layers(); ++l) {
    const int64_t in = widths_[l], out = widths_[l + 1];
    const std::string prefix = absl::StrCat("fc", l);
    params_.push_back({prefix + ".weight",
                       {out, in},
                       param_buf_->f32() + offset,
                       grad_buf_->f32() + offset,
                       /*is_bias=*/false});
    offset += out * in;
    params_.push_back({prefix + ".bias",
                       {out},
                       param_buf_->f32() + offset,
                       grad_buf_->f32() + offset,
                       /*is_bias=*/true});
    offset += out;
  }
  for (Parameter& p : params_) {
    p.working = working_buf_ == nullptr
                    ? static_cast<void*>(p.value)
                    : static_cast<char*>(working_buf_->data()) +
                          (p.value - param_buf_->f32()) * ab;
  }
  ASSIGN_OR_RETURN(input_buf_,
                   backend_->Allocate(max_batch_ * widths_[0] * ab));
  ASSIGN_OR_RETURN(target_buf_, backend_->Allocate(max_batch_ * 4));
  for (int l = 0; l < num_layers(); ++l) {
    const int64_t bytes = max_batch_ * widths_[l + 1] * ab;
    ASSIGN_OR_RETURN(acts_.emplace_back(), backend_->Allocate(bytes));
    ASSIGN_OR_RETURN(dacts_.emplace_back(), backend_->Allocate(bytes));
  }
  ASSIGN_OR_RETURN(loss_buf_, backend_->Allocate(max_batch_ * 4));
  ASSIGN_OR_RETURN(hit_buf_, backend_->Allocate(max_batch_ * 4));
  return absl::OkStatus();
}

absl::Status MlpModel::InitializeParameters(Rng& rng) {
  // PyTorch's nn.Linear default, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for
  // weights and biases, so reference runs start from the same distribution.
  for (int l = 0; l < num_layers(); ++l) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(widths_[l]));
    for (int k = 0; k < 2; ++k) {
      const Parameter& p = params_[2 * l + k];
      std::vector<float> host(p.size());
      for (float& x : host) x = rng.Uniform(-bound, bound);
      backend_->CopyToDevice(p.value, host.data(), p.size() * 4);
    }
  }
  working_current_ = false;
  return backend_->Synchronize();
}

absl::Status MlpModel::CheckBatch(const Batch& batch) const {
  if (batch.size <= 0 || batch.size > max_batch_) {
    return absl::InvalidArgumentError(absl::StrCat("mlp: batch of ", batch.size,
                                                   " examples; must be in [1, ",
                                                   max_batch_, "]"));
  }
  if (batch.feature_dim != widths_[0] ||
      static_cast<int64_t>(batch.features.size()) !=
          batch.size * batch.feature_dim ||
      static_cast<int64_t>(batch.targets.size()) != batch.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("mlp: batch has ", batch.feature_dim,
                     " features per example, model "
                     "expects ",
                     widths_[0]));
  }
  for (int32_t t : batch.targets) {
    if (t < 0 || t >= config_.num_classes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mlp: target ", t, " outside [0, ", config_.num_classes, ")"));
    }
  }
  return absl::OkStatus();
}

const void* MlpModel::LayerInput(int l) const {
  return l == 0 ? input_buf_->data() : acts_[l - 1]->data();
}

absl::StatusOr<ForwardStats> MlpModel::Forward(const Batch& batch) {
  RETURN_IF_ERROR(CheckBatch(batch));
  const int64_t b = batch.size;
  last_batch_ = b;
  if (!working_current_ && working_buf_ != nullptr) {
    backend_->CastToActivations(working_buf_->data(), param_buf_->f32(),
                                param_buf_->bytes() / 4);
  }
  working_current_ = true;
  if (working_buf_ == nullptr) {
    backend_->CopyToDevice(input_buf_->data(), batch.features.data(),
                           b * widths_[0] * 4);
  } else {
    std::vector<uint16_t> bf(b * widths_[0]);
    FloatsToBf16(batch.features.data(), b * widths_[0], bf.data());
    backend_->CopyToDevice(input_buf_->data(), bf.data(), bf.size() * 2);
  }
  backend_->CopyToDevice(target_buf_->data(), batch.targets.data(), b * 4);
  for (int l = 0; l < num_layers(); ++l) {
    void* out = acts_[l]->data();
    backend_->LinearForward(out, LayerInput(l), params_[2 * l].working,
                            params_[2 * l + 1].working, b, widths_[l],
                            widths_[l + 1]);
    if (l + 1 < num_layers())
      backend_->ReluForward(out, out, b * widths_[l + 1]);
  }
  const int64_t classes = config_.num_classes;
  backend_->SoftmaxCrossEntropyForward(loss_buf_->f32(), hit_buf_->i32(),
                                       /*lse=*/nullptr, acts_.back()->data(),
                                       target_buf_->i32(), b, classes);
  std::vector<float> losses(b);
  std::vector<int32_t> hits(b);
  backend_->CopyToHost(losses.data(), loss_buf_->data(), b * 4);
  backend_->CopyToHost(hits.data(), hit_buf_->data(), b * 4);
  RETURN_IF_ERROR(backend_->Synchronize());

  ForwardStats stats;
  stats.examples = b;
  for (int64_t i = 0; i < b; ++i) {
    stats.loss_sum += losses[i];
    stats.correct += hits[i];
  }
  return stats;
}

void MlpModel::Backward(float loss_scale) {
  const int64_t b = last_batch_;
  void* dout = dacts_.back()->data();
  backend_->SoftmaxCrossEntropyBackward(dout, acts_.back()->data(),
                                        /*lse=*/nullptr, target_buf_->i32(),
                                        loss_scale, b, config_.num_classes);
  for (int l = num_layers() - 1; l >= 0; --l) {
    void* dinp = l > 0 ? dacts_[l - 1]->data() : nullptr;
    backend_->LinearBackward(
        dinp, params_[2 * l].grad, params_[2 * l + 1].grad, dacts_[l]->data(),
        LayerInput(l), params_[2 * l].working, b, widths_[l], widths_[l + 1]);
    GradientsFinal(2 * l, 2 * l + 2);
    if (dinp != nullptr) {
      // The stored activation is the ReLU output; > 0 exactly where the
      // pre-activation was.
      backend_->ReluBackward(dinp, dinp, acts_[l - 1]->data(), b * widths_[l]);
    }
  }
}

void MlpModel::ZeroGradients() {
  backend_->Fill(grad_buf_->f32(), grad_buf_->bytes() / 4, 0.0f);
}

std::vector<float> MlpModel::LastLogits() const {
  return ActivationsToHost(*backend_, acts_.back()->data(),
                           last_batch_ * config_.num_classes);
}

}  // namespace trainyard::engine
