// CudaBackend's ops: each checks what the kernels cannot, queues its kernels
// (or cuBLASLt products) on the stream, and records the first failure with
// its file:line for Synchronize. See cuda_backend.h.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "engine/cuda/adamw_kernels.h"
#include "engine/cuda/attention_kernels.h"
#include "engine/cuda/classifier_kernels.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/elementwise_kernels.h"
#include "engine/cuda/embedding_kernels.h"
#include "engine/cuda/gelu_kernels.h"
#include "engine/cuda/layernorm_kernels.h"
#include "engine/cuda/linear_kernels.h"
#include "engine/cuda/stream_timer.h"

#define YARD_CUDA_LAUNCH(expr) Launched((expr), #expr, __FILE__, __LINE__)

namespace trainyard::engine {
namespace {

// cuBLASLt's bias epilogue wants a 16-byte aligned vector; other biases
// (and any problem cuBLASLt has no fused-bias algorithm for) are broadcast
// into the output first and the product added onto them.
bool EpilogueCanTake(const void* bias) {
  return reinterpret_cast<uintptr_t>(bias) % 16 == 0;
}

absl::Status InOp(const char* op, absl::Status status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(op, ": ", status.message()));
}

}  // namespace

void CudaBackend::Fill(float* x, int64_t n, float value) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchFill(x, n, value, stream_));
}

void CudaBackend::FillActivations(void* x, int64_t n, float value) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchFillAct(x, n, value, bf16(), stream_));
}

void CudaBackend::CastToActivations(void* dst, const float* src, int64_t n) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchCastToAct(dst, src, n, bf16(), stream_));
}

void CudaBackend::Scale(float* x, int64_t n, float s) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchScale(x, n, s, stream_));
}

void CudaBackend::Add(void* out, const void* a, const void* b, int64_t n) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchAdd(out, a, b, n, bf16(), stream_));
}

void CudaBackend::ReluForward(void* out, const void* x, int64_t n) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchReluForward(out, x, n, bf16(), stream_));
}

void CudaBackend::ReluBackward(void* dx, const void* dout, const void* out,
                               int64_t n) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchReluBackward(dx, dout, out, n, bf16(), stream_));
}

void CudaBackend::LinearForward(void* out, const void* inp, const void* weight,
                                const void* bias, int64_t batch, int64_t in,
                                int64_t out_features) {
  UseDevice();
  cuda::LtGemmArgs g = cuda::LinearForwardArgs(out, inp, weight, batch, in,
                                               out_features, act_type());
  if (bias != nullptr && EpilogueCanTake(bias)) {
    g.bias = bias;
    absl::Status fused = gemm_->Run(g);
    if (fused.code() != absl::StatusCode::kUnimplemented) {
      Launched(InOp("LinearForward", std::move(fused)));
      return;
    }
    g.bias = nullptr;  // no fused-bias algorithm: nothing was queued
  }
  if (bias != nullptr) {
    YARD_CUDA_LAUNCH(cuda::LaunchBroadcastRows(out, bias, batch, out_features,
                                               bf16(), stream_));
    g.beta = 1.f;
  }
  Launched(InOp("LinearForward", gemm_->Run(g)));
}

// In bf16, one product with cuBLASLt's GELU epilogue: the pre-activation
// and gelu of it leave the GEMM together (both rounded to bf16 from the
// same fp32 value), instead of writing the pre-activation and reading it
// back. fp32 keeps the two ops, so its results stay the CPU's to fp32
// rounding. Any problem cuBLASLt has no GELU algorithm for does the same.
void CudaBackend::LinearGeluForward(void* out, void* pre, const void* inp,
                                    const void* weight, const void* bias,
                                    int64_t batch, int64_t in,
                                    int64_t out_features) {
  UseDevice();
  const bool fusable = bf16() && out_features % 8 == 0 &&
                       reinterpret_cast<uintptr_t>(pre) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
                       (bias == nullptr || EpilogueCanTake(bias));
  if (fusable) {
    cuda::LtGemmArgs g = cuda::LinearForwardArgs(out, inp, weight, batch, in,
                                                 out_features, act_type());
    g.bias = bias;
    g.gelu = cuda::LtGemmArgs::Gelu::kApply;
    g.gelu_aux = pre;
    absl::Status fused = gemm_->Run(g);
    if (fused.code() != absl::StatusCode::kUnimplemented) {
      Launched(InOp("LinearGeluForward", std::move(fused)));
      return;
    }
  }
  Backend::LinearGeluForward(out, pre, inp, weight, bias, batch, in,
                             out_features);
}

