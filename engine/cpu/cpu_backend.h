// CpuBackend: the fp32 reference implementation of Backend, the oracle the
// CUDA backend is checked against. It also runs bf16 mixed precision
// (CpuBackendOptions::activation_dtype): activations and working weights
// stored as bf16, each op widening its bf16 inputs to fp32, running the
// fp32 op, and rounding its outputs to nearest even once
// (activation_ops.cc). That is slow but exercises the bf16 plumbing of the
// models, trainer, checkpoints and memory estimate without a GPU. Plain loops
// and our own blocked GEMM, parallelized over `threads` with a ThreadPool.
// Every op splits work only along outputs and sums in a fixed order, so results
// are bitwise identical for any thread count. Its threads flush denormal
// floats to zero (denormals.h): the thread that creates the backend, which
// runs its training loop, and the pool's.
//
// Thread-safety: as Backend (one training loop at a time).
#ifndef TRAINYARD_ENGINE_CPU_CPU_BACKEND_H_
#define TRAINYARD_ENGINE_CPU_CPU_BACKEND_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/backend.h"
#include "engine/cpu/thread_pool.h"

namespace trainyard::engine {

struct CpuBackendOptions {
  int threads = 1;
  // Allocation cap; 0 = unlimited. Beyond it Allocate is RESOURCE_EXHAUSTED.
  int64_t memory_limit_bytes = 0;
  // fp32, or bf16 mixed precision (see above).
  DType activation_dtype = DType::kF32;
};

class CpuBackend : public Backend {
 public:
  // INVALID_ARGUMENT unless 1 <= threads <= 1024.
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(
      const CpuBackendOptions& options);

  absl::string_view name() const override { return "cpu"; }
  int threads() const override { return pool_.threads(); }

  absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(
      int64_t bytes) override;
  int64_t peak_allocated_bytes() const override { return peak_bytes_; }
  void CopyToDevice(void* dst, const void* src, int64_t bytes) override;
  void CopyToHost(void* dst, const void* src, int64_t bytes) override;
  absl::Status Synchronize() override { return absl::OkStatus(); }

  void Fill(float* x, int64_t n, float value) override;
  void Scale(float* x, int64_t n, float s) override;
  double SumSquares(const float* x, int64_t n) override;

  // ---- The fp32 ops, every pointer fp32: the reference itself.
  void LinearForward(float* out, const float* inp, const float* weight,
                     const float* bias, int64_t batch, int64_t in,
                     int64_t out_features);
  void LinearBackward(float* dinp, float* dweight, float* dbias,
                      const float* dout, const float* inp, const float* weight,
                      int64_t batch, int64_t in, int64_t out_features);
  void ReluForward(float* out, const float* x, int64_t n);
  void ReluBackward(float* dx, const float* dout, const float* out, int64_t n);
  void SoftmaxCrossEntropyForward(float* losses, int32_t* hits, float* lse,
                                  const float* logits, const int32_t* targets,
                                  int64_t batch, int64_t classes);
  void SoftmaxCrossEntropyBackward(float* dlogits, const float* logits,
                                   const float* lse, const int32_t* targets,
                                   float scale, int64_t batch, int64_t classes);
  void AdamW(float* param, const float* grad, float* m, float* v, int64_t n,
             const AdamWUpdate& update);

  // GPT ops; each family in its own file (embedding.cc, layernorm.cc,
  // gelu.cc, attention.cc).
  void Add(float* out, const float* a, const float* b, int64_t n);
  void EmbeddingForward(float* out, const int32_t* tokens, const float* wte,
                        const float* wpe, int64_t batch, int64_t seq,
                        int64_t channels);
  void EmbeddingBackward(float* dwte, float* dwpe, const float* dout,
                         const int32_t* tokens, int64_t batch, int64_t seq,
                         int64_t channels);
  void LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                        const float* weight, const float* bias, int64_t rows,
                        int64_t channels);
  void LayerNormBackward(float* dinp, float* dweight, float* dbias,
                         float* dinp_sums, const float* dout, const float* inp,
                         const float* weight, const float* mean,
                         const float* rstd, int64_t rows, int64_t channels);
  void GeluForward(float* out, const float* x, int64_t n);
  void GeluBackward(float* dx, const float* x, const float* dout, int64_t n);
  // Keeps the probabilities: the backward is three plain matrix products.
  AttentionState attention_state() const override {
    return AttentionState::kProbabilities;
  }
  void AttentionForward(float* out, float* att, const float* qkv, int64_t batch,
                        int64_t seq, int64_t channels, int64_t heads);
  void AttentionBackward(float* dqkv, float* scratch, const float* dout,
                         const float* out, const float* qkv, const float* att,
                         int64_t batch, int64_t seq, int64_t channels,
                         int64_t heads);

  // ---- Backend overrides (activation_ops.cc): in fp32 they cast and call
  // the fp32 ops above, unchanged; in bf16 they widen, call, and round.
  DType activation_dtype() const override { return options_.activation_dtype; }
  void FillActivations(void* x, int64_t n, float value) override;
  void CastToActivations(void* dst, const float* src, int64_t n) override;
  void LinearForward(void* out, const void* inp, const void* weight,
                     const void* bias, int64_t batch, int64_t in,
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
  void AdamW(float* param, const float* grad, float* m, float* v, void* working,
             int64_t n, const AdamWUpdate& update) override;
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
  void LayerNormBackward(void* dinp, float* dweight, float* dbias,
                         float* dinp_sums, const void* dout, const void* inp,
                         const void* weight, const float* mean,
                         const float* rstd, int64_t rows,
                         int64_t channels) override;
  void GeluForward(void* out, const void* x, int64_t n) override;
  void GeluBackward(void* dx, const void* x, const void* dout,
                    int64_t n) override;
  void AttentionForward(void* out, float* att, const void* qkv, int64_t batch,
                        int64_t seq, int64_t channels, int64_t heads) override;
  void AttentionBackward(void* dqkv, float* scratch, const void* dout,
                         const void* out, const void* qkv, const float* att,
                         int64_t batch, int64_t seq, int64_t channels,
                         int64_t heads) override;

 private:
  friend class CpuBuffer;
  explicit CpuBackend(const CpuBackendOptions& options);
  // fn(begin, end) over [0, n) in chunks; serial for small n.
  void ForChunks(int64_t n, const std::function<void(int64_t, int64_t)>& fn);
  // fn(begin, end) over [0, n) in ranges of `grain`; serial when one range
  // or one thread. Ops keep every output's summation order independent of
  // the ranges, so the grain never changes results.
  void ForRange(int64_t n, int64_t grain,
                const std::function<void(int64_t, int64_t)>& fn);
  // out[c] += the sum over rows of x[r, c] (x [rows, cols]), rows in order:
  // the bias gradients.
  void AddColumnSums(float* out, const float* x, int64_t rows, int64_t cols);

  const CpuBackendOptions options_;
  bool bf16() const { return options_.activation_dtype == DType::kBF16; }

  ThreadPool pool_;
  int64_t allocated_bytes_ = 0;
  int64_t peak_bytes_ = 0;
};

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CPU_CPU_BACKEND_H_
