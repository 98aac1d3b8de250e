// The emulated cuBLASLt heuristic and matmul: the checks cublas_host.cc's
// header comment lists, then the product on the host. An algorithm is the
// record of what the heuristic promised (workspace, pointer alignments),
// so the matmul can hold the caller to it; the heuristic offers up to
// kEmulatedAlgoCandidates of them, alike but for their index.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "engine/cuda/emulation/cublas_host.h"

namespace trainyard::cuda_emulation {
namespace {

// What cublasLtMatmulAlgo_t holds here.
struct EmulatedAlgo {
  uint64_t magic;
  uint64_t workspace_bytes;
  uint32_t align_a, align_b, align_c, align_d, align_bias, align_aux;
  int32_t candidate;  // its index in the heuristic's answer
};
static_assert(sizeof(EmulatedAlgo) <= sizeof(cublasLtMatmulAlgo_t));
// Marks an algo the heuristic wrote; a zeroed or foreign one lacks it.
constexpr uint64_t kAlgoMagic = 0x4c54454d55414c47ull;

// The largest power of two from 1 to 256 that divides p (256 for NULL).
uint32_t AlignmentOf(const void* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

// The most an algorithm may need when the preference promises `bytes`.
uint32_t AlignmentFromPreference(uint64_t bytes) {
  uint32_t alignment = 256;
  while (alignment > 1 && alignment > bytes) alignment /= 2;
  return alignment;
}

std::string Hex(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

struct Epilogue {
  bool bias = false;     // adds the bias vector
  bool gelu = false;     // applies GELU
  bool aux_out = false;  // writes the pre-activation to aux
  bool dgelu = false;    // multiplies by gelu'(aux)
  bool bias_grad = false;  // writes op(B)'s column sums to the bias vector
};

// A problem the descriptors describe, checked.
struct Problem {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const LayoutRecord *a = nullptr, *b = nullptr, *c = nullptr, *d = nullptr;
  Epilogue epilogue;
  const void* bias = nullptr;  // the bias, or the bias gradient's output
  const void* aux = nullptr;
  int64_t aux_ld = 0;
};

cublasStatus_t CheckOperation(const char* where, int32_t op, const char* name,
                              bool* trans) {
  if (op != CUBLAS_OP_N && op != CUBLAS_OP_T && op != CUBLAS_OP_C) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, where,
                  std::string(name) + " = " + std::to_string(op) +
                      " is not a cublasOperation_t");
  }
  *trans = op != CUBLAS_OP_N;  // OP_C is OP_T for real types
  return CUBLAS_STATUS_SUCCESS;
}

// Compute, scale and pointer mode, transposes, attributes not emulated.
cublasStatus_t CheckDesc(const char* where, const DescRecord& desc,
                         Problem* p) {
  const int32_t compute =
      AsInt32(desc.values[CUBLASLT_MATMUL_DESC_COMPUTE_TYPE]);
  if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_PEDANTIC) {
    return Reject(CUBLAS_STATUS_NOT_SUPPORTED, where,
                  "compute type " + std::to_string(compute) +
                      " is not emulated (CUBLAS_COMPUTE_32F and _PEDANTIC "
                      "are)");
  }
  const int32_t scale = AsInt32(desc.values[CUBLASLT_MATMUL_DESC_SCALE_TYPE]);
  if (scale != CUDA_R_32F) {
    return Reject(CUBLAS_STATUS_NOT_SUPPORTED, where,
                  "scale type " + std::to_string(scale) +
                      " with CUBLAS_COMPUTE_32F: only CUDA_R_32F is");
  }
  const int32_t mode = AsInt32(desc.values[CUBLASLT_MATMUL_DESC_POINTER_MODE]);
  if (mode != 0 && mode != 1) {  // HOST, DEVICE: both host memory here
    return Reject(CUBLAS_STATUS_NOT_SUPPORTED, where,
                  "pointer mode " + std::to_string(mode) + " is not emulated");
  }
  if (const cublasStatus_t s = CheckOperation(
          where, AsInt32(desc.values[CUBLASLT_MATMUL_DESC_TRANSA]), "TRANSA",
          &p->trans_a);
      s != CUBLAS_STATUS_SUCCESS) {
    return s;
  }
  if (const cublasStatus_t s = CheckOperation(
          where, AsInt32(desc.values[CUBLASLT_MATMUL_DESC_TRANSB]), "TRANSB",
          &p->trans_b);
      s != CUBLAS_STATUS_SUCCESS) {
    return s;
  }
  if (AsInt32(desc.values[CUBLASLT_MATMUL_DESC_TRANSC]) != CUBLAS_OP_N) {
    return Reject(CUBLAS_STATUS_NOT_SUPPORTED, where,
                  "TRANSC: \"Currently only CUBLAS_OP_N is supported\"");
  }
  if (int attr; HasUnemulatedDescValue(desc, &attr)) {
    return Reject(
        CUBLAS_STATUS_NOT_SUPPORTED, where,
        std::string(DescAttributeName(attr)) + " is set: not emulated");
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CheckLayoutValues(const char* where, const char* name,
                                 const LayoutRecord& l, bool ld_may_be_zero) {
  constexpr uint64_t kInt32Max = 0x7fffffff;
  if (!IsEmulatedType(l.type)) {
    return Reject(CUBLAS_STATUS_NOT_SUPPORTED, where,
                  std::string(name) + ": type " + std::to_string(l.type) +
                      " is not emulated (CUDA_R_32F and CUDA_R_16BF are)");
  }
  if (l.rows > kInt32Max || l.cols > kInt32Max || l.ld > int64_t{kInt32Max}) {
    return Reject(CUBLAS_STATUS_NOT_SUPPORTED, where,
                  std::string(name) + ": sizes past int32");
  }
  if (l.ld < 0 || (static_cast<uint64_t>(l.ld) < l.rows &&
                   !(ld_may_be_zero && l.ld == 0))) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, where,
                  std::string(name) + ": ld " + std::to_string(l.ld) +
                      " < rows " + std::to_string(l.rows));
  }
  return CUBLAS_STATUS_SUCCESS;
}

std::string Shape(const char* name, const LayoutRecord& l) {
  return std::string(name) + " " + std::to_string(l.rows) + "x" +
         std::to_string(l.cols);
}

// Types, leading dimensions, and m, n, k the four layouts agree on.
cublasStatus_t CheckLayouts(const char* where, Problem* p) {
  const LayoutRecord &a = *p->a, &b = *p->b, &c = *p->c, &d = *p->d;
  for (auto [name, l] : {std::pair{"A", &a}, std::pair{"B", &b},
                         std::pair{"C", &c}, std::pair{"D", &d}}) {
    if (const cublasStatus_t s =
            CheckLayoutValues(where, name, *l, /*ld_may_be_zero=*/l == &c);
        s != CUBLAS_STATUS_SUCCESS) {
      return s;
    }
  }
  const bool supported =
      a.type == b.type && c.type == d.type &&
      (a.type == CUDA_R_16BF || (a.type == CUDA_R_32F && d.type == CUDA_R_32F));
  if (!supported) {
    return Reject(CUBLAS_STATUS_NOT_SUPPORTED, where,
                  "types A " + std::to_string(a.type) + ", B " +
                      std::to_string(b.type) + ", C " + std::to_string(c.type) +
                      ", D " + std::to_string(d.type) +
                      ": not a combination of the cuBLAS guide's table for "
                      "CUBLAS_COMPUTE_32F");
  }
  p->m = static_cast<int64_t>(d.rows);
  p->n = static_cast<int64_t>(d.cols);
  p->k = static_cast<int64_t>(p->trans_a ? a.rows : a.cols);
  const uint64_t a_m = p->trans_a ? a.cols : a.rows;
  const uint64_t b_k = p->trans_b ? b.cols : b.rows;
  const uint64_t b_n = p->trans_b ? b.rows : b.cols;
  if (a_m != d.rows || b_n != d.cols || b_k != static_cast<uint64_t>(p->k) ||
      c.rows != d.rows || c.cols != d.cols) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, where,
                  "shapes disagree: " + Shape("A", a) +
                      (p->trans_a ? " (T), " : ", ") + Shape("B", b) +
                      (p->trans_b ? " (T), " : ", ") + Shape("C", c) + ", " +
                      Shape("D", d));
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CheckEpilogue(const char* where, const DescRecord& desc,
                             Problem* p) {
  const uint32_t e =
      static_cast<uint32_t>(desc.values[CUBLASLT_MATMUL_DESC_EPILOGUE]);
  Epilogue& ep = p->epilogue;
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT:
      break;
    case CUBLASLT_EPILOGUE_BIAS:
      ep.bias = true;
      break;
    case CUBLASLT_EPILOGUE_GELU:
      ep.gelu = true;
      break;
    case CUBLASLT_EPILOGUE_GELU_BIAS:
      ep.gelu = ep.bias = true;
      break;
    case CUBLASLT_EPILOGUE_GELU_AUX:
      ep.gelu = ep.aux_out = true;
      break;
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
      ep.gelu = ep.aux_out = ep.bias = true;
      break;
    case CUBLASLT_EPILOGUE_DGELU:
      ep.dgelu = true;
      break;
    case CUBLASLT_EPILOGUE_BGRADB:
      ep.bias_grad = true;
      break;
    case CUBLASLT_EPILOGUE_RELU:
    case CUBLASLT_EPILOGUE_RELU_AUX:
    case CUBLASLT_EPILOGUE_RELU_BIAS:
    case CUBLASLT_EPILOGUE_RELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_DRELU:
    case CUBLASLT_EPILOGUE_DRELU_BGRAD:
    case CUBLASLT_EPILOGUE_DGELU_BGRAD:
    case CUBLASLT_EPILOGUE_BGRADA:
      return Reject(CUBLAS_STATUS_NOT_SUPPORTED, where,
                    "epilogue " + std::to_string(e) + " is not emulated");
    default:
      return Reject(
          CUBLAS_STATUS_INVALID_VALUE, where,
          "epilogue " + std::to_string(e) + " is not a cublasLtEpilogue_t");
  }
  const cudaDataType d_type = p->d->type;
  const int32_t bias_type =
      AsInt32(desc.values[CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE]);
  if ((ep.bias || ep.bias_grad) && bias_type != -1 && bias_type != d_type) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, where,
                  "BIAS_DATA_TYPE " + std::to_string(bias_type) +
                      ": bias (and bias gradient) elements are of D's type, " +
                      std::to_string(d_type));
  }
  p->bias = AsPointer(desc.values[CUBLASLT_MATMUL_DESC_BIAS_POINTER]);
  if (!ep.aux_out && !ep.dgelu) return CUBLAS_STATUS_SUCCESS;
  const int32_t aux_type =
      AsInt32(desc.values[CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE]);
  if (aux_type != -1 && aux_type != d_type) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, where,
                  "EPILOGUE_AUX_DATA_TYPE " + std::to_string(aux_type) +
                      ": the GELU input matrix is of D's type, " +
                      std::to_string(d_type));
  }
  p->aux = AsPointer(desc.values[CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER]);
  p->aux_ld =
      static_cast<int64_t>(desc.values[CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD]);
  if (p->aux_ld % 8 != 0 || p->aux_ld < p->m) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, where,
                  "EPILOGUE_AUX_LD " + std::to_string(p->aux_ld) +
                      ": \"Must be divisible by 8 and be no less than the "
                      "number of rows in the output matrix\" (" +
                      std::to_string(p->m) + ")");
  }
  return CUBLAS_STATUS_SUCCESS;
}

