// GPT-2 forward/backward over Backend ops. See gpt.h.
#include "engine/core/gpt.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/core/bf16.h"

namespace trainyard::engine {
namespace {

// The twelve parameters of a block, in order.
enum BlockParam {
  kLn1W,
  kLn1B,
  kQkvW,
  kQkvB,
  kProjW,
  kProjB,
  kLn2W,
  kLn2B,
  kFcW,
  kFcB,
  kFcProjW,
  kFcProjB,
};

constexpr float kInitStd = 0.02f;

}  // namespace

GptActivationSizes GptActivationFloats(const GptConfig& c, int64_t seq,
                                       AttentionState attention) {
  const int64_t tc = seq * c.d_model;
  const AttentionFloats att =
      AttentionBufferFloats(attention, 1, seq, c.d_model, c.n_head);
  GptActivationSizes s;
  // Embedding output; per block ln1, qkv (3), atty, attproj, res2, ln2,
  // fch (4), fch_gelu (4), fcproj, res3; the final LayerNorm; the logits.
  s.per_sequence = tc + c.n_layer * 18 * tc + tc + seq * c.vocab_size;
  // LayerNorm means and rstds (two per block and the final one), attention
  // state, losses, argmax hits (int32) and the rows' log-sum-exp: 4 bytes
  // whatever the activations are. The classifier is fused: no
  // probabilities are kept, and the logits' gradient is written over the
  // logits.
  s.f32_per_sequence = c.n_layer * (4 * seq + att.state) + 2 * seq + 3 * seq;
  // dres, dln, dqkv (3), datty, dfch (4).
  s.grad_per_sequence = 10 * tc;
  s.f32_grad_per_sequence = att.scratch;
  return s;
}

absl::Status ValidateGptConfig(const GptConfig& c) {
  struct Limit {
    const char* name;
    int64_t value, max;
  };
  for (const Limit& l :
       {Limit{"n_layer", c.n_layer, 256}, Limit{"n_head", c.n_head, 1024},
        Limit{"d_model", c.d_model, 65536}, Limit{"seq_len", c.seq_len, 65536},
        Limit{"vocab_size", c.vocab_size, 1 << 20}}) {
    if (l.value < 1 || l.value > l.max) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gpt: ", l.name, " must be in [1, ", l.max, "], got ", l.value));
    }
  }
  if (c.d_model % c.n_head != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gpt: d_model ", c.d_model, " is not a multiple of n_head ", c.n_head));
  }
  if (GptParameterCount(c) > 2'000'000'000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gpt: ", GptParameterCount(c), " parameters exceeds the limit of 2e9"));
  }
  return absl::OkStatus();
}

int64_t GptParameterCount(const GptConfig& c) {
  const int64_t d = c.d_model;
  return c.vocab_size * d + c.seq_len * d + c.n_layer * (12 * d * d + 13 * d) +
         2 * d;
}

Json GptDescription(const GptConfig& c) {
  return Json::MakeObject({{"kind", Json::String("gpt")},
                           {"n_layer", Json::Int(c.n_layer)},
                           {"n_head", Json::Int(c.n_head)},
                           {"d_model", Json::Int(c.d_model)},
                           {"seq_len", Json::Int(c.seq_len)},
                           {"vocab_size", Json::Int(c.vocab_size)}});
}

absl::StatusOr<GptConfig> GptConfigFromDescription(const Json& d) {
  const Json* kind = d.Find("kind");
  if (kind == nullptr || !kind->is_string() ||
      *kind->AsString("kind") != "gpt") {
    return absl::InvalidArgumentError("model: not a GPT (kind is not \"gpt\")");
  }
  GptConfig c;
  for (auto [name, field] :
       {std::pair{"n_layer", &c.n_layer}, std::pair{"n_head", &c.n_head},
        std::pair{"d_model", &c.d_model}, std::pair{"seq_len", &c.seq_len},
        std::pair{"vocab_size", &c.vocab_size}}) {
    ASSIGN_OR_RETURN(const Json* v, RequireField(d, name));
    ASSIGN_OR_RETURN(*field, v->AsInt(absl::StrCat("model.", name)));
  }
  RETURN_IF_ERROR(ValidateGptConfig(c));
  return c;
}

