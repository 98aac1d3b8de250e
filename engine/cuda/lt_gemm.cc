// cuBLASLt plans and calls. See lt_gemm.h.
#include "engine/cuda/lt_gemm.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "engine/cuda/cuda_status.h"
#include "engine/cuda/stream_timer.h"

namespace trainyard::engine::cuda {

// What the heuristic may assume about the pointer.
uint32_t LtGemm::AlignmentOf(const void* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 256;
  while (alignment > 2 && address % alignment != 0) alignment /= 2;
  return alignment;
}

int LtGemm::BiasUse(const LtGemmArgs& g) {
  return g.bias_grad != nullptr ? 2 : g.bias != nullptr ? 1 : 0;
}

absl::Status LtGemm::CheckArgs(const LtGemmArgs& g) {
  if (g.bias_grad != nullptr &&
      (g.bias != nullptr || g.gelu != LtGemmArgs::Gelu::kNone)) {
    return absl::InvalidArgumentError(
        "the bias gradient epilogue takes neither a bias nor a GELU epilogue");
  }
  if (g.gelu == LtGemmArgs::Gelu::kNone) return absl::OkStatus();
  if (g.gelu_aux == nullptr) {
    return absl::InvalidArgumentError(
        "a GELU epilogue needs its auxiliary matrix (gelu_aux)");
  }
  if (g.ldc % 8 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a GELU epilogue's auxiliary matrix takes C's leading "
                     "dimension, which cuBLASLt wants a multiple of 8; got ",
                     g.ldc));
  }
  if (g.gelu == LtGemmArgs::Gelu::kGradient && g.bias != nullptr) {
    return absl::InvalidArgumentError(
        "the GELU gradient epilogue takes no bias");
  }
  return absl::OkStatus();
}

LtGemm::ChoiceKey LtGemm::ChoiceKeyOf(const LtGemmArgs& g) {
  return ChoiceKey{g.trans_a,
                   g.trans_b,
                   g.m,
                   g.n,
                   g.k,
                   g.lda,
                   g.ldb,
                   g.ldc,
                   g.beta != 0,
                   BiasUse(g),
                   static_cast<int>(g.gelu),
                   static_cast<int>(g.ab_type),
                   static_cast<int>(g.c_type)};
}

namespace {

// What cuBLASLt's BIAS_POINTER holds for `g`: the bias, or the bias
// gradient it writes.
const void* BiasPointer(const LtGemmArgs& g) {
  return g.bias_grad != nullptr ? g.bias_grad : g.bias;
}

// A choice line's words: the GELU epilogue by LtGemmArgs::Gelu's value,
// the bias epilogue by LtGemm::BiasUse, the types by index into kTypes.
constexpr const char* kGeluNames[] = {"none", "apply", "gradient"};
constexpr const char* kBiasNames[] = {"none", "add", "grad"};
constexpr const char* kTypeNames[] = {"fp32", "bf16"};
constexpr cudaDataType_t kTypes[] = {CUDA_R_32F, CUDA_R_16BF};

const char* TypeName(cudaDataType_t t) {
  return kTypeNames[t == CUDA_R_16BF ? 1 : 0];
}

}  // namespace

LtGemm::PlanKey LtGemm::PlanKeyOf(const LtGemmArgs& g) {
  const bool gelu = g.gelu != LtGemmArgs::Gelu::kNone;
  return std::tuple_cat(
      ChoiceKeyOf(g),
      std::tuple{
          static_cast<int>(AlignmentOf(g.a)),
          static_cast<int>(AlignmentOf(g.b)),
          static_cast<int>(AlignmentOf(g.c)),
          BiasUse(g) != 0 ? static_cast<int>(AlignmentOf(BiasPointer(g))) : 0,
          gelu ? static_cast<int>(AlignmentOf(g.gelu_aux)) : 0});
}

