// CudaBackend's ops: each checks what the kernels cannot, queues its kernels
// (or cuBLASLt products) on the stream, and records the first failure with
// its file:line for Synchronize. See cuda_backend.h.
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/cuda/adamw_kernels.h"
#include "engine/cuda/attention_kernels.h"
#include "engine/cuda/classifier_kernels.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/elementwise_kernels.h"
#include "engine/cuda/embedding_kernels.h"
#include "engine/cuda/gelu_kernels.h"
#include "engine/cuda/layernorm_kernels.h"
#include "engine/cuda/linear_kernels.h"

#define YARD_CUDA_LAUNCH(expr) Launched((expr), #expr, __FILE__, __LINE__)

namespace trainyard::engine {
namespace {

// cuBLASLt's bias epilogue wants a 16-byte aligned vector; other biases
// (and any problem cuBLASLt has no fused-bias algorithm for) are broadcast
// into the output first and the product added onto them.
bool EpilogueCanTake(const float* bias) {
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

void CudaBackend::Scale(float* x, int64_t n, float s) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchScale(x, n, s, stream_));
}

void CudaBackend::Add(float* out, const float* a, const float* b, int64_t n) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchAdd(out, a, b, n, stream_));
}

void CudaBackend::ReluForward(float* out, const float* x, int64_t n) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchReluForward(out, x, n, stream_));
}

void CudaBackend::ReluBackward(float* dx, const float* dout, const float* out,
                               int64_t n) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchReluBackward(dx, dout, out, n, stream_));
}

// Row-major out [batch, O] = inp [batch, I] . weight [O, I]^T is, read
// column-major, out^T [O, batch] = weight^T . inp^T: A = weight stored
// I x O (transposed), B = inp stored I x batch.
void CudaBackend::LinearForward(float* out, const float* inp,
                                const float* weight, const float* bias,
                                int64_t batch, int64_t in,
                                int64_t out_features) {
  UseDevice();
  cuda::LtGemmArgs g;
  g.trans_a = true;
  g.m = out_features;
  g.n = batch;
  g.k = in;
  g.a = weight;
  g.lda = in;
  g.b = inp;
  g.ldb = in;
  g.c = out;
  g.ldc = out_features;
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
    YARD_CUDA_LAUNCH(
        cuda::LaunchBroadcastRows(out, bias, batch, out_features, stream_));
    g.beta = 1.f;
  }
  Launched(InOp("LinearForward", gemm_->Run(g)));
}

// Column-major: dinp^T [I, batch] = weight^T [I, O] . dout^T [O, batch]
// (weight stored I x O, as is), and dweight^T [I, O] += inp^T [I, batch] .
// dout [batch, O] (dout^T stored O x batch, transposed).
void CudaBackend::LinearBackward(float* dinp, float* dweight, float* dbias,
                                 const float* dout, const float* inp,
                                 const float* weight, int64_t batch, int64_t in,
                                 int64_t out_features) {
  UseDevice();
  if (dinp != nullptr) {
    cuda::LtGemmArgs g;
    g.m = in;
    g.n = batch;
    g.k = out_features;
    g.a = weight;
    g.lda = in;
    g.b = dout;
    g.ldb = out_features;
    g.c = dinp;
    g.ldc = in;
    Launched(InOp("LinearBackward (input)", gemm_->Run(g)));
  }
  cuda::LtGemmArgs g;
  g.trans_b = true;
  g.m = in;
  g.n = out_features;
  g.k = batch;
  g.a = inp;
  g.lda = in;
  g.b = dout;
  g.ldb = out_features;
  g.c = dweight;
  g.ldc = in;
  g.beta = 1.f;
  Launched(InOp("LinearBackward (weight)", gemm_->Run(g)));
  if (dbias != nullptr) {
    YARD_CUDA_LAUNCH(
        cuda::LaunchBiasGrad(dbias, dout, batch, out_features, stream_));
  }
}

