// Single-precision matrix multiply for the CPU backend:
//   C[m, n] += op(A)[m, k] * op(B)[k, n]
// with row-major operands and op(X) = X or X^T. It packs op(B) into
// column panels and blocks of op(A) into row panels, and runs a register-
// blocked micro-kernel over them, split into tiles across the thread pool.
//
// Determinism: each element of C accumulates its k terms in ascending order
// whatever the tiling or thread count, so results are bitwise reproducible
// (the sources build with -ffp-contract=off so no FMA contraction differs
// between the vector and edge paths).
#ifndef TRAINYARD_ENGINE_CPU_GEMM_H_
#define TRAINYARD_ENGINE_CPU_GEMM_H_

#include <cstdint>

#include "engine/cpu/thread_pool.h"

namespace trainyard::engine {

struct GemmArgs {
  bool trans_a = false;  // A is stored [k, m]
  bool trans_b = false;  // B is stored [n, k]
  int64_t m = 0, n = 0, k = 0;
  const float* a = nullptr;
  int64_t lda = 0;  // row stride of A as stored
  const float* b = nullptr;
  int64_t ldb = 0;
  float* c = nullptr;
  int64_t ldc = 0;
};

// REQUIRES: C does not alias A or B. `pool` may be null (single thread).
void Gemm(const GemmArgs& args, ThreadPool* pool);

// The plain triple loop, in the same summation order; for tests.
void GemmReference(const GemmArgs& args);

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CPU_GEMM_H_