// The products are lt_gemm.h's LinearInputGradArgs and LinearWeightGradArgs:
// in bf16 dinp is a bf16 activation gradient, dweight stays fp32.
void CudaBackend::LinearBackward(void* dinp, float* dweight, float* dbias,
                                 const void* dout, const void* inp,
                                 const void* weight, int64_t batch, int64_t in,
                                 int64_t out_features) {
  UseDevice();
  if (dinp != nullptr) {
    Launched(
        InOp("LinearBackward (input)",
             gemm_->Run(cuda::LinearInputGradArgs(dinp, dout, weight, batch, in,
                                                  out_features, act_type()))));
  }
  WeightGrads(dweight, dbias, dout, inp, batch, in, out_features);
}

// In bf16, the input gradient's product applies gelu' of the saved
// pre-activation in cuBLASLt's DGELU epilogue instead of writing the
// product and reading it back with the pre-activation; fp32, and problems
// cuBLASLt has no such algorithm for, run the two ops.
void CudaBackend::LinearBackwardThroughGelu(void* dpre, float* dweight,
                                            float* dbias, const void* dout,
                                            const void* inp, const void* weight,
                                            const void* pre, int64_t batch,
                                            int64_t in, int64_t out_features) {
  UseDevice();
  const bool fusable = bf16() && in % 8 == 0 &&
                       reinterpret_cast<uintptr_t>(pre) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(dpre) % 16 == 0;
  if (fusable) {
    cuda::LtGemmArgs g = cuda::LinearInputGradArgs(
        dpre, dout, weight, batch, in, out_features, act_type());
    g.gelu = cuda::LtGemmArgs::Gelu::kGradient;
    g.gelu_aux = pre;
    absl::Status fused = gemm_->Run(g);
    if (fused.code() != absl::StatusCode::kUnimplemented) {
      Launched(InOp("LinearBackwardThroughGelu", std::move(fused)));
      WeightGrads(dweight, dbias, dout, inp, batch, in, out_features);
      return;
    }
  }
  Backend::LinearBackwardThroughGelu(dpre, dweight, dbias, dout, inp, weight,
                                     pre, batch, in, out_features);
}

// With BiasGradient::kEpilogue, cuBLASLt writes the bias gradient (fp32,
// as dweight) to the column sums' scratch while it takes the weight
// gradient, and a small add sums it in; where it has no such algorithm,
// the product runs plain and the column sums as without it.
void CudaBackend::WeightGrads(float* dweight, float* dbias, const void* dout,
                              const void* inp, int64_t batch, int64_t in,
                              int64_t out_features) {
  cuda::LtGemmArgs g = cuda::LinearWeightGradArgs(dweight, dout, inp, batch, in,
                                                  out_features, act_type());
  if (dbias != nullptr && options_.bias_gradient == BiasGradient::kEpilogue &&
      batch > 0 && out_features <= column_scratch_floats_) {
    g.bias_grad = column_scratch_;
    absl::Status fused = gemm_->Run(g);
    if (fused.code() != absl::StatusCode::kUnimplemented) {
      const bool queued = fused.ok();
      Launched(
          InOp("LinearBackward (weight, bias gradient)", std::move(fused)));
      if (queued) {
        YARD_CUDA_LAUNCH(cuda::LaunchAdd(dbias, dbias, column_scratch_,
                                         out_features, false, stream_));
      }
      return;
    }
    g.bias_grad = nullptr;  // no such algorithm: nothing was queued
  }
  Launched(InOp("LinearBackward (weight)", gemm_->Run(g)));
  if (dbias != nullptr) {
    YARD_CUDA_LAUNCH(
        cuda::LaunchBiasGrad(dbias, dout, batch, out_features, column_scratch_,
                             column_scratch_floats_, bf16(), stream_));
  }
}

void CudaBackend::SoftmaxCrossEntropyForward(float* losses, int32_t* hits,
                                             float* lse, const void* logits,
                                             const int32_t* targets,
                                             int64_t batch, int64_t classes) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchSoftmaxCrossEntropyForward(
      losses, hits, lse, logits, targets, batch, classes, bf16(), stream_));
}

void CudaBackend::SoftmaxCrossEntropyBackward(void* dlogits, const void* logits,
                                              const float* lse,
                                              const int32_t* targets,
                                              float scale, int64_t batch,
                                              int64_t classes) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchSoftmaxCrossEntropyBackward(
      dlogits, logits, lse, targets, scale, batch, classes, bf16(), stream_));
}