absl::StatusOr<std::unique_ptr<GptModel>> GptModel::Create(
    const GptConfig& config, int64_t max_batch, Backend* backend) {
  RETURN_IF_ERROR(ValidateGptConfig(config));
  if (max_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpt: the batch must be >= 1, got ", max_batch));
  }
  std::unique_ptr<GptModel> model(new GptModel(config, max_batch, backend));
  RETURN_IF_ERROR(model->AllocateParameters());
  RETURN_IF_ERROR(model->AllocateActivations());
  return model;
}

absl::Status GptModel::AllocateParameters() {
  const int64_t C = config_.d_model, V = config_.vocab_size;
  struct Spec {
    std::string name;
    Shape shape;
    bool no_decay;
  };
  std::vector<Spec> specs = {{"wte", {V, C}, true},
                             {"wpe", {config_.seq_len, C}, true}};
  for (int64_t l = 0; l < config_.n_layer; ++l) {
    const std::string h = absl::StrCat("h.", l, ".");
    for (const Spec& s :
         std::vector<Spec>{{"ln_1.weight", {C}, true},
                           {"ln_1.bias", {C}, true},
                           {"attn.c_attn.weight", {3 * C, C}, false},
                           {"attn.c_attn.bias", {3 * C}, true},
                           {"attn.c_proj.weight", {C, C}, false},
                           {"attn.c_proj.bias", {C}, true},
                           {"ln_2.weight", {C}, true},
                           {"ln_2.bias", {C}, true},
                           {"mlp.c_fc.weight", {4 * C, C}, false},
                           {"mlp.c_fc.bias", {4 * C}, true},
                           {"mlp.c_proj.weight", {C, 4 * C}, false},
                           {"mlp.c_proj.bias", {C}, true}}) {
      specs.push_back({h + s.name, s.shape, s.no_decay});
    }
  }
  specs.push_back({"ln_f.weight", {C}, true});
  specs.push_back({"ln_f.bias", {C}, true});
  int64_t total = 0;
  for (const Spec& s : specs) total += NumElements(s.shape);
  ASSIGN_OR_RETURN(param_buf_, backend_->Allocate(total * 4));
  ASSIGN_OR_RETURN(grad_buf_, backend_->Allocate(total * 4));
  // bf16: the ops read a rounded working copy of the fp32 masters.
  const bool mixed = backend_->activation_dtype() != DType::kF32;
  const int64_t working_bytes = DTypeBytes(backend_->activation_dtype());
  if (mixed) {
    ASSIGN_OR_RETURN(working_buf_, backend_->Allocate(total * working_bytes));
  }
  int64_t offset = 0;
  for (const Spec& s : specs) {
    Parameter& p = params_.emplace_back();
    p = {s.name, s.shape, param_buf_->f32() + offset, grad_buf_->f32() + offset,
         s.no_decay};
    p.working = mixed ? static_cast<char*>(working_buf_->data()) +
                            offset * working_bytes
                      : static_cast<void*>(p.value);
    offset += NumElements(s.shape);
  }
  return absl::OkStatus();
}