std::string LtGemm::ChoiceLine(const LtGemmArgs& g, int index, int of) {
  return absl::StrCat(
      "m=", g.m, " n=", g.n, " k=", g.k, " ta=", g.trans_a ? 1 : 0,
      " tb=", g.trans_b ? 1 : 0, " lda=", g.lda, " ldb=", g.ldb, " ldc=", g.ldc,
      " acc=", g.beta != 0 ? 1 : 0, " bias=", kBiasNames[BiasUse(g)],
      " gelu=", kGeluNames[static_cast<int>(g.gelu)],
      " ab=", TypeName(g.ab_type), " c=", TypeName(g.c_type),
      " candidate=", index, " of=", of);
}

absl::Status LtGemm::SetChoices(absl::string_view text) {
  std::map<ChoiceKey, Choice> choices;
  RETURN_IF_ERROR(ParseChoices(text, &choices));
  choices_ = std::move(choices);
  return absl::OkStatus();
}

absl::Status LtGemm::CheckChoices(absl::string_view text) {
  std::map<ChoiceKey, Choice> choices;
  return ParseChoices(text, &choices);
}

absl::Status LtGemm::ParseChoices(absl::string_view text,
                                  std::map<ChoiceKey, Choice>* choices) {
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    const auto bad = [&](absl::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrCat("gemm choices, line ", line_number, ": ", what));
    };
    // Every field once, by name.
    std::map<std::string, std::string, std::less<>> fields;
    for (absl::string_view token :
         absl::StrSplit(line, ' ', absl::SkipWhitespace())) {
      const size_t eq = token.find('=');
      if (eq == absl::string_view::npos ||
          !fields.emplace(token.substr(0, eq), token.substr(eq + 1)).second) {
        return bad(
            absl::StrCat("'", token, "' is not a name=value field named once"));
      }
    }
    const auto number = [&](const char* name, int64_t low, int64_t* out) {
      auto it = fields.find(name);
      if (it == fields.end()) return bad(absl::StrCat("no ", name, "="));
      if (!absl::SimpleAtoi(it->second, out) || *out < low) {
        return bad(absl::StrCat(name, "=", it->second,
                                ": not a whole number >= ", low));
      }
      fields.erase(it);
      return absl::OkStatus();
    };
    const auto word = [&](const char* name, const auto& words, int* out) {
      auto it = fields.find(name);
      if (it == fields.end()) return bad(absl::StrCat("no ", name, "="));
      int i = 0;
      for (const char* w : words) {
        if (it->second == w) {
          *out = i;
          fields.erase(it);
          return absl::OkStatus();
        }
        ++i;
      }
      return bad(absl::StrCat(name, "=", it->second, ": not one of ",
                              absl::StrJoin(words, ", ")));
    };
    int64_t m = 0, n = 0, k = 0, ta = 0, tb = 0, lda = 0, ldb = 0, ldc = 0,
            acc = 0, index = 0, of = 0;
    int bias = 0, gelu = 0, ab = 0, c = 0;
    for (auto [name, low, out] :
         {std::tuple{"m", 1, &m}, std::tuple{"n", 1, &n},
          std::tuple{"k", 1, &k}, std::tuple{"ta", 0, &ta},
          std::tuple{"tb", 0, &tb}, std::tuple{"lda", 1, &lda},
          std::tuple{"ldb", 1, &ldb}, std::tuple{"ldc", 1, &ldc},
          std::tuple{"acc", 0, &acc}, std::tuple{"candidate", 0, &index},
          std::tuple{"of", 1, &of}}) {
      RETURN_IF_ERROR(number(name, low, out));
    }
    RETURN_IF_ERROR(word("bias", kBiasNames, &bias));
    RETURN_IF_ERROR(word("gelu", kGeluNames, &gelu));
    RETURN_IF_ERROR(word("ab", kTypeNames, &ab));
    RETURN_IF_ERROR(word("c", kTypeNames, &c));
    if (!fields.empty()) {
      return bad(absl::StrCat("unknown field '", fields.begin()->first, "'"));
    }
    if (ta > 1 || tb > 1 || acc > 1) {
      return bad("ta, tb and acc are 0 or 1");
    }
    if (bias == 2 && gelu != 0) {
      return bad(absl::StrCat("bias=grad with gelu=", kGeluNames[gelu],
                              ": the bias gradient epilogue takes no GELU"));
    }
    if (of > kMostCandidates || index >= of) {
      return bad(absl::StrCat("candidate=", index, " of=", of,
                              ": need candidate < of <= ", kMostCandidates));
    }
    const ChoiceKey key{ta == 1,
                        tb == 1,
                        m,
                        n,
                        k,
                        lda,
                        ldb,
                        ldc,
                        acc == 1,
                        bias,
                        gelu,
                        static_cast<int>(kTypes[ab]),
                        static_cast<int>(kTypes[c])};
    if (!choices
             ->emplace(key,
                       Choice{static_cast<int>(index), static_cast<int>(of)})
             .second) {
      return bad("the same product as an earlier line");
    }
  }
  return absl::OkStatus();
}