void CudaBackend::SoftmaxCrossEntropyForwardBackward(
    float* losses, int32_t* hits, float* lse, void* logits,
    const int32_t* targets, float scale, int64_t batch, int64_t classes) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchSoftmaxCrossEntropyForwardBackward(
      losses, hits, lse, logits, targets, scale, batch, classes, bf16(),
      stream_));
}

void CudaBackend::AdamW(float* param, const float* grad, float* m, float* v,
                        void* working, int64_t n, const AdamWUpdate& u) {
  const AdamWTensor one[] = {{param, grad, m, v, working, n, u.weight_decay}};
  AdamWEach(one, u);
}

void CudaBackend::AdamWEach(std::span<const AdamWTensor> tensors,
                            const AdamWUpdate& u) {
  UseDevice();
  const cuda::AdamWStep step{u.lr,
                             u.beta1,
                             u.beta2,
                             u.eps,
                             u.weight_decay,
                             u.grad_scale,
                             u.bias_correction1,
                             u.bias_correction2};
  for (const AdamWTensor& t : tensors) {
    if (t.working != nullptr && t.working != t.param && !bf16()) {
      Record(absl::InvalidArgumentError(
          "cuda AdamW: an fp32 backend has no separate working copy"));
      return;  // before anything is queued
    }
  }
  cuda::AdamWBatch batch;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const AdamWTensor& t = tensors[i];
    void* working_bf16 = t.working == t.param ? nullptr : t.working;
    batch.tensors[batch.count++] = {t.param,      t.grad, t.m,           t.v,
                                    working_bf16, t.n,    t.weight_decay};
    if (batch.count == cuda::kAdamWBatchTensors || i + 1 == tensors.size()) {
      YARD_CUDA_LAUNCH(cuda::LaunchAdamWBatch(batch, step, stream_));
      batch.count = 0;
    }
  }
}

void CudaBackend::EmbeddingForward(void* out, const int32_t* tokens,
                                   const void* wte, const void* wpe,
                                   int64_t batch, int64_t seq,
                                   int64_t channels) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchEmbeddingForward(
      out, tokens, wte, wpe, batch, seq, channels, bf16(), stream_));
}

void CudaBackend::EmbeddingBackward(float* dwte, float* dwpe, const void* dout,
                                    const int32_t* tokens, int64_t batch,
                                    int64_t seq, int64_t channels) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchEmbeddingBackward(
      dwte, dwpe, dout, tokens, batch, seq, channels, bf16(), sort_keys_,
      sort_key_capacity_, stream_));
}

void CudaBackend::LayerNormForward(void* out, float* mean, float* rstd,
                                   const void* inp, const void* weight,
                                   const void* bias, int64_t rows,
                                   int64_t channels) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchLayerNormForward(
      out, mean, rstd, inp, weight, bias, rows, channels, bf16(), stream_));
}

void CudaBackend::AddLayerNormForward(void* res, void* out, float* mean,
                                      float* rstd, const void* a, const void* b,
                                      const void* weight, const void* bias,
                                      int64_t rows, int64_t channels) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchAddLayerNormForward(res, out, mean, rstd, a, b,
                                                   weight, bias, rows, channels,
                                                   bf16(), stream_));
}

void CudaBackend::LayerNormBackward(void* dinp, float* dweight, float* dbias,
                                    float* dinp_sums, const void* dout,
                                    const void* inp, const void* weight,
                                    const float* mean, const float* rstd,
                                    int64_t rows, int64_t channels) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchLayerNormBackward(
      dinp, dweight, dbias, dinp_sums, dout, inp, weight, mean, rstd, rows,
      channels, column_scratch_, column_scratch_floats_, bf16(), stream_));
}

void CudaBackend::GeluForward(void* out, const void* x, int64_t n) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchGeluForward(out, x, n, bf16(), stream_));
}

void CudaBackend::GeluBackward(void* dx, const void* x, const void* dout,
                               int64_t n) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchGeluBackward(dx, x, dout, n, bf16(), stream_));
}

absl::Status CudaBackend::CheckAttentionShape(int64_t channels,
                                              int64_t heads) const {
  if (heads < 1 || channels % heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda attention: ", channels,
                     " channels do not split into ", heads, " heads"));
  }
  if (channels / heads > cuda::kAttentionMaxHeadSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda attention: head size ", channels / heads,
                     " exceeds the largest the kernels support, ",
                     cuda::kAttentionMaxHeadSize, " (use more heads)"));
  }
  return absl::OkStatus();
}

