// CudaBackend: the Backend on one NVIDIA GPU, fp32 or bf16 mixed precision
// (CudaBackendOptions::activation_dtype). Products are cuBLASLt GEMMs with
// fp32 accumulation (CUBLAS_COMPUTE_32F, no TF32): fp32 x fp32 in fp32
// mode; bf16 x bf16 in bf16 mode, writing bf16 activations, or fp32 weight
// gradients accumulated in place. Everything else is our own kernels, one
// family per *_kernels.cu file, templated on the activation type with fp32
// math inside (act_type.cuh). All work is queued on one stream; ops
// return at once and the first launch or library error is kept, with its
// file:line, for Synchronize() to report. CopyToHost, CopyToDevice and
// SumSquares wait for the stream, since their callers use the host side at
// once; SumSquaresEach waits once for thousands of tensors and launches
// two kernels per 64 of them (the gradient norm: one wait a step, not one
// per parameter tensor).
//
// Memory: the backend takes the job's whole grant once, at creation, in a
// single cudaMalloc (the arena), and never asks the driver for more.
// Allocate hands out 256-byte-aligned blocks of it and fails with
// RESOURCE_EXHAUSTED, naming the bytes asked for and left, when the grant
// runs out. The arena's first kCudaWorkspaceBytes (memory_estimate.h) are
// the backend's own: cuBLASLt's workspace, the reductions' scratch and the
// embedding backward's sort keys, with
// the rest of that share left as slack for the blocks' rounding. So a job
// needs arena_bytes = EstimateGptMemory(...).allocated() + .workspace.
//
// Determinism: no op uses floating-point atomics or a launch shape that
// depends on the device; each GEMM shape runs one planned algorithm. Every
// op gives bitwise the same result on every call, and a resumed run (which
// allocates in the same order, so at the same offsets) matches a straight
// one.
//
// Thread-safety: as Backend (one training loop at a time). Each call makes
// the backend's device current on the calling thread first, so the loop
// may run on any thread. Buffers must be freed before their backend.
#ifndef TRAINYARD_ENGINE_CUDA_CUDA_BACKEND_H_
#define TRAINYARD_ENGINE_CUDA_CUDA_BACKEND_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/backend.h"
#include "engine/cuda/attention_tc_kernels.h"
#include "engine/cuda/device_arena.h"
#include "engine/cuda/lt_gemm.h"

namespace trainyard::engine {

// How the CUDA backend sums a linear layer's bias gradient, the output
// gradient's column sums over the batch. A speed setting: both are
// deterministic and agree to fp32 rounding, not bit for bit.
enum class BiasGradient {
  // Its own kernels (linear_kernels.h LaunchBiasGrad), a second read of
  // the output gradient after the weight gradient's product.
  kColumnSums,
  // cuBLASLt's bias-gradient epilogue (BGRADB) in the weight gradient's
  // product, which reads the output gradient anyway, into scratch and
  // then added to the gradient; the column-sum kernels where cuBLASLt has
  // no such algorithm.
  kEpilogue,
};

struct CudaBackendOptions {
  int device = 0;  // CUDA ordinal, after CUDA_VISIBLE_DEVICES
  // The job's whole device-memory grant, taken at creation. Must cover
  // kCudaWorkspaceBytes plus every buffer the job allocates.
  int64_t arena_bytes = 0;
  // Debugging: wait for the stream after every op, so an asynchronous fault
  // (an illegal address, say) is reported with the op that caused it rather
  // than at the next Synchronize. Slow.
  bool sync_after_each_op = false;
  // fp32, or bf16 activations and working weights (see backend.h).
  DType activation_dtype = DType::kF32;
  // The bf16 attention's tilings (attention_tc_kernels.h), the forward's
  // and the backward's (its query gradient's, and the key side's where it
  // names one), each one of kAttentionTcTilings; where the head size does
  // not take one, the default. All give the same bits on the emulation
  // (wgmma's agree to fp32 rounding on a GPU): a speed setting only.
  cuda::AttentionTcTiling attention_tiling;
  cuda::AttentionTcTiling attention_backward_tiling;
  // How the bf16 attention's backward splits its work
  // (attention_tc_kernels.h): two kernels, or one with dQ summed in
  // key-tile order, which takes more scratch (attention_state() says
  // which, and the model sizes it). A speed setting: the two agree to fp32
  // rounding, each the same in every run.
  cuda::AttentionTcBackward attention_backward =
      cuda::AttentionTcBackward::kTwoKernels;
  // cuBLASLt algorithm choices made ahead of time for some products, as
  // LtGemm::SetChoices reads them (bench/engine/gemm_bench.cc --choices
  // writes them); empty: the heuristic's first everywhere. A speed setting
  // that may change the bits (each choice sums in its own order), the same
  // in every run with the same choices.
  std::string gemm_choices;
  // Where the linear layers' bias gradients are summed (BiasGradient).
  BiasGradient bias_gradient = BiasGradient::kColumnSums;
};

// One of the attention kernels' tilings by its name
// (cuda::AttentionTcTilingName: "16x4", "32x4", "wgmma", ...);
// INVALID_ARGUMENT naming the text and the choices otherwise.
absl::StatusOr<cuda::AttentionTcTiling> ParseAttentionTiling(
    absl::string_view text);

// The forward's and the backward's tilings (YARD_ATTENTION_TILING): one
// name for both, or "FORWARD,BACKWARD" (e.g. "wgmma-swizzled,16x4");
// INVALID_ARGUMENT naming the part that is not a tiling.
struct AttentionTilings {
  cuda::AttentionTcTiling forward, backward;
};
absl::StatusOr<AttentionTilings> ParseAttentionTilings(absl::string_view text);
// What ParseAttentionTilings reads back as `tilings`: the one name where the
// two are the same, else "FORWARD,BACKWARD".
std::string AttentionTilingsText(const AttentionTilings& tilings);

// "column-sums" or "epilogue" as the bias gradient's way; INVALID_ARGUMENT
// naming the text and the choices otherwise.
absl::StatusOr<BiasGradient> ParseBiasGradient(absl::string_view text);

// "two-kernel" or "ordered-dq" as the attention backward's split;
// INVALID_ARGUMENT naming the text and the choices otherwise.
absl::StatusOr<cuda::AttentionTcBackward> ParseAttentionBackward(
    absl::string_view text);

// The AttentionState a backend with `backward` reports (and a memory
// estimate must size for).
AttentionState CudaAttentionState(cuda::AttentionTcBackward backward);

// INVALID_ARGUMENT for a bad device ordinal or an arena smaller than the
// backend's own workspace; UNAVAILABLE without a usable device or driver;
// RESOURCE_EXHAUSTED when the device cannot give the whole arena (the
// message names the bytes asked for and free).
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    const CudaBackendOptions& options);