// Everything the heuristic and the matmul both check.
cublasStatus_t CheckProblem(const char* where, cublasLtHandle_t handle,
                            cublasLtMatmulDesc_t desc_handle,
                            cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                            cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                            Problem* p) {
  if (!IsLiveObject(handle, ObjectKind::kLtHandle)) {
    return Reject(CUBLAS_STATUS_NOT_INITIALIZED, where,
                  "not a live cuBLASLt handle");
  }
  const DescRecord* desc = FindDesc(desc_handle);
  if (desc == nullptr) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, where,
                  "not a live matmul descriptor");
  }
  p->a = FindLayout(a);
  p->b = FindLayout(b);
  p->c = FindLayout(c);
  p->d = FindLayout(d);
  if (p->a == nullptr || p->b == nullptr || p->c == nullptr ||
      p->d == nullptr) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, where,
                  "a layout of A, B, C, D is not a live layout");
  }
  if (const cublasStatus_t s = CheckDesc(where, *desc, p);
      s != CUBLAS_STATUS_SUCCESS) {
    return s;
  }
  if (const cublasStatus_t s = CheckLayouts(where, p);
      s != CUBLAS_STATUS_SUCCESS) {
    return s;
  }
  return CheckEpilogue(where, *desc, p);
}

MatrixRef Ref(const LayoutRecord& l, const void* data) {
  return MatrixRef{l.type, data, static_cast<int64_t>(l.rows),
                   static_cast<int64_t>(l.cols), l.ld};
}

