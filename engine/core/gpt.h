// GptModel: a GPT-2 architecture decoder (learned token and position
// embeddings, pre-LayerNorm blocks of causal multi-head attention and a GELU
// MLP, a final LayerNorm, and the output projection tied to the token
// embedding) trained with next-token cross-entropy. Forward and backward are
// written op by op against Backend, in the manner of llm.c's train_gpt2.c:
// every activation the backward needs is kept in buffers allocated once for
// the largest batch.
//
// Parameter names follow Hugging Face's GPT-2 without the "transformer."
// prefix ("wte", "h.0.attn.c_attn.weight", ...), but linear weights are
// stored [out, in] like every Backend linear layer (Hugging Face's Conv1D
// stores [in, out]; export transposes).
//
// Thread-safety: not thread-safe; one training loop drives it.
#ifndef TRAINYARD_ENGINE_CORE_GPT_H_
#define TRAINYARD_ENGINE_CORE_GPT_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/backend.h"
#include "engine/core/json.h"
#include "engine/core/model.h"

namespace trainyard::engine {

struct GptConfig {
  int64_t n_layer = 2;
  int64_t n_head = 2;
  int64_t d_model = 64;
  int64_t seq_len = 64;  // the longest context (rows of the position table)
  int64_t vocab_size = 256;
};

// Elements the model allocates per sequence of `seq` tokens on a backend
// whose attention keeps `attention` state: activations kept for the
// backward and the backward's scratch, each split into tensors stored in
// the backend's activation dtype and tensors always fp32 (LayerNorm
// statistics, attention state and scratch, probabilities, losses). The
// memory estimate and the model's allocation share them.
struct GptActivationSizes {
  int64_t per_sequence = 0;           // forward activations (activation dtype)
  int64_t grad_per_sequence = 0;      // backward scratch (activation dtype)
  int64_t f32_per_sequence = 0;       // forward statistics kept (fp32)
  int64_t f32_grad_per_sequence = 0;  // backward scratch (fp32)
  // Bytes per sequence when activations take `act_bytes` each.
  double Bytes(int64_t act_bytes) const {
    return static_cast<double>(act_bytes) *
               (static_cast<double>(per_sequence) +
                static_cast<double>(grad_per_sequence)) +
           4.0 * (static_cast<double>(f32_per_sequence) +
                  static_cast<double>(f32_grad_per_sequence));
  }
};
GptActivationSizes GptActivationFloats(const GptConfig& config, int64_t seq,
                                       AttentionState attention);

// INVALID_ARGUMENT unless every size is positive and within the limits
// specs have (n_layer <= 256, n_head <= 1024, d_model and seq_len <= 65536,
// vocab_size <= 2^20, at most 2e9 parameters) and d_model is a multiple of
// n_head. Configs read from files (checkpoints, imports) pass through it
// before anything is allocated.
absl::Status ValidateGptConfig(const GptConfig& config);

// Parameter count of `config` (embeddings tied).
int64_t GptParameterCount(const GptConfig& config);

// {"kind": "gpt", "n_layer": .., "n_head": .., "d_model": .., "seq_len": ..,
// "vocab_size": ..}: how checkpoints describe the model, and back
// (INVALID_ARGUMENT naming the missing or bad field).
Json GptDescription(const GptConfig& config);
absl::StatusOr<GptConfig> GptConfigFromDescription(const Json& description);

class GptModel : public Model {
 public:
  // INVALID_ARGUMENT for non-positive sizes or d_model not a multiple of
  // n_head; RESOURCE_EXHAUSTED when the backend cannot hold the buffers.
  // `backend` must outlive the model.
  static absl::StatusOr<std::unique_ptr<GptModel>> Create(
      const GptConfig& config, int64_t max_batch, Backend* backend);

