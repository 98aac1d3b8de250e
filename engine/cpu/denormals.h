// Denormal (subnormal) floats flushed to zero on the CPU backend's threads.
//
// x86 cores take a microcode assist, of the order of a hundred cycles,
// for each arithmetic instruction that reads or makes a denormal. Training
// makes them in bulk: the softmax of a confident classifier (exp of a logit far
// below the row's max), the gradients flowing back from it, AdamW's second
// moments of tiny gradients. Without flushing, an MLP on MNIST stepped 2.6x
// slower at lr 0.003 and 8.6x slower at lr 0.1 than at lr 1e-5, for the
// same arithmetic (docs/BENCHMARKS.md, 2026-11-26). With FTZ (results
// below FLT_MIN become 0) and DAZ (such inputs read as 0) every step costs
// the same; only values below 1.2e-38 change, and results are still
// bitwise the same from run to run and for any thread count.
#ifndef TRAINYARD_ENGINE_CPU_DENORMALS_H_
#define TRAINYARD_ENGINE_CPU_DENORMALS_H_

namespace trainyard::engine {

// Sets FTZ and DAZ for the calling thread (MXCSR on x86-64, FPCR.FZ on
// AArch64; nothing elsewhere). The mode is per thread and threads started
// afterwards inherit it.
void FlushDenormalsOnThisThread();

// Whether the calling thread flushes denormals (tests).
bool DenormalsFlushedOnThisThread();

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CPU_DENORMALS_H_