// The pointers of one cublasLtMatmul call.
struct Operands {
  const void* a = nullptr;
  const void* b = nullptr;
  const void* c = nullptr;
  void* d = nullptr;
  float alpha = 0, beta = 0;
};

// NULL pointers, and C == D with layouts that differ.
cublasStatus_t CheckPresent(const char* where, const Problem& p,
                            const Operands& o) {
  if (p.m == 0 || p.n == 0) return CUBLAS_STATUS_SUCCESS;
  const char* missing = nullptr;
  if (p.k > 0 && o.a == nullptr) missing = "A is NULL";
  if (p.k > 0 && o.b == nullptr) missing = "B is NULL";
  if (o.beta != 0 && o.c == nullptr) missing = "C is NULL and beta != 0";
  if (o.d == nullptr) missing = "D is NULL";
  if (p.epilogue.bias && p.bias == nullptr) {
    missing = "a BIAS epilogue with BIAS_POINTER NULL";
  }
  if (p.epilogue.bias_grad && p.bias == nullptr) {
    missing = "a BGRADB epilogue with BIAS_POINTER NULL";
  }
  if (p.epilogue.bias_grad && o.alpha != 1.f) {
    return Reject(CUBLAS_STATUS_NOT_SUPPORTED, where,
                  "a BGRADB epilogue with alpha != 1 is not emulated (whether "
                  "the bias gradient is scaled is not documented)");
  }
  if ((p.epilogue.aux_out || p.epilogue.dgelu) && p.aux == nullptr) {
    missing = "a GELU aux epilogue with EPILOGUE_AUX_POINTER NULL";
  }
  if (missing != nullptr) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, where, missing);
  }
  const LayoutRecord &c = *p.c, &d = *p.d;
  if (o.c == o.d && (c.type != d.type || c.ld != d.ld)) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, where,
                  "C == D (in place) with Cdesc unlike Ddesc: ldc " +
                      std::to_string(c.ld) + ", ldd " + std::to_string(d.ld));
  }
  return CUBLAS_STATUS_SUCCESS;
}

