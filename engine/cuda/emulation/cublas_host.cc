// Host stand-ins for the part of cuBLASLt and classic cuBLAS the project
// uses (cuda_include/cublasLt.h, cublas_v2.h), so engine/cuda/lt_gemm.cc
// compiles unchanged and its products run on the CPU. This file: the
// shared pieces (cublas_host.h), the handles and the descriptors, which
// record their attributes. cublas_lt_matmul.cc: the heuristic and the
// matmul. cublas_classic_host.cc: cublasSgemm and cublasGemmEx.
//
// What is computed. D = epilogue(alpha op(A) op(B) + beta C + bias),
// column-major, as the cuBLAS guide states cublasLtMatmul(): the products
// and their sum in fp32, in k order; C not read when beta == 0; bf16
// widened exactly; D (and a GELU aux matrix) rounded once from fp32,
// to nearest even for bf16. GELU is GPT-2's tanh form, in fp32. The
// bias-gradient epilogue BGRADB writes, for each of D's n columns j, the
// sum over k of op(B)(k, j) ("The bias size corresponds to the number of
// columns of the matrix D. The reduction happens over the GEMM's "k"
// dimension"), in fp32 in k order, rounded once to D's type ("Bias
// gradient vector elements are the same type as the output elements").
// Calls are synchronous on the host; the stream is ignored.
//
// What is checked (quotes from cublasLt.h and cublas_api.h of CUDA 13,
// [guide] for the cuBLAS guide). The stand-in rejects what the real
// library is documented to reject, with the documented status, so a bug
// in the caller shows on the CPU, not on the first GPU run; each
// rejection prints why to stderr. Where the real library would not
// reject but misbehave (a fault, a wrong result), the stand-in fails the
// call too, with CUBLAS_STATUS_INVALID_VALUE.
//  - Set*Attribute: buf NULL, a size other than the attribute's, an
//    attribute that does not exist: INVALID_VALUE ("if buf is NULL or
//    sizeInBytes doesn't match size of internal storage").
//  - Descriptors, at the heuristic and at the matmul: m, n, k inferred
//    from the layouts; A, B, C, D must agree (op(A) m x k, op(B) k x n,
//    C and D m x n) and ld >= rows ("must be large enough so that matrix
//    memory locations are not overlapping"), else INVALID_VALUE; ld 0 is
//    allowed for an out-of-place C only ([guide]: a broadcast C). Types:
//    A = B, C = D ([guide]: out-of-place C and D "must have the same data
//    type"), and the [guide]'s table for CUBLAS_COMPUTE_32F(_PEDANTIC)
//    with scale type CUDA_R_32F: A/B fp32 with C/D fp32, A/B bf16 with C/D
//    bf16 or fp32; any other combination NOT_SUPPORTED. TRANSA/TRANSB
//    must name an operation (INVALID_VALUE); TRANSC other than N:
//    NOT_SUPPORTED ("Currently only CUBLAS_OP_N is supported"). Sizes past
//    int32: NOT_SUPPORTED ("Usually only values that can be expressed as
//    int32_t are supported").
//  - Epilogues: BIAS_DATA_TYPE other than -1 or D's type: INVALID_VALUE
//    ("Bias vector elements are the same type as the elements of output
//    matrix (Dtype)"); the GELU aux matrix: EPILOGUE_AUX_LD not a
//    multiple of 8 or below D's rows ("Must be divisible by 8 and be no
//    less than the number of rows in the output matrix"), or
//    EPILOGUE_AUX_DATA_TYPE other than -1 or D's type ("GELU input matrix
//    elements type is the same as the type of elements of the output
//    matrix"): INVALID_VALUE. At the matmul, a NULL bias (BIAS and BGRADB
//    epilogues) or aux pointer (AUX and DGELU epilogues): INVALID_VALUE.
//    BGRADB with alpha other than 1: NOT_SUPPORTED (the headers do not
//    say whether the bias gradient is scaled).
//  - The heuristic: requestedAlgoCount <= 0, NULL outputs: INVALID_VALUE.
//    Its one result needs the preference's MAX_WORKSPACE_BYTES in full
//    (the most it may) and pointers aligned to the preference's
//    MIN_ALIGNMENT_*_BYTES ("Selecting a smaller value will exclude
//    algorithms that can not work with matrix A that is not as strictly
//    aligned as they need"), and to the alignments of the bias and aux
//    pointers in the descriptor at that time (the heuristic "depend[s] on
//    its value to determine expected pointer alignment"; NULL counts as
//    256-byte aligned).
//  - The matmul: a workspace smaller than the algorithm's (INVALID_VALUE,
//    "when workspaceSizeInBytes is less than workspace required by
//    configured algo") or NULL with a size; an algo that no heuristic
//    wrote; NULL alpha, beta, A, B, D, or C with beta != 0; C == D with
//    layouts that differ ([guide]: in place needs "Cdesc == Ddesc"); an
//    output (D, the GELU aux matrix, the bias gradient) overlapping an
//    input or another output; a pointer less
//    aligned than the algorithm was chosen for: INVALID_VALUE, naming the
//    pointer. An algo from the heuristic for other descriptors is used as
//    it is (the real library does not check either), and a NULL algo runs
//    an implicit heuristic with the default preference ([guide]: no
//    workspace, 256-byte alignment).
//  - Handles: NULL or destroyed handles and descriptors: NOT_INITIALIZED
//    for handles, INVALID_VALUE for descriptors (the real library may
//    crash instead).
//  - Classic cuBLAS: see cublas_classic_host.cc.
//
// Not emulated: the choice among algorithms and what it changes (split-K,
// other summation orders, fused multiply-adds), TF32 and the other fast
// or reduced-precision modes, algorithms the real library lacks for some
// shapes or alignments, timing, asynchrony. Attributes the emulation
// does not reproduce (scale and amax pointers, scale modes, emulation
// descriptors, other pointer modes, fill modes, the RELU epilogues and
// the bias-gradient ones other than BGRADB, other types and compute
// types) give
// NOT_SUPPORTED with a line saying it is the emulation's limit.
//
// Thread-safety: as the real library: a handle or descriptor is used by
// one thread at a time; distinct ones from any threads.
#include "engine/cuda/emulation/cublas_host.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "engine/cuda/emulation/bf16.h"