  absl::string_view kind() const override { return "gpt"; }
  const std::vector<Parameter>& parameters() const override { return params_; }
  int64_t max_batch() const override { return max_batch_; }
  // GPT-2's initialization: N(0, 0.02) for embeddings and linear weights,
  // with the two residual projections of each block scaled by
  // 1 / sqrt(2 n_layer); zero biases; LayerNorm gains 1.
  absl::Status InitializeParameters(Rng& rng) override;
  // Batches of `size` windows of `seq_len` <= config.seq_len tokens.
  absl::StatusOr<ForwardStats> Forward(const Batch& batch) override;
  void Backward(float loss_scale) override;
  // The classifier's loss and gradient in one op
  // (Backend::SoftmaxCrossEntropyForwardBackward), and the backward queued
  // before the host waits for the losses. The same gradients as Forward
  // then Backward.
  absl::StatusOr<ForwardStats> ForwardBackward(const Batch& batch,
                                               int64_t parts) override;
  void ZeroGradients() override;

  const GptConfig& config() const { return config_; }
  // Logits of the last Forward at (sequence b, position t), on the host.
  // REQUIRES: no Backward or ForwardBackward since (they write the logits'
  // gradient over them).
  std::vector<float> Logits(int64_t b, int64_t t) const;
  // The refresh of each parameter's working copy from its master (bf16
  // only) happens at the next Forward; the model does it by itself at its
  // first. Call after writing masters later than that other than by AdamW.
  void MarkMastersWritten() { working_current_ = false; }

 private:
  GptModel(const GptConfig& config, int64_t max_batch, Backend* backend)
      : config_(config), max_batch_(max_batch), backend_(backend) {}
  absl::Status AllocateParameters();
  absl::Status AllocateActivations();
  absl::Status CheckBatch(const Batch& batch) const;
  // Parameter i (0..11) of block l, in the order listed in gpt.cc.
  const Parameter& Block(int64_t l, int i) const {
    return params_[2 + 12 * l + i];
  }
  // Block l, from its ln1 (made by the step before) to its output res3,
  // which is added with the next LayerNorm fused in (NormAfter(l + 1)).
  void ForwardBlock(int64_t l);
  // Queues the forward and the loss; with `loss_scale`, the loss's
  // gradient too, written over the logits.
  absl::Status QueueForward(const Batch& batch, const float* loss_scale);
  // Waits for the queued work and sums the losses and hits.
  absl::StatusOr<ForwardStats> ForwardResult();
  // Queues the backward; the logits' gradient is taken first unless the
  // forward already wrote it over them.
  void QueueBackward(float loss_scale, bool logits_hold_gradient);
  // The LayerNorm that reads the residual stream after block l - 1 (block
  // l's ln1, or the final one after the last block): where it writes and
  // its weights.
  struct NormTarget {
    void* out;
    float *mean, *rstd;
    const void *weight, *bias;
  };
  NormTarget NormAfter(int64_t l) const;
  void BackwardBlock(int64_t l, const void* residual, void* dresidual);
  // Parameter i of block l as the ops read it (the working copy).
  const void* W(int64_t l, int i) const { return Block(l, i).working; }

  // Per-block activations, sized for max_batch_ x seq_len: void pointers in
  // the backend's activation dtype, float pointers fp32 statistics.
  struct BlockActs {
    void *ln1, *qkv, *atty, *attproj, *res2;
    void *ln2, *fch, *fch_gelu, *fcproj, *res3;
    float *ln1_mean, *ln1_rstd, *att, *ln2_mean, *ln2_rstd;
  };

  const GptConfig config_;
  const int64_t max_batch_;
  Backend* const backend_;

  std::unique_ptr<DeviceBuffer> param_buf_, grad_buf_, working_buf_;
  std::vector<Parameter> params_;
  bool working_current_ = false;  // working copies match the masters
  std::unique_ptr<DeviceBuffer> act_buf_, grad_act_buf_, stat_buf_, token_buf_;
  void* encoded_ = nullptr;
  std::vector<BlockActs> blocks_;
  void *lnf_, *logits_;
  float *lnf_mean_, *lnf_rstd_, *losses_, *lse_;
  int32_t* hits_;
  // Backward scratch.
  void *dres_, *dln_, *dqkv_, *datty_, *dfch_;
  float* datt_;
  int32_t *tokens_ = nullptr, *targets_ = nullptr;

  int64_t last_b_ = 0, last_t_ = 0;
};

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_GPT_H_