// Outputs that overlap an input or each other: the GPU reads and writes
// them in an order of its own, so the result would be undefined.
cublasStatus_t CheckOverlaps(const char* where, const Problem& p,
                             const Operands& o) {
  const cudaDataType dt = p.d->type;
  const MatrixRef aux{dt, p.aux, p.m, p.n, p.aux_ld};
  std::vector<std::pair<const char*, MatrixRef>> inputs;
  if (p.k > 0) {
    inputs.push_back({"A", Ref(*p.a, o.a)});
    inputs.push_back({"B", Ref(*p.b, o.b)});
  }
  if (o.beta != 0 && o.c != o.d) inputs.push_back({"C", Ref(*p.c, o.c)});
  if (p.epilogue.bias) inputs.push_back({"bias", {dt, p.bias, p.m, 1, p.m}});
  if (p.epilogue.dgelu) inputs.push_back({"aux", aux});
  std::vector<std::pair<const char*, MatrixRef>> outputs = {
      {"D", Ref(*p.d, o.d)}};
  if (p.epilogue.aux_out) outputs.push_back({"aux", aux});
  if (p.epilogue.bias_grad) {
    outputs.push_back({"bias gradient", {dt, p.bias, p.n, 1, p.n}});
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (const auto& other : inputs) {
      if (Overlap(outputs[i].second, other.second)) {
        return Reject(CUBLAS_STATUS_INVALID_VALUE, where,
                      std::string("output ") + outputs[i].first +
                          " overlaps input " + other.first);
      }
    }
    for (size_t j = i + 1; j < outputs.size(); ++j) {
      if (Overlap(outputs[i].second, outputs[j].second)) {
        return Reject(CUBLAS_STATUS_INVALID_VALUE, where,
                      std::string("outputs ") + outputs[i].first + " and " +
                          outputs[j].first + " overlap");
      }
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

// Every pointer at least as aligned as the algorithm was chosen for.
cublasStatus_t CheckAlignments(const char* where, const Problem& p,
                               const Operands& o, const EmulatedAlgo& algo) {
  struct Pointer {
    const char* name;
    const void* value;
    uint32_t wanted;
    const char* why;
  };
  const Pointer pointers[] = {
      {"A", o.a, algo.align_a, "the preference's MIN_ALIGNMENT_A_BYTES"},
      {"B", o.b, algo.align_b, "the preference's MIN_ALIGNMENT_B_BYTES"},
      {"C", o.c, algo.align_c, "the preference's MIN_ALIGNMENT_C_BYTES"},
      {"D", o.d, algo.align_d, "the preference's MIN_ALIGNMENT_D_BYTES"},
      {"bias", p.epilogue.bias || p.epilogue.bias_grad ? p.bias : nullptr,
       algo.align_bias, "the BIAS_POINTER the heuristic saw"},
      {"aux", p.aux, algo.align_aux,
       "the EPILOGUE_AUX_POINTER the heuristic saw"},
  };
  for (const Pointer& ptr : pointers) {
    if (ptr.value == nullptr || AlignmentOf(ptr.value) >= ptr.wanted) continue;
    return Reject(CUBLAS_STATUS_INVALID_VALUE, where,
                  std::string(ptr.name) + " = " + Hex(ptr.value) + " is " +
                      std::to_string(AlignmentOf(ptr.value)) +
                      "-byte aligned, but the algorithm was chosen for " +
                      std::to_string(ptr.wanted) + " bytes (" + ptr.why +
                      "); on a GPU it may fault or compute garbage");
  }
  return CUBLAS_STATUS_SUCCESS;
}

// The algorithm to hold the call to: the caller's, or for NULL the
// implicit heuristic's with the default preference.
cublasStatus_t AlgoFor(const char* where, const cublasLtMatmulAlgo_t* algo,
                       const Problem& p, EmulatedAlgo* out) {
  if (algo == nullptr) {
    *out = EmulatedAlgo{
        kAlgoMagic,         0, 256, 256, 256, 256, AlignmentOf(p.bias),
        AlignmentOf(p.aux), 0};
    return CUBLAS_STATUS_SUCCESS;
  }
  std::memcpy(out, algo, sizeof *out);
  if (out->magic != kAlgoMagic) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, where,
                  "algo was not written by cublasLtMatmulAlgoGetHeuristic");
  }
  return CUBLAS_STATUS_SUCCESS;
}

void Compute(const Problem& p, const Operands& o) {
  const GemmOperands g{p.trans_a, p.trans_b,      p.m,           p.n,
                       p.k,       Ref(*p.a, o.a), Ref(*p.b, o.b)};
  const cudaDataType ct = p.c->type, dt = p.d->type;
  const Epilogue& ep = p.epilogue;
  if (ep.bias_grad) {  // column j of op(B), summed in fp32 over p ascending
    for (int64_t j = 0; j < p.n; ++j) {
      float sum = 0.f;
      for (int64_t k = 0; k < p.k; ++k) {
        sum += LoadElement(g.b.type, g.b.data,
                           g.trans_b ? j + k * g.b.ld : k + j * g.b.ld);
      }
      StoreElement(dt, const_cast<void*>(p.bias), j, sum);
    }
  }
  ForEachProduct(g, [&](int64_t i, int64_t j, float sum) {
    float v = o.alpha * sum;
    if (o.beta != 0) v += o.beta * LoadElement(ct, o.c, i + j * p.c->ld);
    if (ep.dgelu) {
      v *= GeluTanhGrad(LoadElement(dt, p.aux, i + j * p.aux_ld));
    }
    if (ep.bias) v += LoadElement(dt, p.bias, i);
    if (ep.aux_out) {
      StoreElement(dt, const_cast<void*>(p.aux), i + j * p.aux_ld, v);
    }
    if (ep.gelu) v = GeluTanh(v);
    StoreElement(dt, o.d, i + j * p.d->ld, v);
  });
}

std::atomic<int> last_candidate{-1};
std::atomic<int> bias_gradients{0};

}  // namespace

