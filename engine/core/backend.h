// Backend: the device and the ops every model is written against, so a model
// runs unchanged on the CPU reference backend (engine/cpu) and on the CUDA
// backend (engine/cuda). Each op is one explicit forward or backward
// function, as in llm.c; there is no autograd.
//
// Conventions: tensors are row-major in device memory (pointers from
// DeviceBuffer); a linear layer's weight is [out, in] and its bias [out].
//
// Precision: two kinds of tensor. Activations, their gradients and the
// working copy of the weights the ops read are stored as the backend's
// activation_dtype() (fp32, or bf16 for mixed precision); ops take them as
// void pointers. Everything else is fp32 (float pointers): master weights,
// weight gradients, AdamW moments, LayerNorm statistics, attention state and
// scratch, probabilities and losses. Ops always compute in fp32 and round
// once on store (to nearest even, for bf16).
// Ops may run asynchronously on the device; they return nothing, and
// Synchronize() reports the first error since the last call, so a training
// loop checks once per step instead of after every launch.
//
// Determinism contract: for the same inputs every op returns bitwise the same
// result on every call, whatever the backend's thread count.
//
// Thread-safety: a Backend serves one training loop; calls must not overlap.
#ifndef TRAINYARD_ENGINE_CORE_BACKEND_H_
#define TRAINYARD_ENGINE_CORE_BACKEND_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/bf16.h"

namespace trainyard::engine {

// How activations are stored (see Precision above).
enum class DType { kF32, kBF16 };
inline int64_t DTypeBytes(DType t) { return t == DType::kBF16 ? 2 : 4; }
inline const char* DTypeName(DType t) {
  return t == DType::kBF16 ? "bf16" : "fp32";
}

// A block of device memory, zero-filled at allocation. Freed on destruction.
class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  virtual void* data() = 0;
  virtual int64_t bytes() const = 0;
  float* f32() { return static_cast<float*>(data()); }
  int32_t* i32() { return static_cast<int32_t*>(data()); }
};