absl::Status GptModel::AllocateActivations() {
  const int64_t B = max_batch_, T = config_.seq_len, C = config_.d_model;
  const int64_t V = config_.vocab_size, NH = config_.n_head;
  const AttentionState attention = backend_->attention_state();
  const GptActivationSizes sizes = GptActivationFloats(config_, T, attention);
  const AttentionFloats att = AttentionBufferFloats(attention, B, T, C, NH);
  const int64_t ab = DTypeBytes(backend_->activation_dtype());
  // In double first: absurd sizes must be refused, not wrap around.
  const double bytes = B * sizes.Bytes(ab);
  if (bytes > 0x1p56) {
    return absl::ResourceExhaustedError(
        absl::StrCat("gpt: activations for a batch of ", B, " would take ",
                     bytes, " bytes"));
  }
  ASSIGN_OR_RETURN(act_buf_, backend_->Allocate(B * sizes.per_sequence * ab));
  ASSIGN_OR_RETURN(grad_act_buf_,
                   backend_->Allocate(B * sizes.grad_per_sequence * ab));
  ASSIGN_OR_RETURN(
      stat_buf_,
      backend_->Allocate(
          B * (sizes.f32_per_sequence + sizes.f32_grad_per_sequence) * 4));
  ASSIGN_OR_RETURN(token_buf_, backend_->Allocate(2 * B * T * 4));
  // Activations carved from act_buf_ (then grad_act_buf_), statistics
  // from stat_buf_.
  char* p = static_cast<char*>(act_buf_->data());
  auto take = [&p, ab](int64_t n) {
    void* out = p;
    p += n * ab;
    return out;
  };
  float* f = stat_buf_->f32();
  auto take_f32 = [&f](int64_t n) {
    float* out = f;
    f += n;
    return out;
  };
  const int64_t btc = B * T * C, bt = B * T;
  encoded_ = take(btc);
  for (int64_t l = 0; l < config_.n_layer; ++l) {
    BlockActs a;
    a.ln1 = take(btc);
    a.ln1_mean = take_f32(bt);
    a.ln1_rstd = take_f32(bt);
    a.qkv = take(3 * btc);
    a.atty = take(btc);
    a.att = take_f32(att.state);
    a.attproj = take(btc);
    a.res2 = take(btc);
    a.ln2 = take(btc);
    a.ln2_mean = take_f32(bt);
    a.ln2_rstd = take_f32(bt);
    a.fch = take(4 * btc);
    a.fch_gelu = take(4 * btc);
    a.fcproj = take(btc);
    a.res3 = take(btc);
    blocks_.push_back(a);
  }
  lnf_ = take(btc);
  lnf_mean_ = take_f32(bt);
  lnf_rstd_ = take_f32(bt);
  logits_ = take(bt * V);
  losses_ = take_f32(bt);
  hits_ = reinterpret_cast<int32_t*>(take_f32(bt));  // 4 bytes each
  lse_ = take_f32(bt);
  p = static_cast<char*>(grad_act_buf_->data());
  dres_ = take(btc);
  dln_ = take(btc);
  dqkv_ = take(3 * btc);
  datty_ = take(btc);
  dfch_ = take(4 * btc);
  datt_ = take_f32(att.scratch);
  tokens_ = token_buf_->i32();
  targets_ = tokens_ + bt;
  return absl::OkStatus();
}

absl::Status GptModel::InitializeParameters(Rng& rng) {
  const float residual_std =
      kInitStd / std::sqrt(2.0f * static_cast<float>(config_.n_layer));
  for (const Parameter& p : params_) {
    std::vector<float> host(p.size(), 0.f);
    const bool is_ln_weight =
        p.name.find("ln_") != std::string::npos && p.name.ends_with(".weight");
    if (is_ln_weight) {
      std::fill(host.begin(), host.end(), 1.f);
    } else if (p.shape.size() == 2) {
      const bool residual_proj = p.name.ends_with("c_proj.weight");
      const float std = residual_proj ? residual_std : kInitStd;
      for (float& x : host) x = rng.Normal(0.f, std);
    }
    backend_->CopyToDevice(p.value, host.data(), p.size() * 4);
  }
  working_current_ = false;
  return backend_->Synchronize();
}