struct cublasLtContext {
  int unused = 0;
};

namespace trainyard::cuda_emulation {
namespace {

struct Registry {
  std::mutex mu;
  std::unordered_map<const void*, ObjectKind> live;
};

Registry& Objects() {
  static Registry* registry = new Registry;
  return *registry;
}

// The attributes of cublasLt.h, their sizes and defaults.
struct AttributeSpec {
  int attr;
  size_t size;
  uint64_t default_bits;
  // Whether a value other than the default is reproduced (or makes no
  // difference with one matrix per layout and no fp8).
  bool emulated;
  const char* name;
};

constexpr uint64_t kMinusOne32 = 0xffffffffu;

constexpr AttributeSpec kDescAttributes[] = {
    {CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, 4, 0, true, "COMPUTE_TYPE"},
    {CUBLASLT_MATMUL_DESC_SCALE_TYPE, 4, 0, true, "SCALE_TYPE"},
    {CUBLASLT_MATMUL_DESC_POINTER_MODE, 4, 0, true, "POINTER_MODE"},
    {CUBLASLT_MATMUL_DESC_TRANSA, 4, CUBLAS_OP_N, true, "TRANSA"},
    {CUBLASLT_MATMUL_DESC_TRANSB, 4, CUBLAS_OP_N, true, "TRANSB"},
    {CUBLASLT_MATMUL_DESC_TRANSC, 4, CUBLAS_OP_N, true, "TRANSC"},
    {CUBLASLT_MATMUL_DESC_FILL_MODE, 4, 2 /* FULL */, false, "FILL_MODE"},
    {CUBLASLT_MATMUL_DESC_EPILOGUE, 4, CUBLASLT_EPILOGUE_DEFAULT, true,
     "EPILOGUE"},
    {CUBLASLT_MATMUL_DESC_BIAS_POINTER, sizeof(void*), 0, true, "BIAS_POINTER"},
    {CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, 8, 0, true, "BIAS_BATCH_STRIDE"},
    {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, sizeof(void*), 0, true,
     "EPILOGUE_AUX_POINTER"},
    {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, 8, 0, true, "EPILOGUE_AUX_LD"},
    {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, 8, 0, true,
     "EPILOGUE_AUX_BATCH_STRIDE"},
    {CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE, 8, 0, true,
     "ALPHA_VECTOR_BATCH_STRIDE"},
    {CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, 4, 0, true, "SM_COUNT_TARGET"},
    {CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, sizeof(void*), 0, false,
     "A_SCALE_POINTER"},
    {CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, sizeof(void*), 0, false,
     "B_SCALE_POINTER"},
    {CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, sizeof(void*), 0, false,
     "C_SCALE_POINTER"},
    {CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, sizeof(void*), 0, false,
     "D_SCALE_POINTER"},
    {CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, sizeof(void*), 0, false,
     "AMAX_D_POINTER"},
    {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, 4, kMinusOne32, true,
     "EPILOGUE_AUX_DATA_TYPE"},
    {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER, sizeof(void*), 0, false,
     "EPILOGUE_AUX_SCALE_POINTER"},
    {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER, sizeof(void*), 0, false,
     "EPILOGUE_AUX_AMAX_POINTER"},
    // fp8 only.
    {CUBLASLT_MATMUL_DESC_FAST_ACCUM, 1, 0, true, "FAST_ACCUM"},
    {CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, 4, kMinusOne32, true,
     "BIAS_DATA_TYPE"},
    {CUBLASLT_MATMUL_DESC_A_SCALE_MODE, 4, 0, false, "A_SCALE_MODE"},
    {CUBLASLT_MATMUL_DESC_B_SCALE_MODE, 4, 0, false, "B_SCALE_MODE"},
    {CUBLASLT_MATMUL_DESC_C_SCALE_MODE, 4, 0, false, "C_SCALE_MODE"},
    {CUBLASLT_MATMUL_DESC_D_SCALE_MODE, 4, 0, false, "D_SCALE_MODE"},
    {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_MODE, 4, 0, false,
     "EPILOGUE_AUX_SCALE_MODE"},
    {CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER, sizeof(void*), 0, false,
     "D_OUT_SCALE_POINTER"},
    {CUBLASLT_MATMUL_DESC_D_OUT_SCALE_MODE, 4, 0, false, "D_OUT_SCALE_MODE"},
    {CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR, sizeof(void*), 0, false,
     "EMULATION_DESCRIPTOR"},
};

constexpr AttributeSpec kPreferenceAttributes[] = {
    {CUBLASLT_MATMUL_PREF_SEARCH_MODE, 4, 0, true, "SEARCH_MODE"},
    {CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, 8, 0, true,
     "MAX_WORKSPACE_BYTES"},
    {CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, 4, 0x7, true,
     "REDUCTION_SCHEME_MASK"},
    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, 4, 256, true,
     "MIN_ALIGNMENT_A_BYTES"},
    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, 4, 256, true,
     "MIN_ALIGNMENT_B_BYTES"},
    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, 4, 256, true,
     "MIN_ALIGNMENT_C_BYTES"},
    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, 4, 256, true,
     "MIN_ALIGNMENT_D_BYTES"},
    {CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT, 4, 0, true, "MAX_WAVES_COUNT"},
    {CUBLASLT_MATMUL_PREF_IMPL_MASK, 8, ~uint64_t{0}, true, "IMPL_MASK"},
};