struct LtGemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo = {};                // what Run takes
  std::vector<cublasLtMatmulAlgo_t> candidates;  // the heuristic's, in order
  bool settled = false;  // a choice of SetChoices, or timed: not tuned again
  ~Plan() {
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

absl::StatusOr<std::unique_ptr<LtGemm>> LtGemm::Create(void* workspace,
                                                       int64_t workspace_bytes,
                                                       cudaStream_t stream) {
  cublasLtHandle_t handle = nullptr;
  YARD_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&handle));
  cublasHandle_t classic = nullptr;
  if (const cublasStatus_t s = cublasCreate(&classic);
      s != CUBLAS_STATUS_SUCCESS) {
    cublasLtDestroy(handle);
    return CublasStatus(s, "cublasCreate", __FILE__, __LINE__);
  }
  // From here the object owns both handles.
  std::unique_ptr<LtGemm> gemm(
      new LtGemm(handle, classic, workspace, workspace_bytes, stream));
  YARD_CUBLAS_RETURN_IF_ERROR(cublasSetStream(classic, stream));
  // Pedantic: plain fp32, never TF32 or other shortcuts.
  YARD_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(classic, CUBLAS_PEDANTIC_MATH));
  // Our workspace, so cuBLAS takes no memory of its own outside the arena.
  // Both handles run on the one stream, one call at a time: sharing is safe.
  YARD_CUBLAS_RETURN_IF_ERROR(cublasSetWorkspace(
      classic, workspace, static_cast<size_t>(workspace_bytes)));
  return gemm;
}

LtGemm::LtGemm(cublasLtHandle_t handle, cublasHandle_t classic, void* workspace,
               int64_t workspace_bytes, cudaStream_t stream)
    : handle_(handle),
      classic_(classic),
      workspace_(workspace),
      workspace_bytes_(workspace_bytes),
      stream_(stream) {}

LtGemm::~LtGemm() {
  plans_.clear();
  cublasDestroy(classic_);
  cublasLtDestroy(handle_);
}

absl::Status LtGemm::RunClassic(const LtGemmArgs& g) {
  constexpr int64_t kMax = 0x7fffffff;  // classic cuBLAS takes int sizes
  if (g.m > kMax || g.n > kMax || g.k > kMax || g.lda > kMax || g.ldb > kMax ||
      g.ldc > kMax) {
    return absl::UnimplementedError(absl::StrCat(
        "no algorithm for a product of m=", g.m, " n=", g.n, " k=", g.k));
  }
  const float alpha = 1.f;
  if (g.ab_type != CUDA_R_32F || g.c_type != CUDA_R_32F) {
    YARD_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(
        classic_, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
        g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(g.m),
        static_cast<int>(g.n), static_cast<int>(g.k), &alpha, g.a, g.ab_type,
        static_cast<int>(g.lda), g.b, g.ab_type, static_cast<int>(g.ldb),
        &g.beta, g.c, g.c_type, static_cast<int>(g.ldc), CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT));
    return absl::OkStatus();
  }
  YARD_CUBLAS_RETURN_IF_ERROR(
      cublasSgemm(classic_, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                  g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(g.m),
                  static_cast<int>(g.n), static_cast<int>(g.k), &alpha,
                  static_cast<const float*>(g.a), static_cast<int>(g.lda),
                  static_cast<const float*>(g.b), static_cast<int>(g.ldb),
                  &g.beta, static_cast<float*>(g.c), static_cast<int>(g.ldc)));
  return absl::OkStatus();
}