void CudaBackend::SoftmaxCrossEntropyForward(float* probs, float* losses,
                                             const float* logits,
                                             const int32_t* targets,
                                             int64_t batch, int64_t classes) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchSoftmaxCrossEntropyForward(
      probs, losses, logits, targets, batch, classes, stream_));
}

void CudaBackend::SoftmaxCrossEntropyBackward(float* dlogits,
                                              const float* probs,
                                              const int32_t* targets,
                                              float scale, int64_t batch,
                                              int64_t classes) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchSoftmaxCrossEntropyBackward(
      dlogits, probs, targets, scale, batch, classes, stream_));
}

void CudaBackend::AdamW(float* param, const float* grad, float* m, float* v,
                        int64_t n, const AdamWUpdate& u) {
  UseDevice();
  const cuda::AdamWStep step{u.lr,
                             u.beta1,
                             u.beta2,
                             u.eps,
                             u.weight_decay,
                             u.grad_scale,
                             u.bias_correction1,
                             u.bias_correction2};
  YARD_CUDA_LAUNCH(cuda::LaunchAdamW(param, grad, m, v, n, step, stream_));
}

void CudaBackend::EmbeddingForward(float* out, const int32_t* tokens,
                                   const float* wte, const float* wpe,
                                   int64_t batch, int64_t seq,
                                   int64_t channels) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchEmbeddingForward(out, tokens, wte, wpe, batch,
                                                seq, channels, stream_));
}

void CudaBackend::EmbeddingBackward(float* dwte, float* dwpe, const float* dout,
                                    const int32_t* tokens, int64_t batch,
                                    int64_t seq, int64_t channels) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchEmbeddingBackward(
      dwte, dwpe, dout, tokens, batch, seq, channels, stream_));
}

void CudaBackend::LayerNormForward(float* out, float* mean, float* rstd,
                                   const float* inp, const float* weight,
                                   const float* bias, int64_t rows,
                                   int64_t channels) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchLayerNormForward(out, mean, rstd, inp, weight,
                                                bias, rows, channels, stream_));
}

void CudaBackend::LayerNormBackward(float* dinp, float* dweight, float* dbias,
                                    const float* dout, const float* inp,
                                    const float* weight, const float* mean,
                                    const float* rstd, int64_t rows,
                                    int64_t channels) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchLayerNormBackward(dinp, dweight, dbias, dout,
                                                 inp, weight, mean, rstd, rows,
                                                 channels, stream_));
}

void CudaBackend::GeluForward(float* out, const float* x, int64_t n) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchGeluForward(out, x, n, stream_));
}

void CudaBackend::GeluBackward(float* dx, const float* x, const float* dout,
                               int64_t n) {
  UseDevice();
  YARD_CUDA_LAUNCH(cuda::LaunchGeluBackward(dx, x, dout, n, stream_));
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

void CudaBackend::AttentionForward(float* out, float* state, const float* qkv,
                                   int64_t batch, int64_t seq, int64_t channels,
                                   int64_t heads) {
  UseDevice();
  if (absl::Status s = CheckAttentionShape(channels, heads); !s.ok()) {
    Record(std::move(s));
    return;
  }
  YARD_CUDA_LAUNCH(cuda::LaunchAttentionForward(out, state, qkv, batch, seq,
                                                channels, heads, stream_));
}

void CudaBackend::AttentionBackward(float* dqkv, float* scratch,
                                    const float* dout, const float* out,
                                    const float* qkv, const float* state,
                                    int64_t batch, int64_t seq,
                                    int64_t channels, int64_t heads) {
  UseDevice();
  if (absl::Status s = CheckAttentionShape(channels, heads); !s.ok()) {
    Record(std::move(s));
    return;
  }
  YARD_CUDA_LAUNCH(cuda::LaunchAttentionBackward(dqkv, scratch, dout, out, qkv,
                                                 state, batch, seq, channels,
                                                 heads, stream_));
}

}  // namespace trainyard::engine