// One AdamW update, with bias corrections precomputed on the host.
//   g = grad * grad_scale
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   p -= lr * (m / bias_correction1 / (sqrt(v / bias_correction2) + eps)
//              + weight_decay * p)
struct AdamWUpdate {
  float lr = 0;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0;
  float grad_scale = 1;
  float bias_correction1 = 1;  // 1 - beta1^t
  float bias_correction2 = 1;  // 1 - beta2^t
};

// What AttentionForward saves for AttentionBackward. A backend picks one;
// the model sizes its buffers from it (AttentionBufferFloats).
enum class AttentionState {
  // The probabilities [B, NH, T, T], zero above the diagonal; the backward's
  // scratch is as large. Plain matrix products (the CPU reference).
  kProbabilities,
  // Each query row's log-sum-exp of its scaled scores [B, NH, T]; the
  // backward's scratch is as large. The backward recomputes probabilities
  // tile by tile (flash attention), so no T x T matrix is ever stored.
  kLogSumExp,
  // As kLogSumExp, for a backward whose scratch also holds fp32 sums of dQ
  // [B, T, C] and a counter per block of query rows (at most one a row):
  // one that adds dQ across key blocks in a fixed order (the CUDA
  // backend's ordered backward, attention_tc_kernels.h).
  kLogSumExpWithDqSums,
};

// Floats of AttentionForward's state and AttentionBackward's scratch for B
// sequences of T tokens of C channels in NH heads. Linear in B.
struct AttentionFloats {
  int64_t state = 0;
  int64_t scratch = 0;
};
inline AttentionFloats AttentionBufferFloats(AttentionState kind, int64_t batch,
                                             int64_t seq, int64_t channels,
                                             int64_t heads) {
  const int64_t rows = batch * heads * seq;
  switch (kind) {
    case AttentionState::kProbabilities:
      return {rows * seq, rows * seq};
    case AttentionState::kLogSumExp:
      break;
    case AttentionState::kLogSumExpWithDqSums:
      // delta and the counters, each padded to 16 bytes (at most 3 floats;
      // 4 a sequence keeps the count linear in B), then the sums.
      return {rows, 2 * (rows + 4 * batch) + batch * seq * channels};
  }
  return {rows, rows};
}

// The epsilon of every LayerNorm (GPT-2's layer_norm_epsilon).
inline constexpr double kLayerNormEpsilon = 1e-5;

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu", "cuda": reported in TrainStarted.
  virtual absl::string_view name() const = 0;
  // Parallel workers the backend uses (CPU threads; 1 for a GPU stream).
  virtual int threads() const = 0;

  // Memory. Allocate returns zero-filled memory or RESOURCE_EXHAUSTED.
  virtual absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(
      int64_t bytes) = 0;
  // High-water mark of bytes allocated through this backend.
  virtual int64_t peak_allocated_bytes() const = 0;
  virtual void CopyToDevice(void* dst, const void* src, int64_t bytes) = 0;
  virtual void CopyToHost(void* dst, const void* src, int64_t bytes) = 0;
  // Waits for queued work; returns the first error raised since last call.
  virtual absl::Status Synchronize() = 0;

  // The storage of activations, activation gradients and working weights.
  virtual DType activation_dtype() const = 0;

  virtual void Fill(float* x, int64_t n, float value) = 0;
  // x[i] = value for an activation tensor of n elements.
  virtual void FillActivations(void* x, int64_t n, float value) = 0;
  // dst (activation dtype) = src (fp32), rounded to nearest even: the
  // working copy of master weights.
  virtual void CastToActivations(void* dst, const float* src, int64_t n) = 0;
  // x *= s
  virtual void Scale(float* x, int64_t n, float s) = 0;
  // Sum of squares in double precision, summed in an order fixed by n alone.
  virtual double SumSquares(const float* x, int64_t n) = 0;
  // An fp32 tensor of n elements.
  struct FloatTensor {
    const float* data;
    int64_t n;
  };
  // SumSquares of each tensor, in order, each summed exactly as SumSquares
  // sums it. SumSquares returns to the host, so this default waits for the
  // device once per tensor; the CUDA backend waits once per batch.
  virtual std::vector<double> SumSquaresEach(
      std::span<const FloatTensor> tensors) {
    std::vector<double> sums;
    sums.reserve(tensors.size());
    for (const FloatTensor& t : tensors)
      sums.push_back(SumSquares(t.data, t.n));
    return sums;
  }

  // out[b, o] = sum_i inp[b, i] * weight[o, i] + bias[o]  (bias may be null)
  virtual void LinearForward(void* out, const void* inp, const void* weight,
                             const void* bias, int64_t batch, int64_t in,
                             int64_t out_features) = 0;
  // out = gelu(inp . weight^T + bias), keeping the pre-activation in `pre`
  // (what GeluBackward needs): LinearForward into `pre`, then GeluForward,
  // unless a backend fuses the two (CUDA in bf16: cuBLASLt's GELU epilogue,
  // which saves writing and reading back the pre-activation).
  virtual void LinearGeluForward(void* out, void* pre, const void* inp,
                                 const void* weight, const void* bias,
                                 int64_t batch, int64_t in,
                                 int64_t out_features) {
    LinearForward(pre, inp, weight, bias, batch, in, out_features);
    GeluForward(out, pre, batch * out_features);
  }
  // LinearBackward for a layer whose input came out of a GELU, inp =
  // gelu(pre): the input gradient goes straight through the GELU, dpre =
  // (dout . weight) * gelu'(pre) (overwritten); dweight and dbias as
  // LinearBackward. LinearBackward then GeluBackward, unless a backend fuses
  // them (CUDA in bf16: cuBLASLt's DGELU epilogue).
  virtual void LinearBackwardThroughGelu(void* dpre, float* dweight,
                                         float* dbias, const void* dout,
                                         const void* inp, const void* weight,
                                         const void* pre, int64_t batch,
                                         int64_t in, int64_t out_features) {
    LinearBackward(dpre, dweight, dbias, dout, inp, weight, batch, in,
                   out_features);
    GeluBackward(dpre, pre, dpre, batch * in);
  }
  // dinp = dout . weight (overwritten; skipped when null);
  // dweight += dout^T . inp and dbias += column sums of dout (accumulated, so
  // micro-batches add up; dbias may be null).
  virtual void LinearBackward(void* dinp, float* dweight, float* dbias,
                              const void* dout, const void* inp,
                              const void* weight, int64_t batch, int64_t in,
                              int64_t out_features) = 0;

  // out = max(x, 0); may run in place.
  virtual void ReluForward(void* out, const void* x, int64_t n) = 0;
  // dx = dout where out > 0, else 0; may run in place (dx == dout).
  virtual void ReluBackward(void* dx, const void* dout, const void* out,
                            int64_t n) = 0;

  // The fused classifier. Each row's cross-entropy -log p[target] of the
  // softmax p of logits [batch, classes] into losses [batch], in
  // log-sum-exp form (exact even where p[target] underflows). The softmax
  // itself is never stored. In the same read, hits[row] (unless hits is
  // null) = 1 when the row's largest logit (the first, on ties) is at the
  // target, else 0 (accuracy without another pass over the logits;
  // unspecified for NaN rows), and lse[row] (unless lse is null) = the
  // row's log-sum-exp, log sum_c exp(logit[c]), for the backward.
  // REQUIRES: every target in [0, classes).
  virtual void SoftmaxCrossEntropyForward(float* losses, int32_t* hits,
                                          float* lse, const void* logits,
                                          const int32_t* targets, int64_t batch,
                                          int64_t classes) = 0;
  // dlogits = (softmax(logits) - onehot(target)) * scale (overwritten), the
  // softmax exp(logit - lse[row]) from the forward's lse, or recomputed
  // from the logits when lse is null (another pass over them). May run in
  // place (dlogits == logits), so the gradient takes the logits' memory
  // and no [batch, classes] buffer beyond the logits exists.
  virtual void SoftmaxCrossEntropyBackward(void* dlogits, const void* logits,
                                           const float* lse,
                                           const int32_t* targets, float scale,
                                           int64_t batch, int64_t classes) = 0;
  // SoftmaxCrossEntropyForward, then SoftmaxCrossEntropyBackward in place
  // from the lse it wrote: losses, hits and lse as the forward writes them,
  // and `logits` overwritten by their gradient times `scale`, the same bits
  // as the two ops. A backend may do both in one pass over the logits (the
  // CUDA backend does); this default calls the two. A backend wrapping
  // another forwards it, so the inner one's fusion is kept.
  virtual void SoftmaxCrossEntropyForwardBackward(float* losses, int32_t* hits,
                                                  float* lse, void* logits,
                                                  const int32_t* targets,
                                                  float scale, int64_t batch,
                                                  int64_t classes) {
    SoftmaxCrossEntropyForward(losses, hits, lse, logits, targets, batch,
                               classes);
    SoftmaxCrossEntropyBackward(logits, logits, lse, targets, scale, batch,
                                classes);
  }

  // Updates the fp32 master `param` and, unless null, writes its rounded
  // copy into `working` (activation dtype) in the same pass.
  virtual void AdamW(float* param, const float* grad, float* m, float* v,
                     void* working, int64_t n, const AdamWUpdate& update) = 0;
  // One parameter tensor of an optimizer step, with its own weight decay
  // (AdamWEach ignores update.weight_decay).
  struct AdamWTensor {
    float* param;
    const float* grad;
    float* m;
    float* v;
    void* working;
    int64_t n;
    float weight_decay;
  };
  // AdamW on each tensor, bitwise as one call per tensor. The default makes
  // those calls; the CUDA backend updates 64 tensors a launch.
  virtual void AdamWEach(std::span<const AdamWTensor> tensors,
                         const AdamWUpdate& update) {
    for (const AdamWTensor& t : tensors) {
      AdamWUpdate u = update;
      u.weight_decay = t.weight_decay;
      AdamW(t.param, t.grad, t.m, t.v, t.working, t.n, u);
    }
  }

  // ---- GPT ops. Shapes: B sequences of T tokens, C channels, NH heads.

  // out = a + b; may run in place (out == a or out == b).
  virtual void Add(void* out, const void* a, const void* b, int64_t n) = 0;

  // out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :].
  // REQUIRES: every token in [0, rows of wte), T <= rows of wpe.
  virtual void EmbeddingForward(void* out, const int32_t* tokens,
                                const void* wte, const void* wpe, int64_t batch,
                                int64_t seq, int64_t channels) = 0;
  // dwte[tokens[b, t], :] += dout[b, t, :]; dwpe[t, :] += dout[b, t, :]
  // (accumulated, summed over b, t in ascending order).
  virtual void EmbeddingBackward(float* dwte, float* dwpe, const void* dout,
                                 const int32_t* tokens, int64_t batch,
                                 int64_t seq, int64_t channels) = 0;

  // Per row of inp [rows, C]: out = (x - mean) * rstd * weight + bias with
  // rstd = 1 / sqrt(var + kLayerNormEpsilon); saves mean and rstd [rows]
  // for backward.
  virtual void LayerNormForward(void* out, float* mean, float* rstd,
                                const void* inp, const void* weight,
                                const void* bias, int64_t rows,
                                int64_t channels) = 0;
  // res = a + b (as Add), then LayerNormForward of res into out, mean and
  // rstd: the residual add and the next LayerNorm, which a backend may fuse
  // into one pass (CUDA does).
  virtual void AddLayerNormForward(void* res, void* out, float* mean,
                                   float* rstd, const void* a, const void* b,
                                   const void* weight, const void* bias,
                                   int64_t rows, int64_t channels) {
    Add(res, a, b, rows * channels);
    LayerNormForward(out, mean, rstd, res, weight, bias, rows, channels);
  }
  // dinp += ..., dweight += ..., dbias += ... (all accumulated: dinp is the
  // residual stream's gradient, which several ops add into). When dinp_sums
  // is not null, dinp_sums += the column sums of dinp as left (as stored):
  // the bias gradient of the linear layer whose output feeds the residual,
  // taken while the backend has each row at hand instead of in a second
  // read of dinp by LinearBackward.
  virtual void LayerNormBackward(void* dinp, float* dweight, float* dbias,
                                 float* dinp_sums, const void* dout,
                                 const void* inp, const void* weight,
                                 const float* mean, const float* rstd,
                                 int64_t rows, int64_t channels) = 0;

  // GELU, tanh approximation (GPT-2's): out = 0.5 x (1 + tanh(sqrt(2/pi)
  // (x + 0.044715 x^3))).
  virtual void GeluForward(void* out, const void* x, int64_t n) = 0;
  // dx = gelu'(x) * dout (overwritten); may run in place (dx == dout).
  virtual void GeluBackward(void* dx, const void* x, const void* dout,
                            int64_t n) = 0;

  // How this backend's attention keeps what its backward needs; fixes the
  // sizes of the `state` and `scratch` buffers of the two ops below.
  virtual AttentionState attention_state() const = 0;

  // Causal multi-head self-attention. qkv [B, T, 3C] holds q, k and v side
  // by side, each split into NH heads of C / NH channels; out [B, T, C] is
  // the heads' outputs side by side; `state` receives what the backward
  // needs, as attention_state() says (AttentionBufferFloats(...).state
  // floats).
  virtual void AttentionForward(void* out, float* state, const void* qkv,
                                int64_t batch, int64_t seq, int64_t channels,
                                int64_t heads) = 0;
  // dqkv [B, T, 3C] (overwritten) from dout [B, T, C], given the forward's
  // input, output and state. `scratch` (AttentionBufferFloats(...).scratch
  // floats) is clobbered.
  virtual void AttentionBackward(void* dqkv, float* scratch, const void* dout,
                                 const void* out, const void* qkv,
                                 const float* state, int64_t batch, int64_t seq,
                                 int64_t channels, int64_t heads) = 0;
};

// n activations at `src` (backend memory) copied to the host as floats,
// widened from bf16 when that is the backend's activation dtype.
inline std::vector<float> ActivationsToHost(Backend& backend, const void* src,
                                            int64_t n) {
  std::vector<float> out(n);
  if (backend.activation_dtype() == DType::kF32) {
    backend.CopyToHost(out.data(), src, n * 4);
  } else {
    std::vector<uint16_t> bf(n);
    backend.CopyToHost(bf.data(), src, n * 2);
    Bf16ToFloats(bf.data(), n, out.data());
  }
  return out;
}

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_BACKEND_H_
