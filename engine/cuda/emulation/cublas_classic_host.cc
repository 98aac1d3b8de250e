// Classic cuBLAS on the host (cuda_include/cublas_api.h, cublas_v2.h):
// the handle with its stream, math mode and workspace, cublasSgemm and
// cublasGemmEx. C = alpha op(A) op(B) + beta C, column-major, pointer mode
// host, computed as the cuBLASLt stand-in computes (cublas_host.h's
// ForEachProduct: fp32 products summed in k order; C not read when beta
// is 0; bf16 C rounded once).
//
// Checked, with the statuses the cuBLAS guide gives for cublas<t>gemm(),
// cublasGemmEx() and the handle calls:
//  - A NULL or destroyed handle: NOT_INITIALIZED.
//  - m, n or k < 0; transa or transb not N, T or C; lda < max(1, m) for
//    op N, max(1, k) else; ldb < max(1, k) for op N, max(1, n) else;
//    ldc < max(1, m); alpha or beta NULL; A, B or C NULL where read:
//    INVALID_VALUE.
//  - cublasGemmEx: Atype != Btype, or types outside the guide's table for
//    CUBLAS_COMPUTE_32F(_PEDANTIC) (A/B fp32 with C fp32; A/B bf16 with C
//    bf16 or fp32): NOT_SUPPORTED; an algo that is not a cublasGemmAlgo_t:
//    NOT_SUPPORTED.
//  - cublasSetMathMode: a mode that is not a cublasMath_t: INVALID_VALUE.
//  - cublasSetWorkspace: a workspace not 256-byte aligned ("The workspace
//    pointer has to be aligned to at least 256 bytes"): INVALID_VALUE.
//    cublasSetStream resets the handle to the default workspace pool, as
//    the guide says; the stand-in records it (no routine here needs one).
//  - C overlapping A or B (undefined on a GPU): INVALID_VALUE.
// Not emulated: TF32, fp16 and bf16x9 tensor-op math for fp32 (math modes
// TENSOR_OP, TF32_TENSOR_OP, FP32_EMULATED_BF16X9 without a PEDANTIC
// compute type, and the FAST compute types give NOT_SUPPORTED), other
// types and compute types, device pointer mode, algorithm choice.
//
// Thread-safety: a handle is used by one thread at a time.
#include <cstdint>
#include <string>

#include "engine/cuda/emulation/cublas_host.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math_mode = CUBLAS_DEFAULT_MATH;
  // The user's workspace, or none (the default pool) after
  // cublasSetStream.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  bool user_workspace = false;
};

