// LtGemm: matrix products through cuBLASLt on one stream, with fp32 or
// bf16 inputs (A and B alike) and an fp32 or bf16 output. Compute is always
// fp32 (CUBLAS_COMPUTE_32F: no TF32, no reduced-precision shortcuts; bf16
// products are exact in fp32 and summed in fp32), so results stay close to
// the CPU reference, and a bf16 output is rounded once. Each distinct problem
// (shape, transposes, leading dimensions, pointer alignments, epilogue) is
// planned once with cuBLASLt's heuristic and the plan reused, so a given
// problem always runs the same algorithm and gives bitwise the same
// result: the heuristic's first, unless a choice made ahead of time
// (SetChoices) or Choose picks another of its candidates
// (bench/engine/gemm_bench.cc times them). A product without a bias that
// cuBLASLt has no algorithm for (unusual pointer alignments, say) runs
// through classic cuBLAS SGEMM in pedantic fp32 instead, equally
// deterministic.
//
// Thread-safety: not thread-safe; the owning backend serializes calls.
#ifndef TRAINYARD_ENGINE_CUDA_LT_GEMM_H_
#define TRAINYARD_ENGINE_CUDA_LT_GEMM_H_

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainyard::engine::cuda {

// Column-major C[m, n] = op(A)[m, k] . op(B)[k, n] + beta C (+ bias[m] added
// to every column; bias has C's type). A is stored k x m when trans_a, else m x
// k (likewise B); C is written in place. Row-major callers pass their matrices
// as the transposes they are in column-major order.
struct LtGemmArgs {
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* c = nullptr;
  int64_t ldc = 0;
  float beta = 0;              // 0: C is not read
  const void* bias = nullptr;  // cuBLASLt's bias epilogue; may be null
  // cuBLASLt's bias-gradient epilogue (BGRADB): bias_grad[j] = the sum over
  // the k rows of op(B)'s column j, n elements of C's type, overwritten
  // (not summed into), whatever beta is. Takes neither a bias nor a GELU
  // epilogue (Run checks). May be null.
  void* bias_grad = nullptr;
  // cuBLASLt's GELU epilogues (GPT-2's tanh form, in fp32 before C is
  // rounded), with an auxiliary matrix of C's type and layout:
  //   kApply:    C = gelu(op(A) op(B) + bias); the pre-activation is
  //              written to gelu_aux (GELU_AUX, GELU_AUX_BIAS);
  //   kGradient: C = (op(A) op(B)) * gelu'(gelu_aux), gelu_aux read (DGELU;
  //              no bias).
  // Either needs gelu_aux set and ldc a multiple of 8 (Run checks).
  enum class Gelu { kNone, kApply, kGradient };
  Gelu gelu = Gelu::kNone;
  const void* gelu_aux = nullptr;
  cudaDataType_t ab_type = CUDA_R_32F;  // CUDA_R_32F or CUDA_R_16BF
  cudaDataType_t c_type = CUDA_R_32F;   // CUDA_R_32F or CUDA_R_16BF
};

// The products of a linear layer out [batch, O] = inp [batch, I] . weight
// [O, I]^T (row-major; weight as the layer stores it) as the CUDA backend
// runs them, for activations of type `act` (CUDA_R_32F or CUDA_R_16BF;
// inputs, outputs and weights of that type), without bias or epilogue:
//   forward:        out = inp . weight^T (column-major: out^T [O, batch] =
//                   weight^T . inp^T, A = weight stored I x O, transposed);
//   input gradient: dinp [batch, I] = dout [batch, O] . weight;
//   weight gradient: dweight [O, I] += dout^T . inp, summed into fp32
//                   (beta 1) whatever `act` is: it sums over every token of
//                   every micro-batch, where bf16 would drop small terms.
LtGemmArgs LinearForwardArgs(void* out, const void* inp, const void* weight,
                             int64_t batch, int64_t in, int64_t out_features,
                             cudaDataType_t act);
LtGemmArgs LinearInputGradArgs(void* dinp, const void* dout, const void* weight,
                               int64_t batch, int64_t in, int64_t out_features,
                               cudaDataType_t act);
LtGemmArgs LinearWeightGradArgs(float* dweight, const void* dout,
                                const void* inp, int64_t batch, int64_t in,
                                int64_t out_features, cudaDataType_t act);

// The workspace the CUDA backend gives cuBLASLt (its heuristic may pick
// algorithms that need up to this much; Hopper's fastest want 32 MiB).
inline constexpr int64_t kLtGemmWorkspaceBytes = int64_t{32} << 20;

class LtGemm {
 public:
  // `workspace` (device memory, `workspace_bytes`) and `stream` must
  // outlive the object.
  static absl::StatusOr<std::unique_ptr<LtGemm>> Create(void* workspace,
                                                        int64_t workspace_bytes,
                                                        cudaStream_t stream);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // Queues the product. With an epilogue (bias, bias gradient or GELU):
  // UNIMPLEMENTED, before
  // anything is queued, when cuBLASLt has no algorithm for it (remembered,
  // so asking again is cheap). INVALID_ARGUMENT when CheckArgs fails. Other
  // cuBLAS failures as CublasStatus.
  absl::Status Run(const LtGemmArgs& args);

  // The algorithms cuBLASLt's heuristic offers for the product, its best
  // guess first, at most `most` (1 to kMostCandidates; INVALID_ARGUMENT
  // otherwise): how many it gave, at least 1. Run's errors for a product
  // cuBLASLt has no algorithm for. Queues nothing.
  static constexpr int kMostCandidates = 32;
  absl::StatusOr<int> Candidates(const LtGemmArgs& args, int most);

  // Makes Run take candidate `index` of the last Candidates call for this
  // product (0: the heuristic's first, what Run takes unless told) from
  // now on: INVALID_ARGUMENT naming the index and the count when there is
  // no such candidate. A different algorithm may sum in a different order:
  // results stay deterministic per candidate, not across candidates.
  absl::Status Choose(const LtGemmArgs& args, int index);

  // Algorithm choices made ahead of time, as text: one line a product,
  // what ChoiceLine writes (bench/engine/gemm_bench.cc --choices writes a
  // file of them after timing every candidate on the GPU they are for),
  // '#' comments and blank lines ignored. A product planned from now on
  // whose line is here takes candidate i of the heuristic's n, as Choose
  // would; where the heuristic offers fewer (another GPU or cuBLAS), the
  // first, as without a choice. Each candidate is deterministic, so a run
  // with the same choices gives the same bits every time. INVALID_ARGUMENT
  // naming the line and what is wrong with it, and the choices set before
  // stay.
  absl::Status SetChoices(absl::string_view text);

  // What SetChoices says of `text`, without an LtGemm (or a device).
  static absl::Status CheckChoices(absl::string_view text);

  // The line SetChoices reads for `args` taking candidate `index` of `of`:
  //   m=.. n=.. k=.. ta=0|1 tb=0|1 lda=.. ldb=.. ldc=.. acc=0|1
  //   bias=none|add|grad gelu=none|apply|gradient ab=fp32|bf16 c=fp32|bf16
  //   candidate=.. of=..
  // (acc: beta is not 0; bias: add for `bias`, grad for `bias_grad`).
  // Pointer alignments are not part of it.
  static std::string ChoiceLine(const LtGemmArgs& args, int index, int of);

  // How many choices SetChoices holds, and how many plans so far took one.
  int choices() const { return static_cast<int>(choices_.size()); }
  int choices_taken() const { return choices_taken_; }

  // Choosing by timing, in the job itself: from StartTuning on, the next
  // run of each product not timed yet and without a choice of SetChoices
  // first runs each of the heuristic's first `candidates` (1 to
  // kMostCandidates) once to warm up and `reps` times timed with CUDA
  // events, on the product's own operands, and then runs and keeps the
  // fastest (the median of its reps). Each run writes C (and a GELU
  // epilogue's aux, a bias gradient) again, and a product with beta != 0
  // adds to C each time: for a pass whose results are thrown away (the
  // trainer's rehearsal). A candidate that fails to run is passed over.
  // Blocks the host on the stream. INVALID_ARGUMENT for counts out of
  // range.
  absl::Status StartTuning(int candidates, int reps);
  // Stops choosing by timing and returns the choices made since
  // StartTuning, one ChoiceLine each (what SetChoices reads back: `of` is
  // the candidates asked for, so the same heuristic gives the same list).
  // The plans keep their choices.
  std::string FinishTuning();
  // Products timed since StartTuning, and the candidates run (0 again
  // after FinishTuning).
  int tuned() const { return static_cast<int>(tuned_lines_.size()); }
  int tuned_candidates() const { return tuned_candidates_; }

  // What cuBLASLt documents for the GELU epilogues (cublasLt.h,
  // CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: the aux ld "must be divisible by
  // 8"; DGELU takes no bias), and that a bias gradient is an epilogue of
  // its own (no bias, no GELU): INVALID_ARGUMENT naming what is wrong.
  static absl::Status CheckArgs(const LtGemmArgs& args);

  // What a choice line names (SetChoices): shapes, transposes, leading
  // dimensions, whether beta is 0, the bias epilogue (BiasUse), the GELU
  // epilogue and types.
  using ChoiceKey = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t,
                               int64_t, int64_t, bool, int, int, int, int>;
  // The bias epilogue of `args`: 0 none, 1 `bias` added, 2 `bias_grad`.
  static int BiasUse(const LtGemmArgs& args);
  static ChoiceKey ChoiceKeyOf(const LtGemmArgs& args);

  // Everything a plan depends on: the choice key's fields and the
  // alignment of every pointer the heuristic looks at (A, B, C, and the
  // bias (or bias gradient) and GELU aux pointers: cublasLt.h says the
  // heuristic reads their alignment from their values), so a plan is never
  // reused for a less aligned pointer than it was chosen for. Alignments of
  // absent pointers are 0.
  using PlanKey = decltype(std::tuple_cat(
      ChoiceKey{}, std::tuple<int, int, int, int, int>{}));
  static PlanKey PlanKeyOf(const LtGemmArgs& args);

  // The largest power of two from 2 to 256 (a bf16 element to the most
  // cuBLASLt asks about) that divides the address `p`.
  static uint32_t AlignmentOf(const void* p);

 private:
  // A planned problem: descriptors plus the chosen algorithm.
  struct Plan;
  using Key = PlanKey;

  LtGemm(cublasLtHandle_t handle, cublasHandle_t classic, void* workspace,
         int64_t workspace_bytes, cudaStream_t stream);
  absl::StatusOr<Plan*> PlanFor(const LtGemmArgs& args);
  // Runs `plan` as it stands (its algo) on the operands of `args`.
  absl::Status RunPlanned(const LtGemmArgs& args, Plan* plan);
  // StartTuning's timing of a new plan's candidates; leaves the fastest as
  // its algo.
  absl::Status Tune(const LtGemmArgs& args, Plan* plan);
  // The heuristic's algorithms for a plan's descriptors, at most `most`,
  // those it marks usable; empty when it has none.
  absl::StatusOr<std::vector<cublasLtMatmulAlgo_t>> Heuristic(
      const Plan& plan, const LtGemmArgs& args, int most);
  absl::Status RunClassic(const LtGemmArgs& args);

  cublasLtHandle_t handle_;
  cublasHandle_t classic_;
  void* workspace_;
  int64_t workspace_bytes_;
  cudaStream_t stream_;
  std::map<Key, std::unique_ptr<Plan>> plans_;  // null: no algorithm
  struct Choice {
    int index, of;
  };
  static absl::Status ParseChoices(absl::string_view text,
                                   std::map<ChoiceKey, Choice>* choices);
  std::map<ChoiceKey, Choice> choices_;
  int choices_taken_ = 0;
  int tune_candidates_ = 0;  // 0: not tuning
  int tune_reps_ = 0;
  std::vector<std::string> tuned_lines_;
  int tuned_candidates_ = 0;
};

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_LT_GEMM_H_