absl::Status GptModel::CheckBatch(const Batch& batch) const {
  if (batch.size < 1 || batch.size > max_batch_ || batch.seq_len < 1 ||
      batch.seq_len > config_.seq_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gpt: batch of ", batch.size, " x ", batch.seq_len,
        " tokens; must be at most ", max_batch_, " x ", config_.seq_len));
  }
  const size_t n = static_cast<size_t>(batch.size * batch.seq_len);
  if (batch.tokens.size() != n || batch.targets.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpt: batch holds ", batch.tokens.size(), " tokens and ",
                     batch.targets.size(), " targets, expected ", n));
  }
  for (size_t i = 0; i < n; ++i) {
    const int32_t t = batch.tokens[i], y = batch.targets[i];
    if (t < 0 || t >= config_.vocab_size || y < 0 || y >= config_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gpt: token ", t < 0 || t >= config_.vocab_size ? t : y,
          " outside the vocabulary [0, ", config_.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

GptModel::NormTarget GptModel::NormAfter(int64_t l) const {
  if (l < config_.n_layer) {
    const BlockActs& a = blocks_[l];
    return {a.ln1, a.ln1_mean, a.ln1_rstd, W(l, kLn1W), W(l, kLn1B)};
  }
  const size_t nf = params_.size();
  return {lnf_, lnf_mean_, lnf_rstd_, params_[nf - 2].working,
          params_[nf - 1].working};
}

void GptModel::ForwardBlock(int64_t l) {
  const int64_t B = last_b_, T = last_t_, C = config_.d_model;
  const int64_t BT = B * T;
  const BlockActs& a = blocks_[l];
  const void* residual = l == 0 ? encoded_ : blocks_[l - 1].res3;
  Backend& be = *backend_;
  be.LinearForward(a.qkv, a.ln1, W(l, kQkvW), W(l, kQkvB), BT, C, 3 * C);
  be.AttentionForward(a.atty, a.att, a.qkv, B, T, C, config_.n_head);
  be.LinearForward(a.attproj, a.atty, W(l, kProjW), W(l, kProjB), BT, C, C);
  // res2 = residual + attproj, and ln2 of it.
  be.AddLayerNormForward(a.res2, a.ln2, a.ln2_mean, a.ln2_rstd, residual,
                         a.attproj, W(l, kLn2W), W(l, kLn2B), BT, C);
  be.LinearGeluForward(a.fch_gelu, a.fch, a.ln2, W(l, kFcW), W(l, kFcB), BT, C,
                       4 * C);
  be.LinearForward(a.fcproj, a.fch_gelu, W(l, kFcProjW), W(l, kFcProjB), BT,
                   4 * C, C);
  // res3 = res2 + fcproj, and the next LayerNorm of it.
  const NormTarget next = NormAfter(l + 1);
  be.AddLayerNormForward(a.res3, next.out, next.mean, next.rstd, a.res2,
                         a.fcproj, next.weight, next.bias, BT, C);
}

absl::StatusOr<ForwardStats> GptModel::Forward(const Batch& batch) {
  RETURN_IF_ERROR(QueueForward(batch, nullptr));
  return ForwardResult();
}

// The forward with the classifier's backward fused in (the logits hold
// their gradient after it), then the rest of the backward, queued before
// the wait for the losses: the device goes from one to the other without
// waiting on the host.
absl::StatusOr<ForwardStats> GptModel::ForwardBackward(const Batch& batch,
                                                       int64_t parts) {
  const float loss_scale = LossScale(batch.size * batch.seq_len, parts);
  RETURN_IF_ERROR(QueueForward(batch, &loss_scale));
  QueueBackward(loss_scale, /*logits_hold_gradient=*/true);
  return ForwardResult();
}

absl::Status GptModel::QueueForward(const Batch& batch,
                                    const float* loss_scale) {
  RETURN_IF_ERROR(CheckBatch(batch));
  const int64_t B = batch.size, T = batch.seq_len, C = config_.d_model;
  const int64_t V = config_.vocab_size, BT = B * T;
  last_b_ = B;
  last_t_ = T;
  Backend& be = *backend_;
  if (!working_current_) {
    // One cast over the contiguous masters; fp32 reads the masters.
    if (working_buf_ != nullptr) {
      be.CastToActivations(working_buf_->data(), param_buf_->f32(),
                           param_buf_->bytes() / 4);
    }
    working_current_ = true;
  }
  be.CopyToDevice(tokens_, batch.tokens.data(), BT * 4);
  be.CopyToDevice(targets_, batch.targets.data(), BT * 4);
  be.EmbeddingForward(encoded_, tokens_, params_[0].working, params_[1].working,
                      B, T, C);
  // The first LayerNorm (block 0's ln1, or the final one without blocks);
  // every later one comes fused with the residual add before it.
  const NormTarget first = NormAfter(0);
  be.LayerNormForward(first.out, first.mean, first.rstd, encoded_, first.weight,
                      first.bias, BT, C);
  for (int64_t l = 0; l < config_.n_layer; ++l) ForwardBlock(l);
  be.LinearForward(logits_, lnf_, params_[0].working, nullptr, BT, C, V);
  if (loss_scale != nullptr) {
    be.SoftmaxCrossEntropyForwardBackward(losses_, hits_, lse_, logits_,
                                          targets_, *loss_scale, BT, V);
  } else {
    be.SoftmaxCrossEntropyForward(losses_, hits_, lse_, logits_, targets_, BT,
                                  V);
  }
  return absl::OkStatus();
}

absl::StatusOr<ForwardStats> GptModel::ForwardResult() {
  const int64_t BT = last_b_ * last_t_;
  Backend& be = *backend_;
  std::vector<float> losses(BT);
  std::vector<int32_t> hits(BT);
  be.CopyToHost(losses.data(), losses_, BT * 4);
  be.CopyToHost(hits.data(), hits_, BT * 4);
  RETURN_IF_ERROR(be.Synchronize());
  ForwardStats stats;
  for (float x : losses) stats.loss_sum += x;
  for (int32_t h : hits) stats.correct += h;
  stats.examples = BT;
  stats.tokens = BT;
  return stats;
}

void GptModel::BackwardBlock(int64_t l, const void* residual, void* dresidual) {
  const int64_t B = last_b_, T = last_t_, C = config_.d_model;
  const int64_t BT = B * T;
  const BlockActs& a = blocks_[l];
  Backend& be = *backend_;
  // res3 = res2 + fcproj: dresidual is the gradient of both. The two
  // linear layers that add into the residual (fcproj, attproj) have the
  // LayerNorm backward that left dresidual sum their bias gradients.
  be.LinearBackwardThroughGelu(dfch_, Block(l, kFcProjW).grad, nullptr,
                               dresidual, a.fch_gelu, W(l, kFcProjW), a.fch, BT,
                               4 * C, C);
  be.LinearBackward(dln_, Block(l, kFcW).grad, Block(l, kFcB).grad, dfch_,
                    a.ln2, W(l, kFcW), BT, C, 4 * C);
  be.LayerNormBackward(dresidual, Block(l, kLn2W).grad, Block(l, kLn2B).grad,
                       Block(l, kProjB).grad, dln_, a.res2, W(l, kLn2W),
                       a.ln2_mean, a.ln2_rstd, BT, C);
  // res2 = residual + attproj.
  be.LinearBackward(datty_, Block(l, kProjW).grad, nullptr, dresidual, a.atty,
                    W(l, kProjW), BT, C, C);
  be.AttentionBackward(dqkv_, datt_, datty_, a.atty, a.qkv, a.att, B, T, C,
                       config_.n_head);
  be.LinearBackward(dln_, Block(l, kQkvW).grad, Block(l, kQkvB).grad, dqkv_,
                    a.ln1, W(l, kQkvW), BT, C, 3 * C);
  be.LayerNormBackward(dresidual, Block(l, kLn1W).grad, Block(l, kLn1B).grad,
                       l > 0 ? Block(l - 1, kFcProjB).grad : nullptr, dln_,
                       residual, W(l, kLn1W), a.ln1_mean, a.ln1_rstd, BT, C);
}

void GptModel::Backward(float loss_scale) {
  QueueBackward(loss_scale, /*logits_hold_gradient=*/false);
}

void GptModel::QueueBackward(float loss_scale, bool logits_hold_gradient) {
  const int64_t B = last_b_, T = last_t_, C = config_.d_model;
  const int64_t V = config_.vocab_size, BT = B * T;
  Backend& be = *backend_;
  const size_t nf = params_.size();
  // The logits' gradient takes the logits' place (they are not needed
  // again): no second [B*T, V] buffer. The forward's log-sum-exp spares
  // the backward a pass over the logits.
  void* dlogits = logits_;
  if (!logits_hold_gradient) {
    be.SoftmaxCrossEntropyBackward(dlogits, logits_, lse_, targets_, loss_scale,
                                   BT, V);
  }
  // The tied output projection adds its share to the token embedding's grad.
  be.LinearBackward(dln_, params_[0].grad, nullptr, dlogits, lnf_,
                    params_[0].working, BT, C, V);
  be.FillActivations(dres_, BT * C, 0.f);
  const void* last = config_.n_layer > 0 ? blocks_.back().res3 : encoded_;
  float* last_bias_grad =
      config_.n_layer > 0 ? Block(config_.n_layer - 1, kFcProjB).grad : nullptr;
  be.LayerNormBackward(dres_, params_[nf - 2].grad, params_[nf - 1].grad,
                       last_bias_grad, dln_, last, params_[nf - 2].working,
                       lnf_mean_, lnf_rstd_, BT, C);
  GradientsFinal(nf - 2, nf);
  for (int64_t l = config_.n_layer - 1; l >= 0; --l) {
    const void* residual = l == 0 ? encoded_ : blocks_[l - 1].res3;
    BackwardBlock(l, residual, dres_);
    GradientsFinal(2 + 12 * l, 2 + 12 * (l + 1));
  }
  be.EmbeddingBackward(params_[0].grad, params_[1].grad, dres_, tokens_, B, T,
                       C);
}

void GptModel::ZeroGradients() {
  backend_->Fill(grad_buf_->f32(), grad_buf_->bytes() / 4, 0.0f);
}

std::vector<float> GptModel::Logits(int64_t b, int64_t t) const {
  const int64_t V = config_.vocab_size;
  const int64_t ab = DTypeBytes(backend_->activation_dtype());
  return ActivationsToHost(
      *backend_, static_cast<const char*>(logits_) + (b * last_t_ + t) * V * ab,
      V);
}

}  // namespace trainyard::engine