template <size_t N>
const AttributeSpec* FindSpec(const AttributeSpec (&specs)[N], int attr) {
  for (const AttributeSpec& spec : specs) {
    if (spec.attr == attr) return &spec;
  }
  return nullptr;
}

// Checks a Set*Attribute call and returns the value's bits.
template <size_t N>
cublasStatus_t ReadAttribute(const char* where, const AttributeSpec (&specs)[N],
                             int attr, const void* buf, size_t size,
                             uint64_t* bits) {
  const AttributeSpec* spec = FindSpec(specs, attr);
  if (spec == nullptr) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, where,
                  "no attribute " + std::to_string(attr));
  }
  if (buf == nullptr) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, where,
                  std::string(spec->name) + ": buf is NULL");
  }
  if (size != spec->size) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, where,
                  std::string(spec->name) + " takes " +
                      std::to_string(spec->size) + " bytes, got " +
                      std::to_string(size));
  }
  *bits = 0;
  std::memcpy(bits, buf, size);  // little-endian: zero-extended
  return CUBLAS_STATUS_SUCCESS;
}

// A Set*Attribute call on `record` (null when the handle is not a live
// `what`): checked by ReadAttribute, then stored.
template <typename Record, size_t N>
cublasStatus_t StoreAttribute(const char* where, Record* record,
                              const char* what, const AttributeSpec (&specs)[N],
                              int attr, const void* buf, size_t size) {
  if (record == nullptr) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, where,
                  std::string("not a live ") + what);
  }
  uint64_t bits;
  if (const cublasStatus_t s =
          ReadAttribute(where, specs, attr, buf, size, &bits);
      s != CUBLAS_STATUS_SUCCESS) {
    return s;
  }
  record->values[attr] = bits;
  return CUBLAS_STATUS_SUCCESS;
}