absl::StatusOr<LtGemm::Plan*> LtGemm::PlanFor(const LtGemmArgs& g) {
  const uint32_t align_a = AlignmentOf(g.a), align_b = AlignmentOf(g.b),
                 align_c = AlignmentOf(g.c);
  const Key key = PlanKeyOf(g);
  if (auto it = plans_.find(key); it != plans_.end()) {
    if (it->second == nullptr) {
      return absl::UnimplementedError(
          "cuBLASLt has no algorithm for this product");
    }
    return it->second.get();
  }

  auto plan = std::make_unique<Plan>();
  YARD_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  YARD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  YARD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  const bool bias = g.bias != nullptr;
  cublasLtEpilogue_t epilogue =
      bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  if (g.bias_grad != nullptr) {
    epilogue = CUBLASLT_EPILOGUE_BGRADB;  // CheckArgs: no bias, no GELU
  } else if (g.gelu == LtGemmArgs::Gelu::kApply) {
    epilogue =
        bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  } else if (g.gelu == LtGemmArgs::Gelu::kGradient) {
    epilogue = CUBLASLT_EPILOGUE_DGELU;  // CheckArgs: no bias
  }
  YARD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  if (const void* bias_pointer = BiasPointer(g); bias_pointer != nullptr) {
    // The heuristic takes the bias vector's alignment from the pointer
    // (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_POINTER; the bias gradient's
    // too), so it must see the real one, not the default NULL. Its
    // alignment is part of the key.
    YARD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_pointer,
        sizeof(bias_pointer)));
  }
  if (g.gelu != LtGemmArgs::Gelu::kNone) {
    // The auxiliary matrix is laid out like C (ldc is part of the key); the
    // heuristic sees the epilogue whole, pointer included (its alignment is
    // part of the key too).
    const int64_t aux_ld = g.ldc;
    YARD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
        sizeof(aux_ld)));
    YARD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.gelu_aux,
        sizeof(g.gelu_aux)));
  }
  // Stored shapes: A is k x m when transposed, m x k otherwise (B alike).
  YARD_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(&plan->a, g.ab_type, g.trans_a ? g.k : g.m,
                                 g.trans_a ? g.m : g.k, g.lda));
  YARD_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(&plan->b, g.ab_type, g.trans_b ? g.n : g.k,
                                 g.trans_b ? g.k : g.n, g.ldb));
  YARD_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(&plan->c, g.c_type, g.m, g.n, g.ldc));

  ASSIGN_OR_RETURN(std::vector<cublasLtMatmulAlgo_t> algos,
                   Heuristic(*plan, g, 1));
  if (algos.empty()) {
    plans_.emplace(key, nullptr);
    return absl::UnimplementedError(absl::StrCat(
        "cuBLASLt has no algorithm for m=", g.m, " n=", g.n, " k=", g.k,
        " trans_a=", g.trans_a, " trans_b=", g.trans_b, " lda=", g.lda,
        " ldb=", g.ldb, " ldc=", g.ldc, " alignments ", align_a, "/", align_b,
        "/", align_c, " bias=", kBiasNames[BiasUse(g)], " gelu=",
        static_cast<int>(g.gelu), " bf16 inputs=", g.ab_type == CUDA_R_16BF,
        " bf16 output=", g.c_type == CUDA_R_16BF));
  }
  plan->algo = algos[0];
  plan->candidates = std::move(algos);
  if (auto choice = choices_.find(ChoiceKeyOf(g)); choice != choices_.end()) {
    ASSIGN_OR_RETURN(std::vector<cublasLtMatmulAlgo_t> offered,
                     Heuristic(*plan, g, choice->second.of));
    if (choice->second.index < static_cast<int>(offered.size())) {
      plan->algo = offered[choice->second.index];
      plan->candidates = std::move(offered);
      plan->settled = true;
      ++choices_taken_;
    }
  }
  Plan* out = plan.get();
  plans_.emplace(key, std::move(plan));
  return out;
}