namespace trainyard::cuda_emulation {
namespace {

cublasContext* FindHandle(cublasHandle_t handle) {
  return IsLiveObject(handle, ObjectKind::kClassicHandle) ? handle : nullptr;
}

struct ClassicGemm {
  cublasOperation_t transa, transb;
  int m, n, k;
  const void* alpha;
  MatrixRef a, b;
  const void* beta;
  void* c;
  cudaDataType c_type;
  int ldc;
};

bool IsOperation(cublasOperation_t op) {
  return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

// The argument checks of the guide's cublas<t>gemm() table.
cublasStatus_t CheckArguments(const char* where, const ClassicGemm& g) {
  const auto at_least = [](int v, int lo) { return v >= std::max(1, lo); };
  std::string bad;
  if (g.m < 0 || g.n < 0 || g.k < 0) {
    bad = "m, n or k < 0";
  } else if (!IsOperation(g.transa) || !IsOperation(g.transb)) {
    bad = "transa or transb is not a cublasOperation_t";
  } else if (!at_least(g.a.ld, g.transa == CUBLAS_OP_N ? g.m : g.k)) {
    bad = "lda " + std::to_string(g.a.ld) + " too small";
  } else if (!at_least(g.b.ld, g.transb == CUBLAS_OP_N ? g.k : g.n)) {
    bad = "ldb " + std::to_string(g.b.ld) + " too small";
  } else if (!at_least(g.ldc, g.m)) {
    bad = "ldc " + std::to_string(g.ldc) + " < max(1, m)";
  } else if (g.alpha == nullptr || g.beta == nullptr) {
    bad = "alpha or beta is NULL";
  } else if (g.m > 0 && g.n > 0 && g.c == nullptr) {
    bad = "C is NULL";
  } else if (g.m > 0 && g.n > 0 && g.k > 0 &&
             (g.a.data == nullptr || g.b.data == nullptr)) {
    bad = "A or B is NULL";
  }
  if (!bad.empty()) return Reject(CUBLAS_STATUS_INVALID_VALUE, where, bad);
  return CUBLAS_STATUS_SUCCESS;
}

// Whether fp32 products run in plain fp32 under this math mode and
// compute type: the fast modes round inputs to TF32, fp16 or bf16.
bool PlainFp32(cublasMath_t mode, cublasComputeType_t compute) {
  if (compute == CUBLAS_COMPUTE_32F_PEDANTIC) return true;
  const int base = mode & 0xf;
  return base == CUBLAS_DEFAULT_MATH || base == CUBLAS_PEDANTIC_MATH;
}

cublasStatus_t RunGemm(const char* where, cublasHandle_t handle, ClassicGemm g,
                       cublasComputeType_t compute) {
  const cublasContext* context = FindHandle(handle);
  if (context == nullptr) {
    return Reject(CUBLAS_STATUS_NOT_INITIALIZED, where,
                  "not a live cuBLAS handle");
  }
  if (const cublasStatus_t s = CheckArguments(where, g);
      s != CUBLAS_STATUS_SUCCESS) {
    return s;
  }
  if (!PlainFp32(context->math_mode, compute)) {
    return Reject(CUBLAS_STATUS_NOT_SUPPORTED, where,
                  "math mode " + std::to_string(context->math_mode) +
                      " rounds fp32 inputs: not emulated");
  }
  if (g.m == 0 || g.n == 0) return CUBLAS_STATUS_SUCCESS;
  g.a.rows = g.transa == CUBLAS_OP_N ? g.m : g.k;
  g.a.cols = g.transa == CUBLAS_OP_N ? g.k : g.m;
  g.b.rows = g.transb == CUBLAS_OP_N ? g.k : g.n;
  g.b.cols = g.transb == CUBLAS_OP_N ? g.n : g.k;
  const MatrixRef c{g.c_type, g.c, g.m, g.n, g.ldc};
  if (g.k > 0 && (Overlap(c, g.a) || Overlap(c, g.b))) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, where, "C overlaps A or B");
  }
  const float alpha = *static_cast<const float*>(g.alpha);
  const float beta = *static_cast<const float*>(g.beta);
  const GemmOperands operands{g.transa != CUBLAS_OP_N,
                              g.transb != CUBLAS_OP_N,
                              g.m,
                              g.n,
                              g.k,
                              g.a,
                              g.b};
  ForEachProduct(operands, [&](int64_t i, int64_t j, float sum) {
    float v = alpha * sum;
    const int64_t at = i + j * g.ldc;
    if (beta != 0) v += beta * LoadElement(g.c_type, g.c, at);
    StoreElement(g.c_type, g.c, at, v);
  });
  return CUBLAS_STATUS_SUCCESS;
}

bool IsGemmAlgo(int algo) {
  return (algo >= -1 && algo <= 23) || (algo >= 99 && algo <= 115);
}

}  // namespace
}  // namespace trainyard::cuda_emulation