namespace {

// The tilings attention with heads of `head_size` channels could take on
// the tensor cores (none where the kernels do not take the head size):
// every one for the forward and the two-kernel backward; for the ordered
// backward, whose only choice is the warpgroup key side or not, the first
// tiling of each kind.
std::vector<cuda::AttentionTcTiling> TilingCandidates(int64_t head_size,
                                                      bool ordered_backward) {
  std::vector<cuda::AttentionTcTiling> candidates;
  for (const cuda::AttentionTcTiling& t : cuda::kAttentionTcTilings) {
    if (!cuda::AttentionTcTakesTiling(t, head_size)) continue;
    if (ordered_backward && std::any_of(candidates.begin(), candidates.end(),
                                        [&](const cuda::AttentionTcTiling& c) {
                                          return c.warpgroup == t.warpgroup;
                                        })) {
      continue;
    }
    candidates.push_back(t);
  }
  return candidates;
}

}  // namespace

template <typename Launch>
absl::Status CudaBackend::TuneTiling(const char* what, int64_t head_size,
                                     bool ordered_backward, bool* timed,
                                     cuda::AttentionTcTiling* tiling,
                                     const Launch& launch) {
  if (attention_reps_ == 0 || *timed || !bf16()) return absl::OkStatus();
  const std::vector<cuda::AttentionTcTiling> candidates =
      TilingCandidates(head_size, ordered_backward);
  if (candidates.empty()) return absl::OkStatus();
  *timed = true;
  cuda::StreamTimer timer;
  RETURN_IF_ERROR(timer.Create());
  float best_ms = -1;
  for (const cuda::AttentionTcTiling& t : candidates) {
    const std::string name = cuda::AttentionTcTilingName(t);
    const auto run = [&] {
      return cuda::CudaStatus(launch(t), name.c_str(), __FILE__, __LINE__);
    };
    RETURN_IF_ERROR(timer.Time(stream_, run).status());  // to warm up
    ASSIGN_OR_RETURN(const float ms,
                     timer.Median(attention_reps_, stream_, run));
    attention_tuning_.timings.push_back(
        absl::StrFormat("%s %s: %.3f ms", what, name, ms));
    if (best_ms < 0 || ms < best_ms) {
      *tiling = t;
      best_ms = ms;
    }
  }
  return absl::OkStatus();
}

void CudaBackend::AttentionForward(void* out, float* state, const void* qkv,
                                   int64_t batch, int64_t seq, int64_t channels,
                                   int64_t heads) {
  UseDevice();
  if (absl::Status s = CheckAttentionShape(channels, heads); !s.ok()) {
    Record(std::move(s));
    return;
  }
  const auto launch = [&](cuda::AttentionTcTiling t) {
    return cuda::LaunchAttentionForward(out, state, qkv, batch, seq, channels,
                                        heads, bf16(), stream_, t);
  };
  if (absl::Status s = TuneTiling("forward", channels / heads, false,
                                  &attention_tuning_.forward_timed,
                                  &tilings_.forward, launch);
      !s.ok()) {
    Record(InOp("attention forward tuning", std::move(s)));
    return;
  }
  YARD_CUDA_LAUNCH(launch(tilings_.forward));
}

void CudaBackend::AttentionBackward(void* dqkv, float* scratch,
                                    const void* dout, const void* out,
                                    const void* qkv, const float* state,
                                    int64_t batch, int64_t seq,
                                    int64_t channels, int64_t heads) {
  UseDevice();
  if (absl::Status s = CheckAttentionShape(channels, heads); !s.ok()) {
    Record(std::move(s));
    return;
  }
  const auto launch = [&](cuda::AttentionTcTiling t) {
    return cuda::LaunchAttentionBackward(
        dqkv, scratch, dout, out, qkv, state, batch, seq, channels, heads,
        bf16(), stream_, t, options_.attention_backward);
  };
  if (absl::Status s = TuneTiling(
          "backward", channels / heads,
          options_.attention_backward == cuda::AttentionTcBackward::kOrderedDq,
          &attention_tuning_.backward_timed, &tilings_.backward, launch);
      !s.ok()) {
    Record(InOp("attention backward tuning", std::move(s)));
    return;
  }
  YARD_CUDA_LAUNCH(launch(tilings_.backward));
}

}  // namespace trainyard::engine