template <typename Record, typename Pointer>
const Record* Find(Pointer p, ObjectKind kind) {
  if (p == nullptr || !IsLiveObject(p, kind)) return nullptr;
  return reinterpret_cast<const Record*>(p);
}

template <typename Record, typename Pointer>
cublasStatus_t Destroy(const char* where, Pointer p, ObjectKind kind) {
  if (p == nullptr) return CUBLAS_STATUS_SUCCESS;
  if (!UnregisterObject(p, kind)) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, where,
                  "not a live descriptor (destroyed twice?)");
  }
  delete reinterpret_cast<Record*>(p);
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

// ------------------------------------------------------------- matrices

bool IsEmulatedType(cudaDataType type) {
  return type == CUDA_R_32F || type == CUDA_R_16BF;
}

size_t ElementBytes(cudaDataType type) { return type == CUDA_R_32F ? 4 : 2; }

float LoadElement(cudaDataType type, const void* data, int64_t index) {
  if (type == CUDA_R_32F) return static_cast<const float*>(data)[index];
  return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[index]);
}

void StoreElement(cudaDataType type, void* data, int64_t index, float value) {
  if (type == CUDA_R_32F) {
    static_cast<float*>(data)[index] = value;
  } else {
    static_cast<__nv_bfloat16*>(data)[index] = __float2bfloat16_rn(value);
  }
}