using ::trainyard::cuda_emulation::ObjectKind;
using ::trainyard::cuda_emulation::Reject;

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, "cublasCreate",
                  "handle is NULL");
  }
  *handle = new cublasContext;
  ::trainyard::cuda_emulation::RegisterObject(*handle,
                                              ObjectKind::kClassicHandle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (!::trainyard::cuda_emulation::UnregisterObject(
          handle, ObjectKind::kClassicHandle)) {
    return Reject(CUBLAS_STATUS_NOT_INITIALIZED, "cublasDestroy",
                  "not a live cuBLAS handle");
  }
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle,
                                  cudaStream_t streamId) {
  cublasContext* context = ::trainyard::cuda_emulation::FindHandle(handle);
  if (context == nullptr) {
    return Reject(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetStream",
                  "not a live cuBLAS handle");
  }
  context->stream = streamId;
  // "unconditionally resets the cuBLAS library workspace back to the
  // default workspace pool"
  context->workspace = nullptr;
  context->workspace_bytes = 0;
  context->user_workspace = false;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace,
                                     size_t workspaceSizeInBytes) {
  cublasContext* context = ::trainyard::cuda_emulation::FindHandle(handle);
  if (context == nullptr) {
    return Reject(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetWorkspace",
                  "not a live cuBLAS handle");
  }
  if (reinterpret_cast<uintptr_t>(workspace) % 256 != 0) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, "cublasSetWorkspace",
                  "the workspace pointer is not 256-byte aligned");
  }
  context->workspace = workspace;
  context->workspace_bytes = workspaceSizeInBytes;
  context->user_workspace = true;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  cublasContext* context = ::trainyard::cuda_emulation::FindHandle(handle);
  if (context == nullptr) {
    return Reject(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetMathMode",
                  "not a live cuBLAS handle");
  }
  const int base = mode & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
  if (base != CUBLAS_DEFAULT_MATH && base != CUBLAS_TENSOR_OP_MATH &&
      base != CUBLAS_PEDANTIC_MATH && base != CUBLAS_TF32_TENSOR_OP_MATH &&
      base != CUBLAS_FP32_EMULATED_BF16X9_MATH &&
      base != CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH) {
    return Reject(CUBLAS_STATUS_INVALID_VALUE, "cublasSetMathMode",
                  "mode " + std::to_string(mode) + " is not a cublasMath_t");
  }
  context->math_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k,
                              const float* alpha, const float* A, int lda,
                              const float* B, int ldb, const float* beta,
                              float* C, int ldc) {
  using ::trainyard::cuda_emulation::MatrixRef;
  const ::trainyard::cuda_emulation::ClassicGemm g{
      transa,
      transb,
      m,
      n,
      k,
      alpha,
      MatrixRef{CUDA_R_32F, A, 0, 0, lda},
      MatrixRef{CUDA_R_32F, B, 0, 0, ldb},
      beta,
      C,
      CUDA_R_32F,
      ldc};
  return ::trainyard::cuda_emulation::RunGemm("cublasSgemm", handle, g,
                                              CUBLAS_COMPUTE_32F);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k,
                            const void* alpha, const void* A,
                            cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta,
                            void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo) {
  namespace emu = ::trainyard::cuda_emulation;
  constexpr const char* kWhere = "cublasGemmEx";
  if (computeType != CUBLAS_COMPUTE_32F &&
      computeType != CUBLAS_COMPUTE_32F_PEDANTIC) {
    return Reject(
        CUBLAS_STATUS_NOT_SUPPORTED, kWhere,
        "compute type " + std::to_string(computeType) + " is not emulated");
  }
  const bool types_ok =
      Atype == Btype && emu::IsEmulatedType(Ctype) &&
      (Atype == CUDA_R_16BF || (Atype == CUDA_R_32F && Ctype == CUDA_R_32F));
  if (!types_ok) {
    return Reject(CUBLAS_STATUS_NOT_SUPPORTED, kWhere,
                  "types A " + std::to_string(Atype) + ", B " +
                      std::to_string(Btype) + ", C " + std::to_string(Ctype) +
                      ": not in the guide's table for CUBLAS_COMPUTE_32F");
  }
  if (!emu::IsGemmAlgo(algo)) {
    return Reject(
        CUBLAS_STATUS_NOT_SUPPORTED, kWhere,
        "algo " + std::to_string(algo) + " is not a cublasGemmAlgo_t");
  }
  const emu::ClassicGemm g{transa,
                           transb,
                           m,
                           n,
                           k,
                           alpha,
                           emu::MatrixRef{Atype, A, 0, 0, lda},
                           emu::MatrixRef{Btype, B, 0, 0, ldb},
                           beta,
                           C,
                           Ctype,
                           ldc};
  return emu::RunGemm(kWhere, handle, g, computeType);
}