class CudaBackend : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(
      const CudaBackendOptions& options);
  ~CudaBackend() override;

  absl::string_view name() const override { return "cuda"; }
  int threads() const override { return 1; }

  absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(
      int64_t bytes) override;
  int64_t peak_allocated_bytes() const override { return peak_bytes_; }
  // How many of the products planned so far took a choice from
  // CudaBackendOptions::gemm_choices.
  int gemm_choices_taken() const { return gemm_->choices_taken(); }

  // Choosing the linear layers' cuBLASLt algorithms by timing them in the
  // job (LtGemm::StartTuning): from StartGemmTuning on, the next run of
  // each product not timed yet that takes no choice of gemm_choices first
  // times its heuristic's first `candidates` (`reps` runs each, the
  // median) and keeps the fastest. Their runs add to the weight gradients: for
  // a pass whose results are thrown away (Trainer::RehearseStep).
  // FinishGemmTuning waits for the stream and returns the choices made (as
  // gemm_choices reads them) with their counts, or the first error of the
  // ops since.
  struct GemmTuning {
    std::string choices;
    int products = 0;
    int candidates = 0;  // runs timed, over all products
  };
  absl::Status StartGemmTuning(int candidates, int reps);
  absl::StatusOr<GemmTuning> FinishGemmTuning();

  // Choosing the bf16 attention's tilings by timing them in the job: from
  // StartAttentionTuning on, the next AttentionForward first runs the
  // forward in every tiling its head size takes (kAttentionTcTilings: once
  // to warm up, then `reps` runs, the median), and it and every later call
  // take the fastest; the next AttentionBackward does the same with the
  // backward's tilings (for the ordered backward, whose only choice is its
  // key side's: the first warpgroup tiling and the first other). The
  // candidates' runs write the call's outputs, which its own run then
  // writes again. FinishAttentionTuning waits for the stream and returns
  // the tilings taken from then on and each candidate's time, or the first
  // error of the ops since. Without the tensor-core kernels (fp32
  // activations, or a head size they do not take) nothing is timed.
  struct AttentionTuning {
    AttentionTilings tilings;  // taken from now on
    bool forward_timed = false;
    bool backward_timed = false;
    // A line a candidate, e.g. "forward 16x4: 1.234 ms".
    std::vector<std::string> timings;
  };
  absl::Status StartAttentionTuning(int reps);
  absl::StatusOr<AttentionTuning> FinishAttentionTuning();
  // The attention's tilings now: the options', or the ones timed fastest.
  const AttentionTilings& attention_tilings() const { return tilings_; }
  void CopyToDevice(void* dst, const void* src, int64_t bytes) override;
  void CopyToHost(void* dst, const void* src, int64_t bytes) override;
  absl::Status Synchronize() override;

  DType activation_dtype() const override { return options_.activation_dtype; }
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
  void LinearBackward(void* dinp, float* dweight, float* dbias,
                      const void* dout, const void* inp, const void* weight,
                      int64_t batch, int64_t in, int64_t out_features) override;
  void LinearBackwardThroughGelu(void* dpre, float* dweight, float* dbias,
                                 const void* dout, const void* inp,
                                 const void* weight, const void* pre,
                                 int64_t batch, int64_t in,
                                 int64_t out_features) override;
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
  // One kernel (classifier_kernels.h): the logits read twice, the second
  // time mostly from L2.
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
  // Flash attention: keeps one log-sum-exp per query row.
  AttentionState attention_state() const override {
    return CudaAttentionState(options_.attention_backward);
  }
  void AttentionForward(void* out, float* state, const void* qkv, int64_t batch,
                        int64_t seq, int64_t channels, int64_t heads) override;
  void AttentionBackward(void* dqkv, float* scratch, const void* dout,
                         const void* out, const void* qkv, const float* state,
                         int64_t batch, int64_t seq, int64_t channels,
                         int64_t heads) override;

  int device() const { return options_.device; }
  // The stream all ops are queued on: a collective on another stream
  // orders itself after this one with events (NcclCollective).
  cudaStream_t stream() const { return stream_; }
  // Arena bytes not yet handed out (the backend's own share excluded).
  int64_t arena_free_bytes() const { return arena_.free(); }

 private:
  friend class CudaBuffer;
  CudaBackend(const CudaBackendOptions& options, cudaStream_t stream,
              char* base);
  absl::Status Init();
  // Makes this backend's device current on the calling thread.
  void UseDevice();
  // Keeps the first failure until Synchronize reports it.
  void Record(absl::Status status);
  void RecordCuda(cudaError_t error, const char* expr, const char* file,
                  int line);
  // After an op's launches: records `launch` (the launcher's error) and,
  // with sync_after_each_op, what the stream says once the op has run.
  void Launched(cudaError_t launch, const char* expr, const char* file,
                int line);
  void Launched(absl::Status launch);
  void Release(int64_t offset, int64_t bytes);
  absl::Status CheckAttentionShape(int64_t channels, int64_t heads) const;
  bool bf16() const { return options_.activation_dtype == DType::kBF16; }
  cudaDataType_t act_type() const { return bf16() ? CUDA_R_16BF : CUDA_R_32F; }
  // LinearBackward's weight and bias gradients (accumulated).
  void WeightGrads(float* dweight, float* dbias, const void* dout,
                   const void* inp, int64_t batch, int64_t in,
                   int64_t out_features);

  const CudaBackendOptions options_;
  cudaStream_t stream_;
  char* base_;               // the arena (one cudaMalloc)
  char* blocks_;             // where Allocate's blocks start, after our share
  cuda::DeviceArena arena_;  // offsets from blocks_
  int choices_logged_ = 0;   // gemm_choices_taken() last logged
  double* sum_results_ = nullptr;   // kSumResults doubles
  double* sum_partials_ = nullptr;  // kSumPartials doubles, over
                                    // column_scratch_
  // The column sums' partials (bias and LayerNorm parameter gradients);
  // stream order keeps one op's use from overlapping the next's.
  float* column_scratch_ = nullptr;
  int64_t column_scratch_floats_ = 0;
  // The embedding backward's sort keys.
  uint64_t* sort_keys_ = nullptr;
  int64_t sort_key_capacity_ = 0;
  // While tuning (StartAttentionTuning) and not yet `*timed`, for bf16
  // attention with heads of `head_size` channels: times `launch(tiling)`
  // (a launcher's cudaError_t) in every tiling the kernels take there (for
  // the ordered backward, its two key sides), sets *timed, puts the fastest
  // in *tiling and a line each in attention_tuning_.timings under `what`.
  // Otherwise nothing.
  template <typename Launch>
  absl::Status TuneTiling(const char* what, int64_t head_size,
                          bool ordered_backward, bool* timed,
                          cuda::AttentionTcTiling* tiling,
                          const Launch& launch);

  std::unique_ptr<cuda::LtGemm> gemm_;
  AttentionTilings tilings_;  // the options', then as timed
  int attention_reps_ = 0;    // > 0 from StartAttentionTuning to Finish
  AttentionTuning attention_tuning_;
  absl::Status first_error_;
  int64_t allocated_bytes_ = 0;
  int64_t peak_bytes_ = 0;
};

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CUDA_CUDA_BACKEND_H_