absl::StatusOr<std::vector<cublasLtMatmulAlgo_t>> LtGemm::Heuristic(
    const Plan& plan, const LtGemmArgs& g, int most) {
  const uint32_t align_a = AlignmentOf(g.a), align_b = AlignmentOf(g.b),
                 align_c = AlignmentOf(g.c);
  cublasLtMatmulPreference_t pref = nullptr;
  YARD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t workspace = static_cast<uint64_t>(workspace_bytes_);
  std::vector<cublasLtMatmulHeuristicResult_t> results(most);
  int found = 0;
  cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
      sizeof(workspace));
  for (auto [attr, value] :
       {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a},
        std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b},
        std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c},
        std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c}}) {
    if (status == CUBLAS_STATUS_SUCCESS) {
      status = cublasLtMatmulPreferenceSetAttribute(pref, attr, &value,
                                                    sizeof(value));
    }
  }
  if (status == CUBLAS_STATUS_SUCCESS) {
    status = cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b,
                                            plan.c, plan.c, pref, most,
                                            results.data(), &found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  // NOT_SUPPORTED: "no heuristic function available for current
  // configuration" (cublasLt.h), as good as no algorithm.
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) {
    found = 0;
  } else {
    YARD_CUBLAS_RETURN_IF_ERROR(status);
  }
  std::vector<cublasLtMatmulAlgo_t> algos;
  for (int i = 0; i < found && i < most; ++i) {
    if (results[i].state == CUBLAS_STATUS_SUCCESS) {
      algos.push_back(results[i].algo);
    }
  }
  return algos;
}

absl::StatusOr<int> LtGemm::Candidates(const LtGemmArgs& g, int most) {
  if (most < 1 || most > kMostCandidates) {
    return absl::InvalidArgumentError(absl::StrCat(
        "candidates: asked for ", most, "; from 1 to ", kMostCandidates));
  }
  RETURN_IF_ERROR(CheckArgs(g));
  ASSIGN_OR_RETURN(Plan * plan, PlanFor(g));
  ASSIGN_OR_RETURN(std::vector<cublasLtMatmulAlgo_t> algos,
                   Heuristic(*plan, g, most));
  if (algos.empty()) {
    return absl::InternalError(
        "cuBLASLt's heuristic offered no candidates for a product it had "
        "planned");
  }
  plan->candidates = std::move(algos);
  return static_cast<int>(plan->candidates.size());
}

absl::Status LtGemm::Choose(const LtGemmArgs& g, int index) {
  RETURN_IF_ERROR(CheckArgs(g));
  ASSIGN_OR_RETURN(Plan * plan, PlanFor(g));
  const int count = static_cast<int>(plan->candidates.size());
  if (index < 0 || index >= count) {
    return absl::InvalidArgumentError(absl::StrCat("candidate ", index,
                                                   " of a product with ", count,
                                                   " (0 to ", count - 1, ")"));
  }
  plan->algo = plan->candidates[index];
  return absl::OkStatus();
}

absl::Status LtGemm::Run(const LtGemmArgs& g) {
  RETURN_IF_ERROR(CheckArgs(g));
  if (g.m <= 0 || g.n <= 0) return absl::OkStatus();
  absl::StatusOr<Plan*> planned = PlanFor(g);
  if (!planned.ok()) {
    if (planned.status().code() == absl::StatusCode::kUnimplemented &&
        BiasUse(g) == 0 && g.gelu == LtGemmArgs::Gelu::kNone) {
      return RunClassic(g);
    }
    return planned.status();
  }
  Plan* plan = *planned;
  if (tune_candidates_ > 0 && !plan->settled) RETURN_IF_ERROR(Tune(g, plan));
  return RunPlanned(g, plan);
}

absl::Status LtGemm::RunPlanned(const LtGemmArgs& g, Plan* plan) {
  if (const void* bias_pointer = BiasPointer(g); bias_pointer != nullptr) {
    YARD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_pointer,
        sizeof(bias_pointer)));
  }
  if (g.gelu != LtGemmArgs::Gelu::kNone) {
    YARD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.gelu_aux,
        sizeof(g.gelu_aux)));
  }
  const float alpha = 1.f;
  YARD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(
      handle_, plan->desc, &alpha, g.a, plan->a, g.b, plan->b, &g.beta, g.c,
      plan->c, g.c, plan->c, &plan->algo, workspace_,
      static_cast<size_t>(workspace_bytes_), stream_));
  return absl::OkStatus();
}

