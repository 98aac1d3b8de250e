// Backend: the device and the ops every model is written against, so a model
// runs unchanged on the CPU reference backend (engine/cpu) and on the CUDA
// backend (engine/cuda). Each op is one explicit forward or backward
// function, as in llm.c; there is no autograd.
//
// Conventions: tensors are row-major fp32 in device memory (pointers from
// DeviceBuffer); a linear layer's weight is [out, in] and its bias [out].
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

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainyard::engine {

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

  virtual void Fill(float* x, int64_t n, float value) = 0;
  // x *= s
  virtual void Scale(float* x, int64_t n, float s) = 0;
  // Sum of squares in double precision, summed in an order fixed by n alone.
  virtual double SumSquares(const float* x, int64_t n) = 0;

  // out[b, o] = sum_i inp[b, i] * weight[o, i] + bias[o]  (bias may be null)
  virtual void LinearForward(float* out, const float* inp, const float* weight,
                             const float* bias, int64_t batch, int64_t in,
                             int64_t out_features) = 0;
  // dinp = dout . weight (overwritten; skipped when null);
  // dweight += dout^T . inp and dbias += column sums of dout (accumulated, so
  // micro-batches add up; dbias may be null).
  virtual void LinearBackward(float* dinp, float* dweight, float* dbias,
                              const float* dout, const float* inp,
                              const float* weight, int64_t batch, int64_t in,
                              int64_t out_features) = 0;

  // out = max(x, 0); may run in place.
  virtual void ReluForward(float* out, const float* x, int64_t n) = 0;
  // dx = dout where out > 0, else 0; may run in place (dx == dout).
  virtual void ReluBackward(float* dx, const float* dout, const float* out,
                            int64_t n) = 0;

  // Row-wise softmax of logits [batch, classes] into probs, and each row's
  // cross-entropy -log p[target] into losses [batch].
  // REQUIRES: every target in [0, classes).
  virtual void SoftmaxCrossEntropyForward(float* probs, float* losses,
                                          const float* logits,
                                          const int32_t* targets, int64_t batch,
                                          int64_t classes) = 0;
  // dlogits = (probs - onehot(target)) * scale  (overwritten).
  virtual void SoftmaxCrossEntropyBackward(float* dlogits, const float* probs,
                                           const int32_t* targets, float scale,
                                           int64_t batch, int64_t classes) = 0;

  virtual void AdamW(float* param, const float* grad, float* m, float* v,
                     int64_t n, const AdamWUpdate& update) = 0;
};

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_BACKEND_H_
