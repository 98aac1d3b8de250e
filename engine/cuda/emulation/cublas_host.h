// The pieces the host stand-ins for cuBLASLt (cublas_host.cc,
// cublas_lt_matmul.cc) and classic cuBLAS (cublas_classic_host.cc) share:
// column-major matrices in emulated device memory (host memory) read and
// written as fp32 or bf16, the fp32 product loop, GPT-2's tanh GELU, the
// registry of live handles and descriptors, and the cuBLASLt descriptor
// records. Internal to the emulation; code under test includes the shims
// (cuda_include/cublasLt.h, cublas_v2.h) instead.
//
// Thread-safety: the registry is locked; a record, like a real descriptor,
// must not be changed by one thread while another uses it.
#ifndef TRAINYARD_ENGINE_CUDA_EMULATION_CUBLAS_HOST_H_
#define TRAINYARD_ENGINE_CUDA_EMULATION_CUBLAS_HOST_H_

#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace trainyard::cuda_emulation {

// ------------------------------------------------------------- matrices

// A column-major matrix: element (i, j) at data[i + j * ld].
struct MatrixRef {
  cudaDataType type = CUDA_R_32F;
  const void* data = nullptr;
  int64_t rows = 0, cols = 0, ld = 0;
};

// The element types the emulation computes with: CUDA_R_32F, CUDA_R_16BF.
bool IsEmulatedType(cudaDataType type);
// 4 or 2 bytes for the emulated types.
size_t ElementBytes(cudaDataType type);
// REQUIRES: IsEmulatedType(type).
float LoadElement(cudaDataType type, const void* data, int64_t index);
// Rounds to nearest even for bf16. REQUIRES: IsEmulatedType(type).
void StoreElement(cudaDataType type, void* data, int64_t index, float value);

// Whether any byte of an element of x is a byte of an element of y
// (exact: matrices interleaved within each other's ld padding do not
// overlap). Empty matrices overlap nothing.
bool Overlap(const MatrixRef& x, const MatrixRef& y);

// GPT-2's GELU, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), and its
// derivative, in fp32.
float GeluTanh(float x);
float GeluTanhGrad(float x);

// op(A) [m x k] . op(B) [k x n], A stored k x m when trans_a (else m x k),
// B stored n x k when trans_b (else k x n).
struct GemmOperands {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  MatrixRef a, b;
};

// Calls emit(i, j, sum) for every element of the m x n product, column by
// column, where sum is the fp32 sum over p = 0, 1, ..., k-1, in that order,
// of the fp32 products op(A)(i, p) op(B)(p, j), starting from 0. Both
// operands are read in full before the first emit, so emit may write
// anywhere but A and B's elements are read as they were.
template <typename Emit>
void ForEachProduct(const GemmOperands& g, Emit&& emit) {
  // op(A) by rows and op(B) by columns, contiguous in p.
  std::vector<float> a(static_cast<size_t>(g.m * g.k));
  std::vector<float> b(static_cast<size_t>(g.n * g.k));
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t p = 0; p < g.k; ++p) {
      const int64_t at = g.trans_a ? p + i * g.a.ld : i + p * g.a.ld;
      a[i * g.k + p] = LoadElement(g.a.type, g.a.data, at);
    }
  }
  for (int64_t j = 0; j < g.n; ++j) {
    for (int64_t p = 0; p < g.k; ++p) {
      const int64_t at = g.trans_b ? j + p * g.b.ld : p + j * g.b.ld;
      b[j * g.k + p] = LoadElement(g.b.type, g.b.data, at);
    }
  }
  for (int64_t j = 0; j < g.n; ++j) {
    const float* bj = b.data() + j * g.k;
    for (int64_t i = 0; i < g.m; ++i) {
      const float* ai = a.data() + i * g.k;
      float sum = 0.f;
      for (int64_t p = 0; p < g.k; ++p) sum += ai[p] * bj[p];
      emit(i, j, sum);
    }
  }
}

// ----------------------------------------------------- status, registry

// Prints "[emulated cuBLAS] where: what (CUBLAS_STATUS_...)" to stderr and
// returns status: every rejection says why, as the real library's log
// would (CUBLASLT_LOG_LEVEL), without being asked.
cublasStatus_t Reject(cublasStatus_t status, const char* where,
                      const std::string& what);

enum class ObjectKind {
  kLtHandle,
  kMatrixLayout,
  kMatmulDesc,
  kPreference,
  kClassicHandle
};

void RegisterObject(const void* object, ObjectKind kind);
// False when object is not a live object of that kind.
bool UnregisterObject(const void* object, ObjectKind kind);
bool IsLiveObject(const void* object, ObjectKind kind);

// --------------------------------------------------- cuBLASLt records

// The records behind the semi-opaque descriptor pointers: each starts with
// the opaque struct the pointer designates (standard layout, so the two
// addresses are one).
struct LayoutRecord {
  cublasLtMatrixLayoutOpaque_t opaque;
  cudaDataType type;
  uint64_t rows;
  uint64_t cols;
  int64_t ld;
};

// Attribute values as their bits, zero-extended from the attribute's size
// in cublasLt.h (an int32_t -1 reads back through AsInt32).
inline constexpr int kDescAttributeSlots = 39;  // EMULATION_DESCRIPTOR + 1
struct DescRecord {
  cublasLtMatmulDescOpaque_t opaque;
  uint64_t values[kDescAttributeSlots];
};

inline constexpr int kPreferenceAttributeSlots = 13;  // IMPL_MASK + 1
struct PreferenceRecord {
  cublasLtMatmulPreferenceOpaque_t opaque;
  uint64_t values[kPreferenceAttributeSlots];
};

static_assert(std::is_standard_layout_v<LayoutRecord> &&
              std::is_standard_layout_v<DescRecord> &&
              std::is_standard_layout_v<PreferenceRecord>);

inline int32_t AsInt32(uint64_t bits) {
  return static_cast<int32_t>(static_cast<uint32_t>(bits));
}
inline const void* AsPointer(uint64_t bits) {
  return reinterpret_cast<const void*>(static_cast<uintptr_t>(bits));
}

// The live record behind a descriptor, or null.
const LayoutRecord* FindLayout(cublasLtMatrixLayout_t layout);
const DescRecord* FindDesc(cublasLtMatmulDesc_t desc);
const PreferenceRecord* FindPreference(cublasLtMatmulPreference_t pref);

// Names of descriptor attributes, for messages.
const char* DescAttributeName(int attr);

// True when the desc attribute holds a value other than its default and
// the emulation does not reproduce what that value asks for.
bool HasUnemulatedDescValue(const DescRecord& desc, int* attr);

// ------------------------------------------------------------ algorithms

// How many algorithms the emulated heuristic offers at most (it gives
// min(this, requestedAlgoCount)); they differ only in their index and all
// compute the same product, so code that picks among them can be tested.
inline constexpr int kEmulatedAlgoCandidates = 3;

// The index, in the heuristic's answer, of the algorithm the last
// successful cublasLtMatmul ran; -1 before any.
int LastLtMatmulCandidate();

// How many successful cublasLtMatmul calls so far wrote a bias gradient
// (BGRADB), so a test can tell the epilogue ran.
int LtMatmulBiasGradients();

}  // namespace trainyard::cuda_emulation

#endif  // TRAINYARD_ENGINE_CUDA_EMULATION_CUBLAS_HOST_H_