int LastLtMatmulCandidate() { return last_candidate.load(); }
int LtMatmulBiasGradients() { return bias_gradients.load(); }

}  // namespace trainyard::cuda_emulation

using ::trainyard::cuda_emulation::Reject;

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
    cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
    cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
    int* returnAlgoCount) {
  namespace emu = ::trainyard::cuda_emulation;
  constexpr const char* kWhere = "cublasLtMatmulAlgoGetHeuristic";
  if (requestedAlgoCount <= 0) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, kWhere,
                  "requestedAlgoCount <= 0");
  }
  if (heuristicResultsArray == nullptr || returnAlgoCount == nullptr) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, kWhere,
                  "heuristicResultsArray or returnAlgoCount is NULL");
  }
  emu::Problem p;
  if (const cublasStatus_t s = emu::CheckProblem(
          kWhere, lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, &p);
      s != CUBLAS_STATUS_SUCCESS) {
    return s;
  }
  const emu::PreferenceRecord* pref = emu::FindPreference(preference);
  if (pref == nullptr) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, kWhere,
                  "not a live preference descriptor");
  }
  const uint64_t* v = pref->values;
  if (v[CUBLASLT_MATMUL_PREF_SEARCH_MODE] != 0) {
    return Reject(CUBLAS_STATUS_NOT_SUPPORTED, kWhere,
                  "search modes other than BEST_FIT are not emulated");
  }
  const int count = std::min(requestedAlgoCount, emu::kEmulatedAlgoCandidates);
  for (int i = 0; i < count; ++i) {
    const emu::EmulatedAlgo algo{
        emu::kAlgoMagic,
        v[CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES],
        emu::AlignmentFromPreference(
            v[CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES]),
        emu::AlignmentFromPreference(
            v[CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES]),
        emu::AlignmentFromPreference(
            v[CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES]),
        emu::AlignmentFromPreference(
            v[CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES]),
        emu::AlignmentOf(p.bias),
        emu::AlignmentOf(p.aux),
        i};
    cublasLtMatmulHeuristicResult_t& result = heuristicResultsArray[i];
    result = {};
    std::memcpy(&result.algo, &algo, sizeof algo);
    result.workspaceSize = algo.workspace_bytes;
    result.state = CUBLAS_STATUS_SUCCESS;
    result.wavesCount = 1.f;
  }
  *returnAlgoCount = count;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
    const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc,
    const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
    const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
    cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
    void* workspace, size_t workspaceSizeInBytes, cudaStream_t /*stream*/) {
  namespace emu = ::trainyard::cuda_emulation;
  constexpr const char* kWhere = "cublasLtMatmul";
  emu::Problem p;
  if (const cublasStatus_t s = emu::CheckProblem(
          kWhere, lightHandle, computeDesc, Adesc, Bdesc, Cdesc, Ddesc, &p);
      s != CUBLAS_STATUS_SUCCESS) {
    return s;
  }
  emu::EmulatedAlgo chosen;
  if (const cublasStatus_t s = emu::AlgoFor(kWhere, algo, p, &chosen);
      s != CUBLAS_STATUS_SUCCESS) {
    return s;
  }
  if (workspaceSizeInBytes < chosen.workspace_bytes ||
      (chosen.workspace_bytes > 0 && workspace == nullptr)) {
    return Reject(
        CUBLAS_STATUS_INVALID_VALUE, kWhere,
        "workspace " +
            (workspace == nullptr ? std::string("NULL") : emu::Hex(workspace)) +
            " of " + std::to_string(workspaceSizeInBytes) +
            " bytes; the algorithm needs " +
            std::to_string(chosen.workspace_bytes) + " bytes");
  }
  if (alpha == nullptr || beta == nullptr) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, kWhere, "alpha or beta is NULL");
  }
  emu::Operands o{A,
                  B,
                  C,
                  D,
                  *static_cast<const float*>(alpha),
                  *static_cast<const float*>(beta)};
  for (auto check : {emu::CheckPresent, emu::CheckOverlaps}) {
    if (const cublasStatus_t s = check(kWhere, p, o);
        s != CUBLAS_STATUS_SUCCESS) {
      return s;
    }
  }
  if (const cublasStatus_t s = emu::CheckAlignments(kWhere, p, o, chosen);
      s != CUBLAS_STATUS_SUCCESS) {
    return s;
  }
  if (p.m > 0 && p.n > 0) emu::Compute(p, o);
  emu::last_candidate.store(chosen.candidate);
  if (p.epilogue.bias_grad) ++emu::bias_gradients;
  return CUBLAS_STATUS_SUCCESS;
}