bool Overlap(const MatrixRef& x, const MatrixRef& y) {
  if (x.rows <= 0 || x.cols <= 0 || y.rows <= 0 || y.cols <= 0) return false;
  const auto extent = [](const MatrixRef& m, uintptr_t* lo, uintptr_t* hi) {
    const int64_t e = static_cast<int64_t>(ElementBytes(m.type));
    *lo = reinterpret_cast<uintptr_t>(m.data);
    *hi = *lo + static_cast<uintptr_t>(((m.cols - 1) * m.ld + m.rows) * e);
  };
  uintptr_t xlo, xhi, ylo, yhi;
  extent(x, &xlo, &xhi);
  extent(y, &ylo, &yhi);
  const uintptr_t lo = std::max(xlo, ylo), hi = std::min(xhi, yhi);
  if (lo >= hi) return false;
  // The extents meet: mark x's bytes there, then look for y's.
  std::vector<bool> marked(hi - lo);
  const auto columns = [lo, hi](const MatrixRef& m, auto&& visit) {
    const uintptr_t e = ElementBytes(m.type);
    for (int64_t j = 0; j < m.cols; ++j) {
      const uintptr_t start =
          reinterpret_cast<uintptr_t>(m.data) + j * m.ld * e;
      const uintptr_t from = std::max(start, lo);
      const uintptr_t to = std::min(start + m.rows * e, hi);
      for (uintptr_t b = from; b < to; ++b) {
        if (visit(b - lo)) return true;
      }
    }
    return false;
  };
  columns(x, [&marked](uintptr_t b) {
    marked[b] = true;
    return false;
  });
  return columns(y, [&marked](uintptr_t b) { return marked[b]; });
}

namespace {
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;
}  // namespace

float GeluTanh(float x) {
  const float u = kGeluScale * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.f + std::tanh(u));
}

float GeluTanhGrad(float x) {
  const float x2 = x * x;
  const float t = std::tanh(kGeluScale * (x + kGeluCubic * x * x2));
  const float du = kGeluScale * (1.f + 3.f * kGeluCubic * x2);
  return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * du;
}

// ----------------------------------------------------- status, registry

cublasStatus_t Reject(cublasStatus_t status, const char* where,
                      const std::string& what) {
  std::fprintf(stderr, "[emulated cuBLAS] %s: %s (%s)\n", where, what.c_str(),
               cublasLtGetStatusName(status));
  return status;
}

void RegisterObject(const void* object, ObjectKind kind) {
  Registry& r = Objects();
  std::lock_guard<std::mutex> lock(r.mu);
  r.live[object] = kind;
}

bool UnregisterObject(const void* object, ObjectKind kind) {
  Registry& r = Objects();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.live.find(object);
  if (it == r.live.end() || it->second != kind) return false;
  r.live.erase(it);
  return true;
}

bool IsLiveObject(const void* object, ObjectKind kind) {
  Registry& r = Objects();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.live.find(object);
  return it != r.live.end() && it->second == kind;
}

// --------------------------------------------------- cuBLASLt records

const LayoutRecord* FindLayout(cublasLtMatrixLayout_t layout) {
  return Find<LayoutRecord>(layout, ObjectKind::kMatrixLayout);
}

const DescRecord* FindDesc(cublasLtMatmulDesc_t desc) {
  return Find<DescRecord>(desc, ObjectKind::kMatmulDesc);
}

const PreferenceRecord* FindPreference(cublasLtMatmulPreference_t pref) {
  return Find<PreferenceRecord>(pref, ObjectKind::kPreference);
}

const char* DescAttributeName(int attr) {
  const AttributeSpec* spec = FindSpec(kDescAttributes, attr);
  return spec == nullptr ? "unknown attribute" : spec->name;
}

bool HasUnemulatedDescValue(const DescRecord& desc, int* attr) {
  for (const AttributeSpec& spec : kDescAttributes) {
    if (!spec.emulated && desc.values[spec.attr] != spec.default_bits) {
      *attr = spec.attr;
      return true;
    }
  }
  return false;
}

}  // namespace trainyard::cuda_emulation

using ::trainyard::cuda_emulation::DescRecord;
using ::trainyard::cuda_emulation::LayoutRecord;
using ::trainyard::cuda_emulation::ObjectKind;
using ::trainyard::cuda_emulation::PreferenceRecord;
using ::trainyard::cuda_emulation::Reject;

// ------------------------------------------------------ status strings

const char* cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "licensing error";
  }
  return "unknown cuBLAS status";
}

// ------------------------------------------------------------- handle

cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
  if (lightHandle == nullptr) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate",
                  "lightHandle is NULL");
  }
  *lightHandle = new cublasLtContext;
  ::trainyard::cuda_emulation::RegisterObject(*lightHandle,
                                              ObjectKind::kLtHandle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (!::trainyard::cuda_emulation::UnregisterObject(lightHandle,
                                                     ObjectKind::kLtHandle)) {
    return Reject(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy",
                  "not a live cuBLASLt handle");
  }
  delete lightHandle;
  return CUBLAS_STATUS_SUCCESS;
}

// ------------------------------------------------------- matrix layout

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout,
                                          cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (matLayout == nullptr) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutCreate",
                  "matLayout is NULL");
  }
  // Values are checked where the real library checks them, at the
  // heuristic and the matmul.
  auto* record = new LayoutRecord{{}, type, rows, cols, ld};
  *matLayout = &record->opaque;
  ::trainyard::cuda_emulation::RegisterObject(*matLayout,
                                              ObjectKind::kMatrixLayout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  return ::trainyard::cuda_emulation::Destroy<LayoutRecord>(
      "cublasLtMatrixLayoutDestroy", matLayout, ObjectKind::kMatrixLayout);
}

// ------------------------------------------------------- matmul desc

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc,
                                        cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  using ::trainyard::cuda_emulation::kDescAttributes;
  if (matmulDesc == nullptr) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescCreate",
                  "matmulDesc is NULL");
  }
  auto* record = new DescRecord{};
  for (const auto& spec : kDescAttributes) {
    record->values[spec.attr] = spec.default_bits;
  }
  record->values[CUBLASLT_MATMUL_DESC_COMPUTE_TYPE] =
      static_cast<uint32_t>(computeType);
  record->values[CUBLASLT_MATMUL_DESC_SCALE_TYPE] =
      static_cast<uint32_t>(scaleType);
  *matmulDesc = &record->opaque;
  ::trainyard::cuda_emulation::RegisterObject(*matmulDesc,
                                              ObjectKind::kMatmulDesc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  return ::trainyard::cuda_emulation::Destroy<DescRecord>(
      "cublasLtMatmulDescDestroy", matmulDesc, ObjectKind::kMatmulDesc);
}

cublasStatus_t cublasLtMatmulDescSetAttribute(
    cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
    const void* buf, size_t sizeInBytes) {
  namespace emu = ::trainyard::cuda_emulation;
  return emu::StoreAttribute("cublasLtMatmulDescSetAttribute",
                             emu::FindDesc(matmulDesc) == nullptr
                                 ? nullptr
                                 : reinterpret_cast<DescRecord*>(matmulDesc),
                             "matmul descriptor", emu::kDescAttributes, attr,
                             buf, sizeInBytes);
}

// --------------------------------------------------------- preference

cublasStatus_t cublasLtMatmulPreferenceCreate(
    cublasLtMatmulPreference_t* pref) {
  using ::trainyard::cuda_emulation::kPreferenceAttributes;
  if (pref == nullptr) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceCreate",
                  "pref is NULL");
  }
  auto* record = new PreferenceRecord{};
  for (const auto& spec : kPreferenceAttributes) {
    record->values[spec.attr] = spec.default_bits;
  }
  *pref = &record->opaque;
  ::trainyard::cuda_emulation::RegisterObject(*pref, ObjectKind::kPreference);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(
    cublasLtMatmulPreference_t pref) {
  return ::trainyard::cuda_emulation::Destroy<PreferenceRecord>(
      "cublasLtMatmulPreferenceDestroy", pref, ObjectKind::kPreference);
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
    const void* buf, size_t sizeInBytes) {
  namespace emu = ::trainyard::cuda_emulation;
  return emu::StoreAttribute("cublasLtMatmulPreferenceSetAttribute",
                             emu::FindPreference(pref) == nullptr
                                 ? nullptr
                                 : reinterpret_cast<PreferenceRecord*>(pref),
                             "preference descriptor",
                             emu::kPreferenceAttributes, attr, buf,
                             sizeInBytes);
}
