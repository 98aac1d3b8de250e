// ProfilingBackend: a Backend that runs every call on another backend and,
// while enabled, times each op to the device's completion: it waits for
// the device before the op (so earlier work is not charged to it) and after
// it, and adds the wall time to the op's total. The waits cost a launch
// latency per op and serialize the host with the device, so a profiled step
// is slower than a plain one; the table says where the device's time goes,
// op by op, not how fast a step is (the benchmark times plain steps for
// that). Disabled, it forwards calls and adds nothing but a branch. The
// linear layers' ops are timed by shape ("LinearForward 768x2304").
// Results are bitwise those of the wrapped backend: every call is the
// wrapped backend's own, fused ops included.
//
// Thread-safety: as any Backend (one training loop; calls must not
// overlap).
#ifndef TRAINYARD_ENGINE_CORE_PROFILING_BACKEND_H_
#define TRAINYARD_ENGINE_CORE_PROFILING_BACKEND_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/backend.h"

namespace trainyard::engine {

// One op's totals over the profiled calls.
struct OpTime {
  std::string op;
  int64_t calls = 0;
  double seconds = 0;
};

class ProfilingBackend : public Backend {
 public:
  explicit ProfilingBackend(std::unique_ptr<Backend> inner);

  Backend& inner() { return *inner_; }
  // Starts or stops timing; totals are kept across periods until Reset.
  void set_enabled(bool enabled) { enabled_ = enabled; }
  void Reset() { totals_.clear(); }
  // Every op called while enabled, most time first (ties by name).
  std::vector<OpTime> Profile() const;

  absl::string_view name() const override { return inner_->name(); }
  int threads() const override { return inner_->threads(); }
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(
      int64_t bytes) override {
    return inner_->Allocate(bytes);
  }
  int64_t peak_allocated_bytes() const override {
    return inner_->peak_allocated_bytes();
  }
  void CopyToDevice(void* dst, const void* src, int64_t bytes) override;
  void CopyToHost(void* dst, const void* src, int64_t bytes) override;
  // The first error of the wrapped backend since the last call, including
  // one its timing waits saw first.
  absl::Status Synchronize() override;
  DType activation_dtype() const override { return inner_->activation_dtype(); }
  AttentionState attention_state() const override {
    return inner_->attention_state();
  }

  void Fill(float* x, int64_t n, float value) override;
  void FillActivations(void* x, int64_t n, float value) override;
  void CastToActivations(void* dst, const float* src, int64_t n) override;
  void Scale(float* x, int64_t n, float s) override;
  double SumSquares(const float* x, int64_t n) override;
  std::vector<double> SumSquaresEach(
      std::span<const FloatTensor> tensors) override;
  void LinearForward(void* out, const void* inp, const void* weight,
                     const void* bias, int64_t batch, int64_t in,
                     int64_t out_features) override;
  void LinearGeluForward(void* out, void* pre, const void* inp,
                         const void* weight, const void* bias, int64_t batch,
                         int64_t in, int64_t out_features) override;
  void LinearBackwardThroughGelu(void* dpre, float* dweight, float* dbias,
                                 const void* dout, const void* inp,
                                 const void* weight, const void* pre,
                                 int64_t batch, int64_t in,
                                 int64_t out_features) override;
  void LinearBackward(void* dinp, float* dweight, float* dbias,
                      const void* dout, const void* inp, const void* weight,
                      int64_t batch, int64_t in, int64_t out_features) override;
  void ReluForward(void* out, const void* x, int64_t n) override;
  void ReluBackward(void* dx, const void* dout, const void* out,
                    int64_t n) override;
  void SoftmaxCrossEntropyForward(float* losses, int32_t* hits, float* lse,
                                  const void* logits, const int32_t* targets,
                                  int64_t batch, int64_t classes) override;
  void SoftmaxCrossEntropyBackward(void* dlogits, const void* logits,
                                   const float* lse, const int32_t* targets,
                                   float scale, int64_t batch,
                                   int64_t classes) override;
  void SoftmaxCrossEntropyForwardBackward(float* losses, int32_t* hits,
                                          float* lse, void* logits,
                                          const int32_t* targets, float scale,
                                          int64_t batch,
                                          int64_t classes) override;
  void AdamW(float* param, const float* grad, float* m, float* v, void* working,
             int64_t n, const AdamWUpdate& update) override;
  void AdamWEach(std::span<const AdamWTensor> tensors,
                 const AdamWUpdate& update) override;
  void Add(void* out, const void* a, const void* b, int64_t n) override;
  void EmbeddingForward(void* out, const int32_t* tokens, const void* wte,
                        const void* wpe, int64_t batch, int64_t seq,
                        int64_t channels) override;
  void EmbeddingBackward(float* dwte, float* dwpe, const void* dout,
                         const int32_t* tokens, int64_t batch, int64_t seq,
                         int64_t channels) override;
  void LayerNormForward(void* out, float* mean, float* rstd, const void* inp,
                        const void* weight, const void* bias, int64_t rows,
                        int64_t channels) override;
  void AddLayerNormForward(void* res, void* out, float* mean, float* rstd,
                           const void* a, const void* b, const void* weight,
                           const void* bias, int64_t rows,
                           int64_t channels) override;
  void LayerNormBackward(void* dinp, float* dweight, float* dbias,
                         float* dinp_sums, const void* dout, const void* inp,
                         const void* weight, const float* mean,
                         const float* rstd, int64_t rows,
                         int64_t channels) override;
  void GeluForward(void* out, const void* x, int64_t n) override;
  void GeluBackward(void* dx, const void* x, const void* dout,
                    int64_t n) override;
  void AttentionForward(void* out, float* state, const void* qkv, int64_t batch,
                        int64_t seq, int64_t channels, int64_t heads) override;
  void AttentionBackward(void* dqkv, float* scratch, const void* dout,
                         const void* out, const void* qkv, const float* state,
                         int64_t batch, int64_t seq, int64_t channels,
                         int64_t heads) override;

 private:
  // Runs `call` (a call on inner_), timed under `op` when enabled.
  template <typename Call>
  auto Timed(const char* op, Call&& call);
  // The same under `op` and a shape, "LinearForward 768x2304" (inputs x
  // outputs): the linear layers' calls, which differ in cost by shape, are
  // told apart by it.
  template <typename Call>
  auto Timed(const char* op, int64_t in, int64_t out, Call&& call);
  // Timed's work: the name from `name()`, made only when enabled.
  template <typename Name, typename Call>
  auto TimedAs(const Name& name, Call&& call);
  // Waits for the device; keeps the first error for Synchronize.
  void Wait();

  std::unique_ptr<Backend> inner_;
  bool enabled_ = false;
  absl::Status pending_;  // an error a timing wait took from inner_
  std::map<std::string, OpTime> totals_;
};

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_PROFILING_BACKEND_H_