absl::Status LtGemm::StartTuning(int candidates, int reps) {
  if (candidates < 1 || candidates > kMostCandidates || reps < 1 ||
      reps > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("gemm tuning: ", candidates, " candidates (1 to ",
                     kMostCandidates, ") and ", reps, " reps (1 to 100)"));
  }
  tune_candidates_ = candidates;
  tune_reps_ = reps;
  tuned_lines_.clear();
  tuned_candidates_ = 0;
  return absl::OkStatus();
}

std::string LtGemm::FinishTuning() {
  tune_candidates_ = 0;
  std::string text;
  for (const std::string& line : tuned_lines_) {
    absl::StrAppend(&text, line, "\n");
  }
  tuned_lines_.clear();
  tuned_candidates_ = 0;
  return text;
}

absl::Status LtGemm::Tune(const LtGemmArgs& g, Plan* plan) {
  plan->settled = true;
  ASSIGN_OR_RETURN(std::vector<cublasLtMatmulAlgo_t> offered,
                   Heuristic(*plan, g, tune_candidates_));
  if (offered.empty()) return absl::OkStatus();  // PlanFor had one: keep it
  StreamTimer timer;
  RETURN_IF_ERROR(timer.Create());
  int best = -1;
  float best_ms = 0;
  for (size_t i = 0; i < offered.size(); ++i) {
    plan->algo = offered[i];
    // A candidate cuBLASLt will not run here is passed over.
    if (!RunPlanned(g, plan).ok()) continue;
    ++tuned_candidates_;
    ASSIGN_OR_RETURN(const float median, timer.Median(tune_reps_, stream_, [&] {
      return RunPlanned(g, plan);
    }));
    if (best < 0 || median < best_ms) {
      best = static_cast<int>(i);
      best_ms = median;
    }
  }
  if (best < 0) best = 0;  // none ran: the heuristic's first, as untuned
  plan->algo = offered[best];
  plan->candidates = std::move(offered);
  tuned_lines_.push_back(ChoiceLine(g, best, tune_candidates_));
  return absl::OkStatus();
}

LtGemmArgs LinearForwardArgs(void* out, const void* inp, const void* weight,
                             int64_t batch, int64_t in, int64_t out_features,
                             cudaDataType_t act) {
  return {.trans_a = true,
          .m = out_features,
          .n = batch,
          .k = in,
          .a = weight,
          .lda = in,
          .b = inp,
          .ldb = in,
          .c = out,
          .ldc = out_features,
          .ab_type = act,
          .c_type = act};
}

// Column-major: dinp^T [I, batch] = weight^T [I, O] . dout^T [O, batch],
// weight stored I x O as is.
LtGemmArgs LinearInputGradArgs(void* dinp, const void* dout, const void* weight,
                               int64_t batch, int64_t in, int64_t out_features,
                               cudaDataType_t act) {
  return {.m = in,
          .n = batch,
          .k = out_features,
          .a = weight,
          .lda = in,
          .b = dout,
          .ldb = out_features,
          .c = dinp,
          .ldc = in,
          .ab_type = act,
          .c_type = act};
}

// Column-major: dweight^T [I, O] += inp^T [I, batch] . dout [batch, O],
// dout^T stored O x batch, transposed.
LtGemmArgs LinearWeightGradArgs(float* dweight, const void* dout,
                                const void* inp, int64_t batch, int64_t in,
                                int64_t out_features, cudaDataType_t act) {
  return {.trans_b = true,
          .m = in,
          .n = out_features,
          .k = batch,
          .a = inp,
          .lda = in,
          .b = dout,
          .ldb = out_features,
          .c = dweight,
          .ldc = in,
          .beta = 1.f,
          .ab_type = act,
          .c_type = CUDA_R_32F};
}

}  // namespace trainyard::engine::cuda
